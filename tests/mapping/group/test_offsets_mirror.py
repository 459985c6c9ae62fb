"""The offsets mirror's writer (mapping/group/offsets_mirror.py) on a real Redis, in process: the
record layout in the stream, the order guard of ``offsets_topic/append.lua`` (an older
commit mirrored late never follows a newer one), V1 commits coalesced, expired offsets'
tombstones, and records kept across a failed write."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis

from adapter.pod import Pod, build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core import records
from mapping.core.keys import Keys, group_entry
from mapping.group.deletion import expire_groups
from mapping.group.offsets_mirror import OffsetsMirror
from mapping.group.offsets_topic import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    decode_key,
    decode_value,
    partition_for,
)
from mapping.partition.compaction import compact_topic
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topic_rules import rules_of
from spark_connector.group_commit import commit_group_offsets

BITS = 10


@asynccontextmanager
async def mirrored_pod(redis_url: str) -> AsyncIterator[tuple[Pod, OffsetsMirror]]:
    """A pod's parts on a fresh key prefix, its batcher running, its mirror made."""
    prefix = f"mirror-{uuid.uuid4().hex[:8]}"
    client = connect(redis_url, 5.0)
    await pin_sequence_bits(client, Keys(prefix), BITS)
    settings = Settings(
        key_prefix=prefix, sequence_bits=BITS, topic_defaults=TopicDefaults(3, 1, 1)
    )
    pod = build_pod(settings, client)
    batcher = asyncio.create_task(pod.batcher.run())
    try:
        mirror = pod.offsets_mirror
        assert mirror is not None
        mirror.create = True  # (what OffsetsMirror.run does first)
        await mirror.ensure()
        yield pod, mirror
    finally:
        batcher.cancel()
        await asyncio.gather(batcher, return_exceptions=True)
        await client.aclose()


async def entries(pod: Pod, group: str) -> list[dict[bytes, bytes]]:
    """The stream entries (fields) of ``group``'s mirror partition, oldest first."""
    log = pod.keys.partition(OFFSETS_TOPIC, partition_for(group)).log
    return [dict(zip(f[::2], f[1::2], strict=True)) for _, f in await pod.client.xrange(log)]


def test_the_mirror_topic_is_made_compacted(redis_url: str) -> None:
    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, _):
            config = await pod.topics.lookup(OFFSETS_TOPIC)
            assert config is not None
            assert (config.partitions, config.replication_factor) == (OFFSETS_TOPIC_PARTITIONS, 1)
            assert rules_of(config).compaction.compact
            assert not rules_of(config).compaction.delete  # (nothing trimmed by time)

    asyncio.run(run())


def test_an_older_commit_never_follows_a_newer_one(redis_url: str) -> None:
    """Two pods mirror commits of one partition: the one that arrives last but was committed
    first is left out; a deletion after both is a tombstone (key, no value, ``null``)."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, mirror):
            group, topic = "g-order", "t"
            mirror.note_commits(group, topic, {0: (50, "new", 4)}, 2_000)
            assert await mirror.flush() == 1
            mirror.note_commits(group, topic, {0: (40, "old", 3)}, 1_000)  # mirrored late
            assert await mirror.flush() == 0
            mirror.note_commits(group, topic, {0: (60, "", -1)}, 2_000)  # same ms: it follows
            assert await mirror.flush() == 1
            mirror.note_deleted(group, topic, [0], 3_000)
            assert await mirror.flush() == 1
            found = await entries(pod, group)
            assert [decode_key(e[records.KEY_BYTES]).partition for e in found] == [0, 0, 0]
            values = [decode_value(e[records.VALUE_BYTES]) for e in found[:2]]
            assert [(v.offset, v.metadata, v.leader_epoch) for v in values] == [
                (50, "new", 4),
                (60, "", -1),
            ]
            assert [int(e[records.CREATE_TIME_BYTES]) for e in found] == [2_000, 2_000, 3_000]
            tombstone = found[2]
            assert records.VALUE_BYTES not in tombstone
            assert tombstone[records.NULLS_BYTES] == b"value"
            mirror.note_commits(group, topic, {0: (45, "", -1)}, 2_500)  # before the deletion
            assert await mirror.flush() == 0
            assert mirror.appended == 3

    asyncio.run(run())


def test_v1_commits_are_coalesced(redis_url: str) -> None:
    """Many V1 commits within the window: one record per partition, the latest offset."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, mirror):
            mirror.window_s = 0.2
            group = "g-v1"
            for offset in range(100):
                mirror.note_v1_commit(group, "t", offset % 2, offset, 1_000 + offset)
            assert await entries(pod, group) == []  # not before the window
            for _ in range(100):  # written by the pod's own timer, within the window
                found = await entries(pod, group)
                if found:
                    break
                await asyncio.sleep(0.02)
            assert len(found) == 2
            latest = {
                decode_key(e[records.KEY_BYTES]).partition: decode_value(e[records.VALUE_BYTES])
                for e in found
            }
            assert {p: v.offset for p, v in latest.items()} == {0: 98, 1: 99}
            assert {p: v.commit_timestamp for p, v in latest.items()} == {0: 1_098, 1: 1_099}

    asyncio.run(run())


def test_expired_offsets_become_tombstones(redis_url: str) -> None:
    """Offsets retention deleting an idle group writes a tombstone per committed partition."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, mirror):
            group, topic = "g-idle", "t"
            gk = pod.keys.group(group, topic)
            await pod.client.hset(gk.offsets, mapping={"0": 5, "2": 7})
            await pod.client.hset(gk.meta, "active_ms", 1)  # long ago
            await pod.client.sadd(pod.keys.groups, group_entry(group, topic))
            expired = await expire_groups(
                pod.topics, retention_ms=60_000, session_timeout_ms=10_000, mirror=mirror
            )
            assert expired == [(group, topic)]
            await mirror.settle()
            found = await entries(pod, group)
            assert sorted(decode_key(e[records.KEY_BYTES]).partition for e in found) == [0, 2]
            assert all(records.VALUE_BYTES not in e for e in found)

    asyncio.run(run())


def test_a_failed_write_is_kept_for_the_next(redis_url: str) -> None:
    """A partition refusing the append (here: made a follower) fails the write; the records
    wait and are written again within the window, a later note of the same partition in
    place of the earlier one (the latest wins)."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, mirror):
            mirror.window_s = 0.05
            group = "g-retry"
            state = pod.keys.partition(OFFSETS_TOPIC, partition_for(group)).state
            await pod.client.hset(state, "role", "follower")
            mirror.note_commits(group, "t", {0: (1, "", -1), 1: (2, "", -1)}, 1_000)
            try:
                await mirror.flush()
            except Exception as exc:
                assert "follower" in str(exc)
            else:
                raise AssertionError("a follower partition took the append")
            mirror.note_commits(group, "t", {0: (3, "", -1)}, 1_100)
            await pod.client.hset(state, "role", "leader")
            offsets: dict[int, int] = {}
            for _ in range(100):  # the pod's own retries
                found = await entries(pod, group)
                offsets = {
                    decode_key(e[records.KEY_BYTES]).partition: decode_value(
                        e[records.VALUE_BYTES]
                    ).offset
                    for e in found
                }
                if len(offsets) == 2:
                    break
                await asyncio.sleep(0.02)
            assert offsets == {0: 3, 1: 2}
            assert len(found) == 2  # the replaced commit was never written

    asyncio.run(run())


def test_the_command_line_never_makes_the_mirror(redis_url: str) -> None:
    """A mirror not run (the command line's) writes only into an existing topic."""

    async def run() -> None:
        prefix = f"mirror-{uuid.uuid4().hex[:8]}"
        client = connect(redis_url, 5.0)
        await pin_sequence_bits(client, Keys(prefix), BITS)
        pod = build_pod(Settings(key_prefix=prefix, sequence_bits=BITS), client)
        batcher = asyncio.create_task(pod.batcher.run())
        try:
            assert pod.offsets_mirror is not None
            pod.offsets_mirror.note_deleted("g", "t", [0], 1_000)
            assert await pod.offsets_mirror.flush() == 0
            assert await pod.topics.lookup(OFFSETS_TOPIC) is None
        finally:
            batcher.cancel()
            await asyncio.gather(batcher, return_exceptions=True)
            await client.aclose()

    asyncio.run(run())


def test_spark_commits_are_mirrored(redis_url: str) -> None:
    """The Spark connector commits without a pod (a synchronous client): the offsets it
    moved are mirrored, one it could not move (a later commit is stored) is not."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, _):
            group, topic = "g-spark", "t"
            client = redis.Redis.from_url(redis_url)
            try:
                stored = commit_group_offsets(client, pod.keys, group, topic, {0: 40, 1: 7})
                assert stored == {0: 40, 1: 7}
                stored = commit_group_offsets(client, pod.keys, group, topic, {0: 30, 1: 9})
                assert stored == {0: 40, 1: 9}  # a partition only moves forward
            finally:
                client.close()
            found = await entries(pod, group)
            mirrored = [
                (decode_key(e[records.KEY_BYTES]).partition, decode_value(e[records.VALUE_BYTES]))
                for e in found
            ]
            assert sorted((p, v.offset) for p, v in mirrored) == [(0, 40), (1, 7), (1, 9)]
            assert all(v.leader_epoch == -1 and v.metadata == "" for _, v in mirrored)

    asyncio.run(run())


def test_compaction_keeps_each_keys_latest_record(redis_url: str) -> None:
    """The mirror is compacted like any compacted topic: superseded commits go, the latest
    of each key stays (tombstones stay ``delete.retention.ms``); here with a small
    segment.ms and one more commit after it, so the active segment holds only that one."""

    async def run() -> None:
        async with mirrored_pod(redis_url) as (pod, mirror):
            await pod.topics.alter_configs(OFFSETS_TOPIC, {"segment_ms": "1"})
            pod.topics.cache.forget(OFFSETS_TOPIC)
            group = "g-compact"
            for n in range(4):
                mirror.note_commits(group, "t", {0: (n, "", -1), 1: (10 + n, "", -1)}, 1_000 + n)
                await mirror.flush()
            mirror.note_deleted(group, "t", [1], 2_000)
            await mirror.flush()
            assert len(await entries(pod, group)) == 9
            await asyncio.sleep(0.01)  # past segment.ms: the next commit rolls the segment
            mirror.note_commits(group, "rolled", {0: (1, "", -1)}, 3_000)
            await mirror.flush()
            results = await compact_topic(pod.partitions, OFFSETS_TOPIC)
            assert sum(r.removed for r in results) == 7  # three of p0, four of p1
            found = await entries(pod, group)
            kept = [
                (decode_key(e[records.KEY_BYTES]).partition, e.get(records.VALUE_BYTES))
                for e in found
            ]
            assert [(p, v and decode_value(v).offset) for p, v in kept] == [
                (0, 3),
                (1, None),
                (0, 1),  # the commit on topic "rolled"
            ]

    asyncio.run(run())
