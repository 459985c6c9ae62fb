"""The classic rebalance across "pods" (separate KafkaGroups on separate connections) on a
real Redis: the join barrier, SyncGroup hand-off, heartbeat answers, expiry, timeouts, static
membership, leaving."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

from mapping.core import kafka_errors as errors
from tests.support.kafka_groups import TEST_SETTINGS, join, pods


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def test_member_id_required_then_join(redis_url: str) -> None:
    """JoinGroup v4+: an empty member id gets MEMBER_ID_REQUIRED and a generated id; the
    rejoin with it forms generation 1 with that member as leader."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group = _group()
            first = await pod.groups.join(
                group,
                "",
                protocol_type="consumer",
                protocols=[("range", b"m")],
                session_timeout_ms=10_000,
                client_id="app",
            )
            assert first.error == errors.MEMBER_ID_REQUIRED
            assert first.member_id.startswith("app-")
            second = await join(pod.groups, group, member_id=first.member_id)
            assert second.error == errors.NONE
            assert (second.member_id, second.generation, second.leader) == (
                first.member_id,
                1,
                first.member_id,
            )
            assert [m.member_id for m in second.members] == [first.member_id]
            assert second.protocol_name == "range"

    asyncio.run(body())


def test_two_members_on_two_pods_get_one_generation(redis_url: str) -> None:
    """Two members join at once through two pods (within the initial delay, as a group
    starting up): both answers name the same generation and leader; only the leader gets the
    member list with each member's metadata."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            protocols_a = [("range", b"meta-a")]
            protocols_b = [("range", b"meta-b")]
            ra, rb = await asyncio.gather(
                join(a.groups, group, protocols=protocols_a),
                join(b.groups, group, protocols=protocols_b),
            )
            assert ra.error == rb.error == errors.NONE
            assert ra.generation == rb.generation == 1
            assert ra.leader == rb.leader
            leader, follower = (ra, rb) if ra.leader == ra.member_id else (rb, ra)
            assert follower.members == []
            assert {m.member_id: m.metadata for m in leader.members} == {
                ra.member_id: b"meta-a",
                rb.member_id: b"meta-b",
            }

    asyncio.run(body())


def test_rejoin_barrier_across_pods_and_sync_handoff(redis_url: str) -> None:
    """A stable member on pod A; a second member joins on pod B and waits until A rejoins
    (A learns of the rebalance from its heartbeat); both answer with generation 2. The
    follower's SyncGroup on one pod waits for the leader's assignment stored through the
    other, and gets exactly its share."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            first = await join(a.groups, group)
            assert first.generation == 1
            synced = await a.groups.sync(group, first.member_id, 1, {first.member_id: b"all"})
            assert (synced.error, synced.assignment) == (errors.NONE, b"all")

            second = asyncio.create_task(join(b.groups, group))
            # the first member sees the rebalance on its next heartbeat, then rejoins
            while await a.groups.heartbeat(group, first.member_id, 1) == errors.NONE:
                await asyncio.sleep(0.01)  # the client's heartbeat interval
            assert await a.groups.heartbeat(group, first.member_id, 1) == (
                errors.REBALANCE_IN_PROGRESS
            )
            assert not second.done()
            rejoined = await join(a.groups, group, member_id=first.member_id)
            joined = await second
            assert rejoined.generation == joined.generation == 2
            assert rejoined.leader == first.member_id  # the leader stays the leader
            assert {m.member_id for m in rejoined.members} == {
                first.member_id,
                joined.member_id,
            }

            follower_sync = asyncio.create_task(b.groups.sync(group, joined.member_id, 2))
            assert await a.groups.heartbeat(group, first.member_id, 2) == errors.NONE
            assert not follower_sync.done()
            leader_sync = await a.groups.sync(
                group,
                first.member_id,
                2,
                {first.member_id: b"p0", joined.member_id: b"p1"},
                protocol_type="consumer",
                protocol_name="range",
            )
            assert leader_sync.assignment == b"p0"
            assert (leader_sync.protocol_type, leader_sync.protocol_name) == ("consumer", "range")
            follower = await follower_sync
            assert (follower.error, follower.assignment) == (errors.NONE, b"p1")

    asyncio.run(body())


def test_twenty_members_through_three_pods_form_one_generation(redis_url: str) -> None:
    """20 members joining at once through 3 pods, within the initial rebalance delay: one
    generation, one leader who gets all 20 members, every member answered."""
    settings = replace(TEST_SETTINGS, initial_rebalance_delay_ms=500)

    async def body() -> None:
        async with pods(redis_url, 3, settings) as three:
            group = _group()
            results = await asyncio.gather(
                *(join(three[n % 3].groups, group, client_id=f"c{n}") for n in range(20))
            )
            assert {r.error for r in results} == {errors.NONE}
            assert {r.generation for r in results} == {1}
            assert len({r.member_id for r in results}) == 20
            leaders = [r for r in results if r.member_id == r.leader]
            assert len(leaders) == 1
            assert {m.member_id for m in leaders[0].members} == {r.member_id for r in results}

    asyncio.run(body())


def test_heartbeat_answers(redis_url: str) -> None:
    """Heartbeat as Kafka answers it: NONE when stable, ILLEGAL_GENERATION for another
    generation, UNKNOWN_MEMBER_ID for a stranger or an unknown group, REBALANCE_IN_PROGRESS
    once a rebalance started, FENCED_INSTANCE_ID for a static member's replaced id."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            member = await join(a.groups, group, instance_id="inst-1")
            await a.groups.sync(group, member.member_id, 1, {member.member_id: b"x"})
            hb = b.groups.heartbeat
            assert await hb(group, member.member_id, 1, "inst-1") == errors.NONE
            assert await hb(group, member.member_id, 7, "inst-1") == errors.ILLEGAL_GENERATION
            assert await hb(group, "stranger", 1) == errors.UNKNOWN_MEMBER_ID
            assert await hb(_group(), "stranger", 1) == errors.UNKNOWN_MEMBER_ID
            assert await hb(group, "stranger", 1, "inst-1") == errors.FENCED_INSTANCE_ID
            newcomer = asyncio.create_task(join(b.groups, group))
            while await hb(group, member.member_id, 1) == errors.NONE:
                await asyncio.sleep(0.01)
            assert await hb(group, member.member_id, 1) == errors.REBALANCE_IN_PROGRESS
            # the newcomer's join is answered once the old member rejoins
            await join(a.groups, group, member_id=member.member_id, instance_id="inst-1")
            assert (await newcomer).generation == 2

    asyncio.run(body())


def test_session_expiry_rebalances_without_the_silent_member(redis_url: str) -> None:
    """A member that stops heartbeating is removed once its session ran out (by Redis' clock,
    applied by whichever script touches the group): the survivor is told to rejoin and
    forms the next generation alone; the expired member is unknown."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            live, silent = await asyncio.gather(
                join(a.groups, group, session_ms=60_000),
                join(b.groups, group, session_ms=300),
            )
            generation = live.generation
            while live.generation == generation:
                # the survivor heartbeats (and rejoins when told) until the silent member went
                code = await a.groups.heartbeat(group, live.member_id, generation)
                if code == errors.REBALANCE_IN_PROGRESS:
                    live = await join(a.groups, group, member_id=live.member_id)
                else:
                    assert code == errors.NONE
                    await asyncio.sleep(0.02)
            assert [m.member_id for m in live.members] == [live.member_id]
            assert await b.groups.heartbeat(group, silent.member_id, generation) == (
                errors.UNKNOWN_MEMBER_ID
            )

    asyncio.run(body())


def test_rebalance_timeout_removes_a_member_that_does_not_rejoin(redis_url: str) -> None:
    """A member with a live session that does not rejoin is dropped when the rebalance
    timeout passes; the waiting joins complete without it (woken by their deadline)."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            absent, present = await asyncio.gather(
                join(a.groups, group, rebalance_ms=400), join(b.groups, group, rebalance_ms=400)
            )
            generation = present.generation
            newcomer_joins = asyncio.create_task(join(b.groups, group, rebalance_ms=400))
            while await b.groups.heartbeat(group, present.member_id, generation) == errors.NONE:
                await asyncio.sleep(0.01)
            rejoined = await join(b.groups, group, member_id=present.member_id, rebalance_ms=400)
            newcomer = await newcomer_joins
            assert newcomer.generation == rejoined.generation == generation + 1
            leader = newcomer if newcomer.leader == newcomer.member_id else rejoined
            assert {m.member_id for m in leader.members} == {
                newcomer.member_id,
                rejoined.member_id,
            }
            assert await a.groups.heartbeat(group, absent.member_id, generation) == (
                errors.UNKNOWN_MEMBER_ID
            )

    asyncio.run(body())


async def _stable_pair(a, b, group: str, **options) -> tuple:  # noqa: ANN001
    """Two members in one generation, synced with assignments b"A" and b"B"."""
    first, second = await asyncio.gather(
        join(a.groups, group, instance_id="inst-a", **options),
        join(b.groups, group, instance_id="inst-b", **options),
    )
    leader, follower = (first, second) if first.leader == first.member_id else (second, first)
    shares = {first.member_id: b"A", second.member_id: b"B"}
    follower_sync = asyncio.create_task(
        b.groups.sync(group, follower.member_id, follower.generation)
    )
    await a.groups.sync(group, leader.member_id, leader.generation, shares)
    assert (await follower_sync).error == errors.NONE
    return first, second


def test_static_member_restart_keeps_its_assignment(redis_url: str) -> None:
    """A static member (group.instance.id) back within its session, under a new member id:
    same generation, no rebalance, its assignment back; its old member id is fenced; the
    other member carries on undisturbed."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            first, second = await _stable_pair(a, b, group)
            generation = first.generation
            restarted = await join(b.groups, group, instance_id="inst-a")  # no member id
            assert restarted.error == errors.NONE
            assert restarted.member_id != first.member_id
            assert restarted.generation == generation
            synced = await b.groups.sync(
                group, restarted.member_id, generation, group_instance_id="inst-a"
            )
            assert (synced.error, synced.assignment) == (errors.NONE, b"A")
            assert await a.groups.heartbeat(group, second.member_id, generation) == errors.NONE
            assert await a.groups.heartbeat(group, restarted.member_id, generation, "inst-a") == (
                errors.NONE
            )
            assert await a.groups.heartbeat(group, first.member_id, generation, "inst-a") == (
                errors.FENCED_INSTANCE_ID
            )
            described = await a.groups.describe_group(group)
            assert described.state == "Stable"
            assert {m.group_instance_id: m.member_id for m in described.members} == {
                "inst-a": restarted.member_id,
                "inst-b": second.member_id,
            }

    asyncio.run(body())


def test_leave_by_instance_id_rebalances_at_once(redis_url: str) -> None:
    """LeaveGroup (a batch naming a static member by instance id only, and a stranger): the
    leaver is gone at once, the stranger gets UNKNOWN_MEMBER_ID, the remaining member is
    told to rejoin and then forms the next generation alone; the last one leaving empties
    the group."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            first, second = await _stable_pair(a, b, group)
            codes = await b.groups.leave(group, [("", "inst-b"), ("stranger", None)])
            assert codes == [errors.NONE, errors.UNKNOWN_MEMBER_ID]
            assert await a.groups.heartbeat(group, first.member_id, first.generation) == (
                errors.REBALANCE_IN_PROGRESS
            )
            alone = await join(a.groups, group, member_id=first.member_id, instance_id="inst-a")
            assert alone.generation == first.generation + 1
            assert [m.member_id for m in alone.members] == [first.member_id]
            assert await a.groups.leave(group, [(first.member_id, "inst-a")]) == [errors.NONE]
            described = await b.groups.describe_group(group)
            assert (described.state, described.members) == ("Empty", [])

    asyncio.run(body())


def test_join_validation(redis_url: str) -> None:
    """The empty group id, session timeouts outside the limits, and a member offering no
    protocol the group's members support get Kafka's errors; nothing is stored for them."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group = _group()

            async def join_with(**overrides: object) -> int:
                request: dict = {
                    "protocol_type": "consumer",
                    "protocols": [("range", b"")],
                    "session_timeout_ms": 10_000,
                    "require_known_member_id": False,
                }
                request.update(overrides)
                group_id = str(request.pop("group", group))
                return (await pod.groups.join(group_id, "", **request)).error

            assert await join_with(group="") == errors.INVALID_GROUP_ID  # Kafka's only rule
            assert await join_with(session_timeout_ms=5) == errors.INVALID_SESSION_TIMEOUT
            assert await join_with(protocols=[]) == errors.INCONSISTENT_GROUP_PROTOCOL
            assert await join_with() == errors.NONE
            assert await join_with(protocols=[("roundrobin", b"")]) == (
                errors.INCONSISTENT_GROUP_PROTOCOL
            )
            assert await join_with(protocol_type="connect") == errors.INCONSISTENT_GROUP_PROTOCOL
            assert (await pod.groups.sync("", "m", 1)).error == errors.INVALID_GROUP_ID

    asyncio.run(body())


def test_protocol_chosen_by_votes(redis_url: str) -> None:
    """The protocol every member supports with the most first-choice votes wins, as in
    Kafka: two members prefer roundrobin, one prefers range, all support both."""

    async def body() -> None:
        async with pods(redis_url, 3) as three:
            group = _group()
            prefs = [
                [("range", b"1"), ("roundrobin", b"1")],
                [("roundrobin", b"2"), ("range", b"2")],
                [("roundrobin", b"3"), ("range", b"3"), ("sticky", b"3")],
            ]
            results = await asyncio.gather(
                *(join(three[n].groups, group, protocols=prefs[n]) for n in range(3))
            )
            assert {r.protocol_name for r in results} == {"roundrobin"}
            leader = next(r for r in results if r.leader == r.member_id)
            assert sorted(m.metadata for m in leader.members) == [b"1", b"2", b"3"]

    asyncio.run(body())


def test_rebalance_completes_after_a_pod_dies_mid_join(redis_url: str) -> None:
    """The leader's pod dies while its JoinGroup waits (its task is cancelled; nothing more
    comes from it): the barrier still completes on the other pod, the followers' SyncGroup
    waits end when the dead leader's session runs out (REBALANCE_IN_PROGRESS, no polling:
    the wait's timer is that expiry), and the survivors form the next generation."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            leader, other = await asyncio.gather(
                join(a.groups, group, session_ms=1000), join(b.groups, group)
            )
            if leader.leader != leader.member_id:
                leader, other = other, leader
                a, b = b, a
            newcomer = asyncio.create_task(join(b.groups, group))
            while await b.groups.heartbeat(group, other.member_id, 1) == errors.NONE:
                await asyncio.sleep(0.01)
            dying = asyncio.create_task(
                join(a.groups, group, member_id=leader.member_id, session_ms=1000)
            )
            joining = a.topics.keys.kafka_group(group).joining
            while not await a.client.hexists(joining, leader.member_id):
                await asyncio.sleep(0.01)  # until the leader's join is in the barrier
            dying.cancel()  # its pod dies: nothing more comes from it
            done = await asyncio.gather(join(b.groups, group, member_id=other.member_id), newcomer)
            assert {r.generation for r in done} == {2}
            assert {r.leader for r in done} == {leader.member_id}
            syncs = await asyncio.gather(*(b.groups.sync(group, r.member_id, 2) for r in done))
            assert {s.error for s in syncs} == {errors.REBALANCE_IN_PROGRESS}
            again = await asyncio.gather(
                *(join(b.groups, group, member_id=r.member_id) for r in done)
            )
            assert {r.generation for r in again} == {3}
            assert {r.leader for r in again} <= {r.member_id for r in done}

    asyncio.run(body())


def test_rejoins_as_kafka_answers_them(redis_url: str) -> None:
    """A member that missed its join answer (CompletingRebalance, same metadata) gets the
    same generation again; a follower rejoining a Stable group with the same metadata
    changes nothing; the leader rejoining starts a rebalance; a SyncGroup naming another
    protocol gets INCONSISTENT_GROUP_PROTOCOL; a stale generation ILLEGAL_GENERATION."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group = _group()
            first, second = await asyncio.gather(join(a.groups, group), join(b.groups, group))
            leader, follower = (
                (first, second) if first.leader == first.member_id else (second, first)
            )
            again = await join(b.groups, group, member_id=follower.member_id)
            assert (again.generation, again.leader) == (1, leader.member_id)
            wrong = await a.groups.sync(group, leader.member_id, 1, {}, protocol_name="roundrobin")
            assert wrong.error == errors.INCONSISTENT_GROUP_PROTOCOL
            assert (await a.groups.sync(group, leader.member_id, 0, {})).error == (
                errors.ILLEGAL_GENERATION
            )
            assert (await a.groups.sync(group, leader.member_id, 1, {})).error == errors.NONE
            assert (await b.groups.sync(group, follower.member_id, 1)).error == errors.NONE
            same = await join(b.groups, group, member_id=follower.member_id)
            assert same.generation == 1
            assert await a.groups.heartbeat(group, leader.member_id, 1) == errors.NONE
            rejoining_leader = asyncio.create_task(
                join(a.groups, group, member_id=leader.member_id)
            )
            while await b.groups.heartbeat(group, follower.member_id, 1) == errors.NONE:
                await asyncio.sleep(0.01)
            follower_again = await join(b.groups, group, member_id=follower.member_id)
            assert (await rejoining_leader).generation == follower_again.generation == 2

    asyncio.run(body())
