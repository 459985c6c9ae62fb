"""Compaction (mapping/partition/compaction.py, partition/compact.lua) straight against Redis: after
many versions of many keys and tombstones, exactly what Kafka's rules keep is left, in
offset order; the min lag, the dirty ratio, the max lag and delete.retention.ms are honoured;
bounded steps reach the same result; retention trims and DeleteRecords leave nothing
harmful behind; a deleted topic leaves none of the new keys. The cleaner never touches the
active segment (mapping/partition/segments.py): the topics here have a small segment.ms, and a test
that wants everything cleaned rolls the segment with one more record (``roll``)."""

from __future__ import annotations

import asyncio

import redis

from mapping.core import codec
from mapping.operations.topic_lifecycle import delete_topic
from mapping.partition.kafka import KafkaStore, partition_delete_records_call
from tests.mapping.partition.compaction_store import (
    BITS,
    TOPIC,
    compact,
    configure,
    kafka_keeps,
    read_log,
    roll,
    versions,
    with_store,
    write,
)


def test_exactly_what_kafka_keeps_then_expired_tombstones_go(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact"})
        records = versions(20, 5)
        records += [(b"k3", None), (b"k7", None), (b"k7", b"back"), (b"k11", None)]
        records += versions(2, 1)  # k0, k1 once more
        written = list(zip(await write(store, config, records), records, strict=True))
        written += await roll(store, config)

        result = await compact(store, config)
        kept = kafka_keeps(written, tombstones_expired=False)
        assert await read_log(store, config) == kept
        assert result.removed == len(written) - len(kept)
        assert (result.tombstones_removed, result.dirty) == (0, 0)
        # a second run finds nothing to do
        assert (await compact(store, config)).removed == 0

        config = await configure(store, {"delete_retention_ms": 0})
        result = await compact(store, config)
        assert result.tombstones_removed == 2  # k3 and k11 (k7's was superseded)
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=True)
        index = store.partitions.keys.partition(TOPIC, 0).compact_index
        assert not await store.partitions.batcher.call("HEXISTS", index, "k3")
        # k3 written again supersedes nothing: its tombstone left the index
        again = await write(store, config, [(b"k3", b"new")])
        assert (await compact(store, config)).dirty == 0
        assert (await read_log(store, config))[-1] == (again[0], (b"k3", b"new"))

    asyncio.run(with_store(redis_url, body))


def test_min_lag_dirty_ratio_and_max_lag(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(
            store, {"cleanup_policy": "compact", "min_compaction_lag_ms": 3_600_000}
        )
        records = versions(10, 2)  # 10 of 20 superseded: dirty ratio 0.5 (10 of 21 here)
        written = list(zip(await write(store, config, records), records, strict=True))
        written += await roll(store, config)
        # superseding records younger than the min lag: nothing goes
        assert (await compact(store, config)).removed == 0
        assert len(await read_log(store, config)) == 21

        config = await configure(
            store, {"min_compaction_lag_ms": None, "min_cleanable_dirty_ratio": "0.9"}
        )
        result = await compact(store, config)
        assert (result.removed, result.dirty) == (0, 10)  # 10/21 < 0.9: not due

        config = await configure(store, {"max_compaction_lag_ms": 0})  # due by age
        assert (await compact(store, config)).removed == 10
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=False)

    asyncio.run(with_store(redis_url, body))


def test_bounded_steps_give_the_same_result(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact", "delete_retention_ms": 0})
        records = versions(30, 4) + [(f"k{k}".encode(), None) for k in range(0, 30, 3)]
        written = list(zip(await write(store, config, records), records, strict=True))
        written += await roll(store, config)
        result = await compact(store, config, max_remove=7)
        assert result.calls > 10
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=True)
        assert result.removed + result.tombstones_removed == len(written) - 21

    asyncio.run(with_store(redis_url, body))


def test_records_removed_by_delete_records_leave_nothing_harmful(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact,delete"})
        first = versions(10, 2)
        offsets = await write(store, config, first)
        head = store.partitions.head(config, 0)
        # everything below the 15th record goes: the index still names some of them
        await store.partitions.batcher.call(*partition_delete_records_call(head, offsets[15]))
        later = versions(10, 1)
        written = list(zip(offsets, first, strict=True))[15:]
        written += list(zip(await write(store, config, later), later, strict=True))
        written += await roll(store, config)
        result = await compact(store, config)
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=False)
        assert result.removed == 5  # only records still in the log count
        assert result.dirty == 0

    asyncio.run(with_store(redis_url, body))


def test_appends_keep_the_index_only_on_compacted_topics(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await store.partitions.topics.topic(TOPIC)
        await write(store, config, versions(3, 2))
        pk = store.partitions.keys.partition(TOPIC, 0)
        assert not await store.partitions.batcher.call("EXISTS", *pk.compaction())
        config = await configure(store, {"cleanup_policy": "compact"})
        # V1 PRODUCE's script indexes too
        result = await store.partitions.produce(config, 0, [(b"a", b"1"), (b"a", b"2")])
        entry = codec.entry_id(result.offsets[1], BITS)
        assert await store.partitions.batcher.call("HGET", pk.compact_index, "a") == entry.encode()
        assert await store.partitions.batcher.call("ZCARD", pk.compact_dirty) == 1

    asyncio.run(with_store(redis_url, body))


def test_deleting_the_topic_deletes_the_compaction_keys(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact"})
        await write(store, config, versions(3, 2) + [(b"k0", None)])
        pk = store.partitions.keys.partition(TOPIC, 0)
        assert await store.partitions.batcher.call("EXISTS", *pk.compaction()) == 3
        await delete_topic(store.partitions.topics, TOPIC)
        assert await store.partitions.batcher.call("EXISTS", *pk.compaction()) == 0

    asyncio.run(with_store(redis_url, body))


def test_redis_cli_xrange_shows_what_is_left(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(
            store, {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.1"}
        )
        await write(store, config, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
        [(_, rolled)] = await roll(store, config)
        await compact(store, config)
        client = redis.Redis.from_url(redis_url)
        try:
            log = store.partitions.keys.partition(TOPIC, 0).log
            left = [(f[b"key"], f[b"value"]) for _, f in client.xrange(log)]
        finally:
            client.close()
        assert left == [(b"b", b"1"), (b"a", b"2"), rolled]

    asyncio.run(with_store(redis_url, body))


def test_the_active_segment_is_never_compacted(redis_url: str) -> None:
    """Kafka's cleaner never touches the active segment (``segment.ms``: a week by default),
    so a key's previous value stays; Quix Streams' at-least-once recovery falls back to it
    (docs/apps.md)."""

    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact", "segment_ms": None})
        records = versions(10, 2)  # 10 of 20 superseded: Kafka's default ratio, 0.5
        written = list(zip(await write(store, config, records), records, strict=True))
        await compact(store, config)
        assert await read_log(store, config) == written

    asyncio.run(with_store(redis_url, body))


def test_records_superseded_only_in_the_active_segment_stay(redis_url: str) -> None:
    """The cleaner keeps, per key, the newest record of the closed segments: a record that
    only a record of the active segment supersedes stays until that segment rolls."""

    async def body(store: KafkaStore) -> None:
        config = await configure(
            store, {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01"}
        )
        first = versions(5, 1)
        written = list(zip(await write(store, config, first), first, strict=True))
        second = [(k, b"second") for k, _ in first]
        written += await roll(store, config)
        written += list(zip(await write(store, config, second), second, strict=True))
        # the first batch's segment is closed; the active one supersedes every record of
        # it: nothing goes
        assert (await compact(store, config)).removed == 0
        assert await read_log(store, config) == written

        written += await roll(store, config)  # the second batch's segment closes
        result = await compact(store, config)
        assert result.removed == 5
        assert await read_log(store, config) == written[5:]

        # k0 once more, in the active segment: k0's "second" stays, it is the newest of
        # the closed segments
        again = [(b"k0", b"third")]
        written += list(zip(await write(store, config, again), again, strict=True))
        assert (await compact(store, config)).removed == 0
        assert await read_log(store, config) == written[5:]

    asyncio.run(with_store(redis_url, body))
