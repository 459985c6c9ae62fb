"""Compaction (mapping/compaction.py, partition/compact.lua) straight against Redis: after
many versions of many keys and tombstones, exactly what Kafka's rules keep is left, in
offset order; the min lag, the dirty ratio, the max lag and delete.retention.ms are honoured;
bounded steps reach the same result; retention trims and DeleteRecords leave nothing
harmful behind; a deleted topic leaves none of the new keys."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping

import redis

from mapping import codec
from mapping.admin import delete_topic
from mapping.batcher import RedisBatcher
from mapping.client import connect
from mapping.compaction import CompactionResult, compact_partition
from mapping.kafka import KafkaStore, partition_delete_records_call
from mapping.keys import Keys
from mapping.partitions import Partitions
from mapping.records import entry_record
from mapping.startup import pin_sequence_bits
from mapping.topic_config import TopicConfig, TopicDefaults
from mapping.topics import Topics

BITS = 10
TOPIC = "compacted"


async def _with_store(redis_url: str, body: Callable[[KafkaStore], Awaitable[None]]) -> None:
    client = connect(redis_url, 5.0)
    keys = Keys(f"compact-{uuid.uuid4().hex[:8]}")
    await pin_sequence_bits(client, keys, BITS)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        topics = Topics(batcher, keys, topic_defaults=TopicDefaults(1, 1, 1))
        await body(KafkaStore(Partitions(batcher, keys, topics, sequence_bits=BITS)))
    finally:
        runner.cancel()
        await client.aclose()


async def _configure(store: KafkaStore, changes: Mapping[str, int | str | None]) -> TopicConfig:
    """Set topic configs and read the topic again (as a pod does when told)."""
    topics = store.partitions.topics
    await topics.topic(TOPIC)
    await topics.alter_configs(TOPIC, changes)
    topics.forget(TOPIC)
    return await topics.topic(TOPIC)


Record = tuple[bytes, bytes | None]  # (key, value); None: a tombstone


async def _write(store: KafkaStore, config: TopicConfig, records: list[Record]) -> list[int]:
    """The records through kafka/produce.lua, one batch; their offsets."""
    batch = [(k, v, 0, []) for k, v in records]
    result = await store.append_batch(config, 0, batch)
    assert result.status == 0
    return list(range(result.base_offset, result.last_offset + 1))


def _versions(keys: int, versions: int) -> list[Record]:
    return [(f"k{k}".encode(), f"v{v}-{k}".encode()) for v in range(versions) for k in range(keys)]


def _kafka_keeps(
    written: list[tuple[int, Record]], tombstones_expired: bool
) -> list[tuple[int, Record]]:
    """What Kafka's cleaner leaves of ``written`` (every record old enough): the latest
    record of each key, a tombstone only while it has not expired; in offset order."""
    latest = {key: offset for offset, (key, _) in written}
    return [
        (offset, (key, value))
        for offset, (key, value) in written
        if latest[key] == offset and not (value is None and tombstones_expired)
    ]


async def _read(store: KafkaStore, config: TopicConfig) -> list[tuple[int, Record]]:
    """The whole log through the Kafka fetch read, decoded."""
    found = []
    position = 0
    while True:
        read = await store.start_read(config, 0, position, 500)
        records = [entry_record(i, f, BITS) for i, f in read.entries]
        records = [r for r in records if r.offset <= read.high_watermark]
        if not records:
            return found
        found += [(r.offset, (r.key, r.value)) for r in records]
        position = records[-1].offset + 1


async def _compact(store: KafkaStore, config: TopicConfig, **bounds: int) -> CompactionResult:
    return await compact_partition(store.partitions, config, 0, **bounds)


def test_exactly_what_kafka_keeps_then_expired_tombstones_go(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(store, {"cleanup_policy": "compact"})
        records = _versions(20, 5)
        records += [(b"k3", None), (b"k7", None), (b"k7", b"back"), (b"k11", None)]
        records += _versions(2, 1)  # k0, k1 once more
        written = list(zip(await _write(store, config, records), records, strict=True))

        result = await _compact(store, config)
        kept = _kafka_keeps(written, tombstones_expired=False)
        assert await _read(store, config) == kept
        assert result.removed == len(written) - len(kept)
        assert (result.tombstones_removed, result.dirty) == (0, 0)
        # a second run finds nothing to do
        assert (await _compact(store, config)).removed == 0

        config = await _configure(store, {"delete_retention_ms": 0})
        result = await _compact(store, config)
        assert result.tombstones_removed == 2  # k3 and k11 (k7's was superseded)
        assert await _read(store, config) == _kafka_keeps(written, tombstones_expired=True)
        index = store.partitions.keys.partition(TOPIC, 0).compact_index
        assert not await store.partitions.batcher.call("HEXISTS", index, "k3")
        # k3 written again supersedes nothing: its tombstone left the index
        again = await _write(store, config, [(b"k3", b"new")])
        assert (await _compact(store, config)).dirty == 0
        assert (await _read(store, config))[-1] == (again[0], (b"k3", b"new"))

    asyncio.run(_with_store(redis_url, body))


def test_min_lag_dirty_ratio_and_max_lag(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(
            store, {"cleanup_policy": "compact", "min_compaction_lag_ms": 3_600_000}
        )
        records = _versions(10, 2)  # 10 of 20 superseded: dirty ratio 0.5
        written = list(zip(await _write(store, config, records), records, strict=True))
        # superseding records younger than the min lag: nothing goes
        assert (await _compact(store, config)).removed == 0
        assert len(await _read(store, config)) == 20

        config = await _configure(
            store, {"min_compaction_lag_ms": None, "min_cleanable_dirty_ratio": "0.9"}
        )
        result = await _compact(store, config)
        assert (result.removed, result.dirty) == (0, 10)  # 0.5 < 0.9: not due

        config = await _configure(store, {"max_compaction_lag_ms": 0})  # due by age
        assert (await _compact(store, config)).removed == 10
        assert await _read(store, config) == _kafka_keeps(written, tombstones_expired=False)

    asyncio.run(_with_store(redis_url, body))


def test_bounded_steps_give_the_same_result(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(store, {"cleanup_policy": "compact", "delete_retention_ms": 0})
        records = _versions(30, 4) + [(f"k{k}".encode(), None) for k in range(0, 30, 3)]
        written = list(zip(await _write(store, config, records), records, strict=True))
        result = await _compact(store, config, max_remove=7)
        assert result.calls > 10
        assert await _read(store, config) == _kafka_keeps(written, tombstones_expired=True)
        assert result.removed + result.tombstones_removed == len(written) - 20

    asyncio.run(_with_store(redis_url, body))


def test_records_removed_by_delete_records_leave_nothing_harmful(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(store, {"cleanup_policy": "compact,delete"})
        first = _versions(10, 2)
        offsets = await _write(store, config, first)
        head = store.partitions.head(config, 0)
        # everything below the 15th record goes: the index still names some of them
        await store.partitions.batcher.call(*partition_delete_records_call(head, offsets[15]))
        later = _versions(10, 1)
        written = list(zip(offsets, first, strict=True))[15:]
        written += list(zip(await _write(store, config, later), later, strict=True))
        result = await _compact(store, config)
        assert await _read(store, config) == _kafka_keeps(written, tombstones_expired=False)
        assert result.removed == 5  # only records still in the log count
        assert result.dirty == 0

    asyncio.run(_with_store(redis_url, body))


def test_appends_keep_the_index_only_on_compacted_topics(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await store.partitions.topics.topic(TOPIC)
        await _write(store, config, _versions(3, 2))
        pk = store.partitions.keys.partition(TOPIC, 0)
        assert not await store.partitions.batcher.call("EXISTS", *pk.compaction())
        config = await _configure(store, {"cleanup_policy": "compact"})
        # V1 PRODUCE's script indexes too
        result = await store.partitions.produce(config, 0, [(b"a", b"1"), (b"a", b"2")])
        entry = codec.entry_id(result.offsets[1], BITS)
        assert await store.partitions.batcher.call("HGET", pk.compact_index, "a") == entry.encode()
        assert await store.partitions.batcher.call("ZCARD", pk.compact_dirty) == 1

    asyncio.run(_with_store(redis_url, body))


def test_deleting_the_topic_deletes_the_compaction_keys(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(store, {"cleanup_policy": "compact"})
        await _write(store, config, _versions(3, 2) + [(b"k0", None)])
        pk = store.partitions.keys.partition(TOPIC, 0)
        assert await store.partitions.batcher.call("EXISTS", *pk.compaction()) == 3
        await delete_topic(store.partitions.topics, TOPIC)
        assert await store.partitions.batcher.call("EXISTS", *pk.compaction()) == 0

    asyncio.run(_with_store(redis_url, body))


def test_redis_cli_xrange_shows_what_is_left(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await _configure(
            store, {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.1"}
        )
        await _write(store, config, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])
        await _compact(store, config)
        client = redis.Redis.from_url(redis_url)
        try:
            log = store.partitions.keys.partition(TOPIC, 0).log
            left = [(f[b"key"], f[b"value"]) for _, f in client.xrange(log)]
        finally:
            client.close()
        assert left == [(b"b", b"1"), (b"a", b"2")]

    asyncio.run(_with_store(redis_url, body))
