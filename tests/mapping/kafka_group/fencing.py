"""Stale commits (issue 26, item 2): an OffsetCommit checked by one pod, which then stalls
(paused, SIGSTOPped) while the group moves on through another pod, must not put its old
offsets over what the group's next generation read or wrote once it goes on.

Each scenario sends a commit through pod ``a`` that stops right after its membership check
(``held_after_check``: the pod's ``kafka_group/commit_check`` call returns, then the scenario's
``meanwhile`` runs before anything else of that commit), moves the group on through pod
``b`` (a member expires or is replaced, a new generation or member epoch reads the offsets
and commits newer ones), then lets the held commit go on. The committed offset must be the
newer one (or what the newer member read), and the held commit gets the answer Kafka gives
at that moment. Shared by the single-Redis tests (``test_commit_fencing.py``) and the Redis
Cluster ones (``test_cluster.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis.crc import REDIS_CLUSTER_HASH_SLOTS as SLOTS
from redis.crc import key_slot

from mapping.core import kafka_errors as errors
from mapping.kafka_group import KafkaGroups
from mapping.kafka_group.offsets import KAFKA_GROUP_COMMIT_CHECK
from tests.support.kafka_groups import TEST_SETTINGS, TestPod, join, pods

BASE, OLD, NEWER = 10, 20, 30  # committed before; the held commit's; the next generation's
ALL = [0, 1, 2]  # a new topic's partitions


@contextmanager
def held_after_check(
    groups: KafkaGroups, meanwhile: Callable[[], Awaitable[None]]
) -> Iterator[None]:
    """The next commit through ``groups`` stalls right after its membership check (the
    script call returned) until ``meanwhile`` has run: a pod paused between check and
    write, deterministically. Later checks (a re-check) run as usual."""
    original = groups.call_group_script
    fired = False

    async def hooked(command: tuple) -> Any:
        nonlocal fired
        reply = await original(command)
        if command[1] == KAFKA_GROUP_COMMIT_CHECK.sha and not fired:
            fired = True
            await meanwhile()
        return reply

    groups.call_group_script = hooked  # type: ignore[method-assign]
    try:
        yield
    finally:
        del groups.call_group_script
    assert fired, "no commit check ran"


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Wait until ``condition`` (a question to Redis) holds."""

    async def poll() -> None:
        while not await condition():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def _names() -> tuple[str, str]:
    """A group and a topic whose hash tags ({group}, {group:topic}) fall in different thirds
    of the slot space: on the test cluster (3 primaries, even ranges) the check and the
    write run on different nodes."""
    while True:
        group, topic = f"g-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
        third = SLOTS // 3 + 1
        if key_slot(group.encode()) // third != key_slot(f"{group}:{topic}".encode()) // third:
            return group, topic


def _offsets(partitions: list[int], offset: int) -> dict[int, tuple[int, str | None]]:
    return {p: (offset, None) for p in partitions}


async def _assert_committed(
    pod: TestPod, group: str, topic: str, partitions: list[int], expected: int
) -> None:
    """The committed offsets as stored (V1 OFFSET's read: it raises no fence) are
    ``expected``: the held commit's OLD did not land over them."""
    found = [await pod.v1.committed(group, topic, p) for p in partitions]
    assert found == [expected] * len(partitions), (
        f"committed offsets went backwards: {found}, the newer generation had {expected}"
    )


async def _alone(pod: TestPod, group: str, **join_args: Any) -> tuple[str, int]:
    """A classic member that joins an empty group and syncs (its own leader)."""
    joined = await join(pod.groups, group, **join_args)
    assert joined.error == errors.NONE and joined.leader == joined.member_id, joined
    instance = join_args.get("instance_id")
    synced = await pod.groups.sync(
        group,
        joined.member_id,
        joined.generation,
        {joined.member_id: b"all"},
        group_instance_id=instance,
    )
    assert synced.error == errors.NONE, synced
    return joined.member_id, joined.generation


async def _read_then_commit(
    pod: TestPod,
    group: str,
    topic: str,
    member: str,
    generation: int,
    partitions: list[int],
    instance: str | None = None,
) -> None:
    """A member of the new generation: reads where to start (BASE), commits NEWER."""
    fetched = await pod.groups.fetch_offsets(group, {topic: partitions})
    assert [fetched[topic][p].offset for p in partitions] == [BASE] * len(partitions)
    codes = await pod.groups.commit_offsets(
        group, member, generation, {topic: _offsets(partitions, NEWER)}, instance
    )
    assert codes == {topic: dict.fromkeys(partitions, errors.NONE)}, codes


async def classic_member_expired(url: str) -> None:
    """The member's session runs out while its commit is held; a new member forms the next
    generation, reads BASE and commits NEWER: the held commit gets UNKNOWN_MEMBER_ID."""
    async with pods(url, 2) as (a, b):
        group, topic = _names()
        await a.topics.topic(topic)
        member, generation = await _alone(a, group, session_ms=300)
        ok = await a.groups.commit_offsets(group, member, generation, {topic: {0: (BASE, None)}})
        assert ok == {topic: {0: errors.NONE}}

        async def meanwhile() -> None:
            await asyncio.sleep(0.5)  # the session (refreshed by the check) runs out
            newer, newer_generation = await _alone(b, group)
            assert newer_generation > generation
            await _read_then_commit(b, group, topic, newer, newer_generation, [0])

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(
                group, member, generation, {topic: {0: (OLD, None)}}
            )
        await _assert_committed(b, group, topic, [0], NEWER)
        assert held == {topic: {0: errors.UNKNOWN_MEMBER_ID}}, held


async def classic_new_generation_read_only(url: str) -> None:
    """A new member joins while the commit is held; both form the next generation and the
    newcomer, given partition 0, reads BASE (it has not committed yet): the held commit
    gets ILLEGAL_GENERATION and partition 0 stays at what the newcomer read. (A fence
    raised by commits alone would let OLD in here, and the newcomer's first commit would
    then take the offset backwards.)"""
    async with pods(url, 2) as (a, b):
        group, topic = _names()
        await a.topics.topic(topic)
        member, generation = await _alone(a, group)
        ok = await a.groups.commit_offsets(group, member, generation, {topic: {0: (BASE, None)}})
        assert ok == {topic: {0: errors.NONE}}
        newcomer: list[str] = []

        async def meanwhile() -> None:
            joining = asyncio.create_task(join(b.groups, group))

            async def rebalancing() -> bool:
                return (await b.groups.describe_group(group)).state == "PreparingRebalance"

            await _until(rebalancing)
            again = await join(b.groups, group, member_id=member)  # the member rejoins
            joined = await joining
            assert again.generation == joined.generation == generation + 1
            follower = asyncio.create_task(
                b.groups.sync(group, joined.member_id, joined.generation)
            )
            shares = {member: b"1,2", joined.member_id: b"0"}
            assert (await b.groups.sync(group, member, again.generation, shares)).error == 0
            assert (await follower).assignment == b"0"
            fetched = await b.groups.fetch_offsets(group, {topic: [0]})
            assert fetched[topic][0].offset == BASE
            newcomer[:] = [joined.member_id, str(joined.generation)]

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(
                group, member, generation, {topic: {0: (OLD, None)}}
            )
        await _assert_committed(b, group, topic, [0], BASE)
        assert held == {topic: {0: errors.ILLEGAL_GENERATION}}, held
        # the newcomer goes on from what it read
        new_id, new_generation = newcomer[0], int(newcomer[1])
        codes = await b.groups.commit_offsets(
            group, new_id, new_generation, {topic: {0: (BASE + 5, None)}}
        )
        assert codes == {topic: {0: errors.NONE}}


async def static_member_replaced(url: str) -> None:
    """A static member's process restarts (same group.instance.id, new member id: it takes
    the old one's place without a new generation), reads BASE and commits NEWER: the old
    member id's held commit gets FENCED_INSTANCE_ID."""
    async with pods(url, 2) as (a, b):
        group, topic = _names()
        instance = "static-1"
        await a.topics.topic(topic)
        member, generation = await _alone(a, group, instance_id=instance)
        ok = await a.groups.commit_offsets(
            group, member, generation, {topic: {0: (BASE, None)}}, instance
        )
        assert ok == {topic: {0: errors.NONE}}

        async def meanwhile() -> None:
            again = await join(b.groups, group, instance_id=instance)
            assert again.member_id != member and again.generation == generation
            synced = await b.groups.sync(
                group, again.member_id, again.generation, {}, group_instance_id=instance
            )
            assert synced.assignment == b"all"
            await _read_then_commit(
                b, group, topic, again.member_id, again.generation, [0], instance
            )

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(
                group, member, generation, {topic: {0: (OLD, None)}}, instance
            )
        await _assert_committed(b, group, topic, [0], NEWER)
        assert held == {topic: {0: errors.FENCED_INSTANCE_ID}}, held


async def kip848_epoch_moved(url: str) -> None:
    """KIP-848: a second member joins while the first one's commit (all partitions, its
    epoch) is held; the first gives some partitions up and moves to the new epoch, the
    second takes them, reads BASE and commits NEWER: on those the held commit gets
    STALE_MEMBER_EPOCH (the partitions the first kept take it: nobody else used them)."""
    async with pods(url, 2) as (a, b):
        group, topic = _names()
        await a.topics.topic(topic)
        first = await a.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
        assert first.assignment == {topic: ALL}
        member, epoch = first.member_id, first.member_epoch
        ok = await a.groups.commit_offsets(group, member, epoch, {topic: _offsets(ALL, BASE)})
        assert ok == {topic: dict.fromkeys(ALL, errors.NONE)}
        moved: list[int] = []

        async def meanwhile() -> None:
            second = await b.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
            shrunk = await b.groups.consumer_heartbeat(group, member, epoch, owned={topic: ALL})
            kept = (shrunk.assignment or {topic: ALL})[topic]
            released = await b.groups.consumer_heartbeat(
                group, member, shrunk.member_epoch, owned={topic: kept}
            )
            assert released.member_epoch > epoch
            taken = await b.groups.consumer_heartbeat(
                group, second.member_id, second.member_epoch, owned={}
            )
            moved[:] = (taken.assignment or {}).get(topic, [])
            assert moved and not set(moved) & set(kept)
            await _read_then_commit(b, group, topic, second.member_id, taken.member_epoch, moved)

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(group, member, epoch, {topic: _offsets(ALL, OLD)})
        await _assert_committed(b, group, topic, moved, NEWER)
        assert {p: held[topic][p] for p in moved} == dict.fromkeys(moved, errors.STALE_MEMBER_EPOCH)


async def kip848_member_expired(url: str) -> None:
    """KIP-848: the member's session runs out while its commit is held; a new member gets
    every partition, reads BASE and commits NEWER: the held commit gets UNKNOWN_MEMBER_ID."""
    settings = dataclasses.replace(TEST_SETTINGS, consumer_session_timeout_ms=300)
    async with pods(url, 2, settings) as (a, b):
        group, topic = _names()
        await a.topics.topic(topic)
        first = await a.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
        member, epoch = first.member_id, first.member_epoch
        ok = await a.groups.commit_offsets(group, member, epoch, {topic: _offsets(ALL, BASE)})
        assert ok == {topic: dict.fromkeys(ALL, errors.NONE)}

        async def meanwhile() -> None:
            await asyncio.sleep(0.5)
            second = await b.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
            assert second.assignment == {topic: ALL}
            await _read_then_commit(b, group, topic, second.member_id, second.member_epoch, ALL)

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(group, member, epoch, {topic: _offsets(ALL, OLD)})
        await _assert_committed(b, group, topic, ALL, NEWER)
        assert held == {topic: dict.fromkeys(ALL, errors.UNKNOWN_MEMBER_ID)}, held


async def simple_commit_then_group_formed(url: str) -> None:
    """A commit from outside group management (generation -1, no member id; allowed while
    the group has no members) is held; a consumer group forms, reads BASE and commits
    NEWER: the held commit gets UNKNOWN_MEMBER_ID, as a commit of a group with members."""
    async with pods(url, 2) as (a, b):
        group, topic = _names()
        await a.topics.topic(topic)
        ok = await a.groups.commit_offsets(group, "", -1, {topic: {0: (BASE, None)}})
        assert ok == {topic: {0: errors.NONE}}

        async def meanwhile() -> None:
            member, generation = await _alone(b, group)
            await _read_then_commit(b, group, topic, member, generation, [0])

        with held_after_check(a.groups, meanwhile):
            held = await a.groups.commit_offsets(group, "", -1, {topic: {0: (OLD, None)}})
        await _assert_committed(b, group, topic, [0], NEWER)
        assert held == {topic: {0: errors.UNKNOWN_MEMBER_ID}}, held


SCENARIOS: list[Callable[[str], Awaitable[None]]] = [
    classic_member_expired,
    classic_new_generation_read_only,
    static_member_replaced,
    kip848_epoch_moved,
    kip848_member_expired,
    simple_commit_then_group_formed,
]
