"""The KIP-848 consumer protocol (ConsumerGroupHeartbeat) across "pods" on a real Redis:
server-side assignment, revocation before hand-over, leaving, expiry, static members,
errors, and what live members keep off."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field, replace

from mapping.core import kafka_errors as errors
from mapping.kafka_group import KafkaGroups
from tests.support.kafka_groups import TEST_SETTINGS, join, pods

SETTINGS = replace(TEST_SETTINGS, consumer_session_timeout_ms=60_000)


@dataclass
class Consumer:
    """What a KIP-848 client keeps: its id, epoch and owned partitions (it revokes at once)."""

    groups: KafkaGroups
    group: str
    topics: list[str]
    instance_id: str | None = None  # a static member's (sent with the join, as librdkafka does)
    member_id: str = ""
    epoch: int = 0
    owned: dict[str, list[int]] = field(default_factory=dict)

    async def heartbeat(self, **extra: object) -> int:
        first = self.epoch == 0
        result = await self.groups.consumer_heartbeat(
            self.group,
            self.member_id,
            self.epoch,
            subscribed_topic_names=self.topics if first else None,
            instance_id=self.instance_id if first else None,
            owned=self.owned,
            **extra,  # type: ignore[arg-type]
        )
        if result.error == errors.NONE:
            self.member_id, self.epoch = result.member_id, result.member_epoch
            if result.assignment is not None:
                self.owned = result.assignment
        return result.error

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


async def _settle(consumers: list[Consumer], rounds: int = 10) -> None:
    """Heartbeat everyone a few rounds (a client's heartbeat interval, shortened)."""
    for _ in range(rounds):
        for c in consumers:
            assert await c.heartbeat() == errors.NONE
        owned = [c.partitions() for c in consumers]
        # never two owners of a partition, at any moment
        assert sum(len(o) for o in owned) == len(set().union(*owned))


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def test_members_split_partitions_without_overlap(redis_url: str) -> None:
    """The first member gets all 6 partitions; a second one (on another pod) gets its half
    only after the first gave it up; a third joins; a leaver's partitions go to the rest;
    no partition ever has two owners."""

    async def body() -> None:
        async with pods(redis_url, 3, SETTINGS) as (a, b, c):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            await a.client.hset(a.topics.keys.topic(topic), "partitions", 6)  # grown
            first = Consumer(a.groups, group, [topic])
            assert await first.heartbeat() == errors.NONE
            assert first.partitions() == {(topic, p) for p in range(6)}
            assert first.epoch >= 1

            second = Consumer(b.groups, group, [topic])
            assert await second.heartbeat() == errors.NONE
            assert second.partitions() == set()  # the first still holds everything
            await _settle([first, second])
            assert len(first.partitions()) == len(second.partitions()) == 3
            assert first.epoch == second.epoch

            third = Consumer(c.groups, group, [topic])
            await _settle([first, second, third])
            assert [len(x.partitions()) for x in (first, second, third)] == [2, 2, 2]

            result = await b.groups.consumer_heartbeat(group, second.member_id, -1)
            assert (result.error, result.member_epoch) == (errors.NONE, -1)
            await _settle([first, third])
            assert len(first.partitions()) == len(third.partitions()) == 3

            described = await c.groups.consumer_describe(group)
            assert (described.error, described.state, described.assignor) == (
                errors.NONE,
                "Stable",
                "uniform",
            )
            assert {m.member_id for m in described.members} == {first.member_id, third.member_id}

    asyncio.run(body())


def test_range_assignor_and_errors(redis_url: str) -> None:
    """ServerAssignor=range splits contiguously; a wrong epoch is FENCED_MEMBER_EPOCH, an
    unknown member UNKNOWN_MEMBER_ID, an unknown assignor UNSUPPORTED_ASSIGNOR; a commit
    with a stale member epoch STALE_MEMBER_EPOCH, with the current one NONE."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)  # 3 partitions
            one = Consumer(a.groups, group, [topic])
            two = Consumer(b.groups, group, [topic])
            assert await one.heartbeat(server_assignor="range") == errors.NONE
            assert await two.heartbeat(server_assignor="range") == errors.NONE
            await _settle([one, two])
            ranges = sorted([sorted(p for _, p in x.partitions()) for x in (one, two)])
            assert ranges == [[0, 1], [2]] or ranges == [[0], [1, 2]]
            hb = a.groups.consumer_heartbeat
            assert (await hb(group, one.member_id, one.epoch + 5)).error == (
                errors.FENCED_MEMBER_EPOCH
            )
            assert (await hb(group, "nobody", 3)).error == errors.UNKNOWN_MEMBER_ID
            assert (
                await hb(group, "", 0, subscribed_topic_names=[topic], server_assignor="x")
            ).error == errors.UNSUPPORTED_ASSIGNOR
            (p,) = [p for t, p in one.partitions()][:1]
            stale = await a.groups.commit_offsets(
                group, one.member_id, one.epoch - 1, {topic: {p: (1, "")}}
            )
            assert stale == {topic: {p: errors.STALE_MEMBER_EPOCH}}
            good = await a.groups.commit_offsets(
                group, one.member_id, one.epoch, {topic: {p: (1, "")}}
            )
            assert good == {topic: {p: errors.NONE}}

    asyncio.run(body())


def test_expired_member_partitions_move(redis_url: str) -> None:
    """A member that stops heartbeating is removed after the session timeout; the other
    gets its partitions."""
    settings = replace(TEST_SETTINGS, consumer_session_timeout_ms=300)

    async def body() -> None:
        async with pods(redis_url, 2, settings) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            live = Consumer(a.groups, group, [topic])
            silent = Consumer(b.groups, group, [topic])
            await _settle([live, silent])
            assert silent.partitions()
            while len(live.partitions()) < 3:
                assert await live.heartbeat() == errors.NONE
                await asyncio.sleep(0.05)  # the client's heartbeat interval
            assert await silent.heartbeat() == errors.UNKNOWN_MEMBER_ID

    asyncio.run(body())


def test_live_members_keep_deletes_and_outside_commits_off(redis_url: str) -> None:
    """DeleteGroups and commits from outside group management (generation -1) refuse a
    group with live KIP-848 members; ``kafka_members_live`` (V1 JOIN's check) sees members
    of either protocol. (Classic and KIP-848 members of one group: test_migration.py.)"""

    async def body() -> None:
        async with pods(redis_url, 1, SETTINGS) as (pod,):
            classic_group, consumer_group, topic = _name("g"), _name("g"), _name("t")
            await pod.topics.topic(topic)
            await join(pod.groups, classic_group)
            assert await pod.groups.kafka_members_live(classic_group)
            assert not await pod.groups.kafka_members_live(_name("g"))

            consumer = Consumer(pod.groups, consumer_group, [topic])
            assert await consumer.heartbeat() == errors.NONE
            assert await pod.groups.kafka_members_live(consumer_group)
            assert await pod.groups.delete_groups([consumer_group]) == {
                consumer_group: errors.NON_EMPTY_GROUP
            }
            # a commit from outside group management (an admin tool's reset) waits until
            # the members are gone, as Kafka's ConsumerGroup.validateOffsetCommit
            outside = await pod.groups.commit_offsets(consumer_group, "", -1, {topic: {0: (5, "")}})
            assert outside == {topic: {0: errors.UNKNOWN_MEMBER_ID}}
            listed = {g.group_id: g for g in await pod.groups.list_groups()}
            assert listed[consumer_group].group_type == "consumer"
            await pod.groups.consumer_heartbeat(consumer_group, consumer.member_id, -1)
            after = await pod.groups.commit_offsets(consumer_group, "", -1, {topic: {0: (5, "")}})
            assert after == {topic: {0: errors.NONE}}
            assert await pod.groups.delete_groups([consumer_group]) == {consumer_group: errors.NONE}
            assert (await pod.groups.consumer_describe(consumer_group)).error == (
                errors.GROUP_ID_NOT_FOUND
            )

    asyncio.run(body())


def test_member_that_does_not_revoke_is_fenced(redis_url: str) -> None:
    """A member that keeps reporting partitions it was told to give up is fenced
    (FENCED_MEMBER_EPOCH) once its rebalance timeout passed; the other member gets them."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            stubborn = Consumer(a.groups, group, [topic])
            assert await stubborn.heartbeat(rebalance_timeout_ms=200) == errors.NONE
            held = dict(stubborn.owned)
            other = Consumer(b.groups, group, [topic])
            assert await other.heartbeat() == errors.NONE
            code = errors.NONE
            while code == errors.NONE:
                stubborn.owned = held  # never lets go
                code = await stubborn.heartbeat()
                await asyncio.sleep(0.02)  # the client's heartbeat interval
            assert code == errors.FENCED_MEMBER_EPOCH
            assert await other.heartbeat() == errors.NONE
            assert other.partitions() == {(topic, p) for p in range(3)}

    asyncio.run(body())


def test_group_configs_set_the_session_timeout_and_heartbeat_interval(redis_url: str) -> None:
    """The GROUP resource's consumer.session.timeout.ms / consumer.heartbeat.interval.ms
    (IncrementalAlterConfigs, stored in the group's config hash) win over the pod's options
    (60 s here); removed, the pod's options apply again."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            configs = a.groups.keys.group_configs(group)
            await a.client.hset(
                configs,
                mapping={
                    "consumer.session.timeout.ms": "300",
                    "consumer.heartbeat.interval.ms": "1234",
                },
            )
            live = Consumer(a.groups, group, [topic])
            silent = Consumer(b.groups, group, [topic])
            first = await a.groups.consumer_heartbeat(
                group, "", 0, subscribed_topic_names=[topic], owned={}
            )
            assert (first.error, first.heartbeat_interval_ms) == (errors.NONE, 1234)
            live.member_id, live.epoch = first.member_id, first.member_epoch
            live.owned = first.assignment or {}
            await _settle([live, silent])
            assert silent.partitions()
            # the group's 300 ms session, not the pod's 60 s: the silent member expires
            while len(live.partitions()) < 3:
                assert await live.heartbeat() == errors.NONE
                await asyncio.sleep(0.05)
            assert await silent.heartbeat() == errors.UNKNOWN_MEMBER_ID

            await a.client.delete(configs)
            again = await a.groups.consumer_heartbeat(group, live.member_id, live.epoch)
            assert again.heartbeat_interval_ms == SETTINGS.consumer_heartbeat_interval_ms

    asyncio.run(body())


def test_regex_subscription_is_matched_again_at_each_heartbeat(redis_url: str) -> None:
    """A member subscribed by names and a regex owns both's topics; a matching topic made
    later joins at its next heartbeat, on a pod that never saw the member join; ``visible``
    leaves out what its principal may not see; an empty regex drops the regex's topics;
    ConsumerGroupDescribe tells names and regex apart."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, prefix, named = _name("g"), _name("rx"), _name("t")
            for topic in (f"{prefix}-a", f"{prefix}-b", named, _name("other")):
                await a.topics.topic(topic)
            member = Consumer(a.groups, group, [named])
            regex = f"{prefix}-.*"
            assert await member.heartbeat(subscribed_topic_regex=regex) == errors.NONE
            assert {t for t, _ in member.partitions()} == {f"{prefix}-a", f"{prefix}-b", named}

            await a.topics.topic(f"{prefix}-c")
            member.groups = b.groups
            assert await member.heartbeat() == errors.NONE
            assert {t for t, _ in member.partitions()} == {
                f"{prefix}-a", f"{prefix}-b", f"{prefix}-c", named
            }  # fmt: skip
            described = await b.groups.consumer_describe(group)
            [one] = described.members
            assert (one.subscribed_topics, one.subscribed_topic_regex) == ([named], regex)

            async def hide_b(topics: list[str]) -> list[str]:
                return [t for t in topics if t != f"{prefix}-b"]

            assert await member.heartbeat(visible=hide_b) == errors.NONE
            assert {t for t, _ in member.partitions()} == {f"{prefix}-a", f"{prefix}-c", named}

            assert await member.heartbeat(subscribed_topic_regex="") == errors.NONE
            assert {t for t, _ in member.partitions()} == {named}
            [one] = (await a.groups.consumer_describe(group)).members
            assert (one.subscribed_topics, one.subscribed_topic_regex) == ([named], None)

            bad = await a.groups.consumer_heartbeat(
                group, member.member_id, member.epoch, subscribed_topic_regex="x("
            )
            assert bad.error == errors.INVALID_REGULAR_EXPRESSION
            assert bad.message is not None and "`x(`" in bad.message
            # the refused change left the member as it was
            assert await member.heartbeat() == errors.NONE
            assert {t for t, _ in member.partitions()} == {named}

    asyncio.run(body())


async def _member(groups: KafkaGroups, group: str, member_id: str) -> object:
    [member] = [
        m for m in (await groups.consumer_describe(group)).members if m.member_id == member_id
    ]
    return member


def test_static_member_keeps_its_place_across_a_temporary_leave(redis_url: str) -> None:
    """A static member (an instance id) that leaves with epoch -2 stays in the group at -2
    with its partitions, which nobody else gets; a join with its instance id takes them
    over under a new member id, with no new group epoch; meanwhile a second join with that
    instance id is UNRELEASED_INSTANCE_ID, a request with another member's instance id
    FENCED_INSTANCE_ID, and the old member id is done."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            await a.client.hset(a.topics.keys.topic(topic), "partitions", 6)
            static = Consumer(a.groups, group, [topic], instance_id="i-1")
            other = Consumer(b.groups, group, [topic])
            await _settle([static, other])
            kept = static.partitions()
            assert len(kept) == len(other.partitions()) == 3
            epoch = (await a.groups.consumer_describe(group)).group_epoch

            hb = a.groups.consumer_heartbeat
            left = await hb(group, static.member_id, -2, instance_id="i-1")
            assert (left.error, left.member_epoch) == (errors.NONE, -2)
            away = await _member(b.groups, group, static.member_id)
            assert away.member_epoch == -2  # type: ignore[attr-defined]
            assert away.instance_id == "i-1"  # type: ignore[attr-defined]
            assert {(t, p) for t, ps in away.assignment.items() for p in ps} == kept  # type: ignore[attr-defined]
            described = await b.groups.consumer_describe(group)
            assert (described.state, described.group_epoch) == ("Reconciling", epoch)
            await _settle([other])
            assert not other.partitions() & kept  # kept for the static member
            # the old incarnation cannot heartbeat on
            assert (await hb(group, static.member_id, static.epoch)).error == (
                errors.FENCED_MEMBER_EPOCH
            )

            back = Consumer(b.groups, group, [topic], instance_id="i-1")
            await _settle([back, other], rounds=3)
            assert back.member_id != static.member_id
            assert back.partitions() == kept
            described = await a.groups.consumer_describe(group)
            assert (described.state, described.group_epoch) == ("Stable", epoch)
            assert {m.member_id for m in described.members} == {back.member_id, other.member_id}
            assert (await hb(group, static.member_id, static.epoch)).error == (
                errors.UNKNOWN_MEMBER_ID
            )

            twin = Consumer(a.groups, group, [topic], instance_id="i-1")
            assert await twin.heartbeat() == errors.UNRELEASED_INSTANCE_ID
            assert (await hb(group, other.member_id, other.epoch, instance_id="i-1")).error == (
                errors.FENCED_INSTANCE_ID
            )
            assert (await hb(group, other.member_id, other.epoch, instance_id="i-9")).error == (
                errors.UNKNOWN_MEMBER_ID
            )
            assert (await hb(group, "nobody", -2, instance_id="i-9")).error == (
                errors.UNKNOWN_MEMBER_ID
            )
            for wrong in (
                hb(group, other.member_id, -2),  # -2 is for static members only
                hb(group, other.member_id, other.epoch, instance_id=""),
                hb(group, other.member_id, -3),
            ):
                assert (await wrong).error == errors.INVALID_REQUEST
            await _settle([back, other], rounds=2)
            assert back.partitions() == kept  # none of that moved anything

            # a static member's -1 is a leave like any other: a new epoch, its partitions go
            gone = await hb(group, back.member_id, -1, instance_id="i-1")
            assert gone.error == errors.NONE
            await _settle([other])
            assert len(other.partitions()) == 6
            assert (await a.groups.consumer_describe(group)).group_epoch > epoch

    asyncio.run(body())


def test_static_member_that_does_not_come_back_expires(redis_url: str) -> None:
    """After a temporary leave the session still runs: a static member not back within it
    is removed, and its partitions go to the others; its instance id then joins afresh. A
    static member that comes back with another subscription starts a new group epoch."""
    settings = replace(TEST_SETTINGS, consumer_session_timeout_ms=400)

    async def body() -> None:
        async with pods(redis_url, 2, settings) as (a, b):
            group, topic, more = _name("g"), _name("t"), _name("t")
            await a.topics.topic(topic)
            await a.topics.topic(more)
            static = Consumer(a.groups, group, [topic], instance_id="i-1")
            other = Consumer(b.groups, group, [topic])
            await _settle([static, other])
            assert static.partitions()
            hb = a.groups.consumer_heartbeat
            assert (await hb(group, static.member_id, -2, instance_id="i-1")).error == errors.NONE
            while len(other.partitions()) < 3:
                assert await other.heartbeat() == errors.NONE
                await asyncio.sleep(0.05)
            members = (await a.groups.consumer_describe(group)).members
            assert [m.member_id for m in members] == [other.member_id]

            epoch = (await a.groups.consumer_describe(group)).group_epoch
            again = Consumer(a.groups, group, [topic], instance_id="i-1")
            assert await again.heartbeat() == errors.NONE  # a new member: a new epoch
            assert (await a.groups.consumer_describe(group)).group_epoch == epoch + 1
            await _settle([again, other], rounds=3)
            assert (await hb(group, again.member_id, -2, instance_id="i-1")).error == errors.NONE
            moved = Consumer(a.groups, group, [topic, more], instance_id="i-1")
            assert await moved.heartbeat() == errors.NONE
            assert (await a.groups.consumer_describe(group)).group_epoch == epoch + 2

    asyncio.run(body())
