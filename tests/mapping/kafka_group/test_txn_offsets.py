"""Transactional offset commits (mapping/kafka_group/txn_offsets.py): TxnOffsetCommit keeps
offsets pending per (group, producer id) until EndTxn's ``end_txn_offsets`` commits or drops
them; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile; zombies'
old epochs are refused; group deletion, OffsetDelete and offsets retention handle pending
offsets."""

from __future__ import annotations

import asyncio
import uuid

from mapping.core import kafka_errors as errors
from mapping.group import deletion as group_deletion
from mapping.kafka_group import NO_OFFSET, CommittedOffset, TxnCommitter
from mapping.kafka_group.txn_offsets import (
    PendingOffset,
    kafka_group_txn_offset_clear_call,
    kafka_group_txn_offset_end_call,
)
from tests.support.kafka_groups import join, pods, subscription

UNSTABLE = CommittedOffset(NO_OFFSET, None, errors.UNSTABLE_OFFSET_COMMIT)
PRODUCER = 4242


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def test_pending_until_commit_then_committed(redis_url: str) -> None:
    """Pending offsets are invisible to OffsetFetch (the committed ones answer) and unstable
    under require_stable; a commit makes them the committed offsets every pod and V1 see,
    metadata and leader epoch included; doing it again changes nothing."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            assert await a.groups.commit_offsets(group, "", -1, {topic: {0: (5, None)}}) == {
                topic: {0: errors.NONE}
            }
            codes = await a.groups.txn_commit_offsets(
                group, TxnCommitter(PRODUCER, 0), {topic: {0: (10, "m", 3), 1: (20, None, -1)}}
            )
            assert codes == {topic: {0: errors.NONE, 1: errors.NONE}}
            plain = await b.groups.fetch_offsets(group, {topic: [0, 1, 2]})
            assert plain[topic] == {
                0: CommittedOffset(5, None),
                1: CommittedOffset(NO_OFFSET),
                2: CommittedOffset(NO_OFFSET),
            }
            stable = await b.groups.fetch_offsets(group, {topic: [0, 1, 2]}, require_stable=True)
            assert stable[topic] == {0: UNSTABLE, 1: UNSTABLE, 2: CommittedOffset(NO_OFFSET)}
            everything = await b.groups.fetch_offsets(group, None, require_stable=True)
            assert everything == {topic: {0: UNSTABLE}}  # only committed partitions are listed

            await b.groups.end_txn_offsets(group, PRODUCER, 0, commit=True)
            after = await a.groups.fetch_offsets(group, {topic: [0, 1]}, require_stable=True)
            assert after[topic] == {
                0: CommittedOffset(10, "m", errors.NONE, 3),
                1: CommittedOffset(20, None),
            }
            assert await a.v1.committed(group, topic, 1) == 20
            await a.groups.end_txn_offsets(group, PRODUCER, 0, commit=True)  # again: no change
            assert await a.groups.fetch_offsets(group, {topic: [0, 1]}) == after
            assert not await a.groups.pending_partitions(group)

    asyncio.run(body())


def test_abort_drops_pending_offsets(redis_url: str) -> None:
    async def body() -> None:
        async with pods(redis_url, 1) as (a,):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            await a.groups.commit_offsets(group, "", -1, {topic: {0: (5, None)}})
            await a.groups.txn_commit_offsets(
                group, TxnCommitter(PRODUCER, 0), {topic: {0: (10, None, -1)}}
            )
            await a.groups.end_txn_offsets(group, PRODUCER, 0, commit=False)
            stable = await a.groups.fetch_offsets(group, {topic: [0]}, require_stable=True)
            assert stable[topic] == {0: CommittedOffset(5, None)}

    asyncio.run(body())


def test_producers_are_apart_and_a_zombie_is_fenced(redis_url: str) -> None:
    """Two producers' pending offsets end apart; once an EndTxn (the fencing abort) or a
    commit carried a newer epoch, the old epoch's commits get INVALID_PRODUCER_EPOCH, and an
    EndTxn of the old epoch completes nothing of the new one."""

    async def body() -> None:
        async with pods(redis_url, 1) as (a,):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            groups = a.groups
            other = PRODUCER + 1
            await groups.txn_commit_offsets(
                group, TxnCommitter(PRODUCER, 0), {topic: {0: (1, None, -1)}}
            )
            await groups.txn_commit_offsets(
                group, TxnCommitter(other, 0), {topic: {1: (2, None, -1)}}
            )
            await groups.end_txn_offsets(group, other, 0, commit=True)
            assert await groups.pending_partitions(group) == {(topic, 0)}

            # InitProducerId of a new session: the coordinator aborts with the bumped epoch
            await groups.end_txn_offsets(group, PRODUCER, 1, commit=False)
            zombie = await groups.txn_commit_offsets(
                group, TxnCommitter(PRODUCER, 0), {topic: {0: (99, None, -1)}}
            )
            assert zombie == {topic: {0: errors.INVALID_PRODUCER_EPOCH}}
            fresh = await groups.txn_commit_offsets(
                group, TxnCommitter(PRODUCER, 1), {topic: {0: (7, None, -1)}}
            )
            assert fresh == {topic: {0: errors.NONE}}
            await groups.end_txn_offsets(group, PRODUCER, 0, commit=True)  # stale: nothing
            assert await groups.pending_partitions(group) == {(topic, 0)}
            await groups.end_txn_offsets(group, PRODUCER, 1, commit=True)
            found = await groups.fetch_offsets(group, {topic: [0, 1]}, require_stable=True)
            assert {p: c.offset for p, c in found[topic].items()} == {0: 7, 1: 2}

    asyncio.run(body())


def test_a_commit_stored_while_ending_stays(redis_url: str) -> None:
    """EndTxn removes only the pending values it completed: a newer commit of the same
    producer and partition, stored between its read and its clear, stays pending."""

    async def body() -> None:
        async with pods(redis_url, 1) as (a,):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            gk = a.groups.keys.kafka_group(group)
            offsets = {topic: {0: (1, None, -1)}}
            await a.groups.txn_commit_offsets(group, TxnCommitter(PRODUCER, 0), offsets)
            read = await a.client.execute_command(
                *kafka_group_txn_offset_end_call(gk, PRODUCER, 0, 60_000)
            )
            newer = {topic: {0: (2, None, -1)}}
            await a.groups.txn_commit_offsets(group, TxnCommitter(PRODUCER, 0), newer)
            (field, value) = read
            stale = PendingOffset(field, value, topic, 0, 1, -1, "")
            clear = kafka_group_txn_offset_clear_call(gk, [stale])
            assert await a.client.execute_command(*clear) == 0
            assert await a.groups.pending_partitions(group) == {(topic, 0)}

    asyncio.run(body())


def test_membership_checks(redis_url: str) -> None:
    """v3+ requests name the consumer: a known member of the current generation passes, a
    stale generation gets ILLEGAL_GENERATION and an unknown member UNKNOWN_MEMBER_ID; without
    member and generation (v0-2) the commit passes even while the group has members; the
    empty group id is INVALID_GROUP_ID; unknown partitions are refused one by one."""

    async def body() -> None:
        async with pods(redis_url, 1) as (a,):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)  # 3 partitions
            joined = await join(a.groups, group, protocols=[("range", subscription(topic))])
            assert joined.error == errors.NONE
            member, generation = joined.member_id, joined.generation
            offsets = {topic: {0: (1, None, -1)}}

            def as_member(member_id: str, gen: int) -> TxnCommitter:
                return TxnCommitter(PRODUCER, 0, member_id, gen)

            ok = await a.groups.txn_commit_offsets(group, as_member(member, generation), offsets)
            assert ok == {topic: {0: errors.NONE}}
            stale = await a.groups.txn_commit_offsets(
                group, as_member(member, generation + 5), offsets
            )
            assert stale == {topic: {0: errors.ILLEGAL_GENERATION}}
            unknown = await a.groups.txn_commit_offsets(
                group, as_member("nobody", generation), offsets
            )
            assert unknown == {topic: {0: errors.UNKNOWN_MEMBER_ID}}
            anonymous = await a.groups.txn_commit_offsets(group, TxnCommitter(PRODUCER, 0), offsets)
            assert anonymous == {topic: {0: errors.NONE}}

            empty = await a.groups.txn_commit_offsets("", TxnCommitter(PRODUCER, 0), offsets)
            assert empty == {topic: {0: errors.INVALID_GROUP_ID}}
            mixed = await a.groups.txn_commit_offsets(
                group,
                TxnCommitter(PRODUCER, 0),
                {topic: {0: (1, None, -1), 7: (1, None, -1)}, "nope": {0: (1, None, -1)}},
            )
            assert mixed == {
                topic: {0: errors.NONE, 7: errors.UNKNOWN_TOPIC_OR_PARTITION},
                "nope": {0: errors.UNKNOWN_TOPIC_OR_PARTITION},
            }

    asyncio.run(body())


def test_offset_delete_group_delete_and_retention(redis_url: str) -> None:
    """OffsetDelete and DeleteGroups remove pending offsets with the committed ones; offsets
    retention keeps the offsets of a group with pending transactional offsets."""

    async def body() -> None:
        async with pods(redis_url, 1) as (a,):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            pending = {topic: {0: (1, None, -1), 1: (2, None, -1)}}
            await a.groups.commit_offsets(group, "", -1, {topic: {0: (1, None)}})
            await a.groups.txn_commit_offsets(group, TxnCommitter(PRODUCER, 0), pending)

            expired = await group_deletion.expire_groups(
                a.groups, retention_ms=-1, session_timeout_ms=10_000
            )
            assert (group, topic) not in expired
            assert await a.v1.committed(group, topic, 0) == 1

            code, _ = await a.groups.delete_offsets(group, {topic: [1]})
            assert code == errors.NONE
            assert await a.groups.pending_partitions(group) == {(topic, 0)}
            assert await a.groups.delete_groups([group]) == {group: errors.NONE}
            assert not await a.groups.pending_partitions(group)
            await a.groups.end_txn_offsets(group, PRODUCER, 0, commit=True)  # nothing left
            assert await a.groups.fetch_offsets(group, {topic: [0, 1]}) == {
                topic: {0: CommittedOffset(NO_OFFSET), 1: CommittedOffset(NO_OFFSET)}
            }

    asyncio.run(body())
