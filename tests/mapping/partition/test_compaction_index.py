"""The compaction index's cursor and sweep (partition/compact_index.lua,
partition/compact_sweep.lua; docs/compaction.md): a log written under cleanup.policy=delete
is compacted once the topic becomes compacted, as Kafka does; records a pod with a stale
config appended unindexed are indexed before any tombstone above them goes; index entries of
records retention or DeleteRecords trimmed are swept; a follower partition keeps compacting,
and once promoted again its appends go on indexing."""

from __future__ import annotations

import asyncio

from mapping.partition.kafka import KafkaStore, partition_delete_records_call
from mapping.partition.partition_scripts import (
    partition_replica_fetch_call,
    partition_set_role_call,
)
from tests.mapping.partition.compaction_store import (
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


async def _state(store: KafkaStore, field: str) -> bytes | None:
    state = store.partitions.keys.partition(TOPIC, 0).state
    return await store.partitions.batcher.call("HGET", state, field)


def test_a_log_written_under_delete_is_compacted_once_the_topic_is_compacted(
    redis_url: str,
) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {})
        records = versions(20, 3) + [(b"k4", None), (b"k5", None), (b"k5", b"back")]
        written = list(zip(await write(store, config, records), records, strict=True))
        pk = store.partitions.keys.partition(TOPIC, 0)
        assert not await store.partitions.batcher.call("EXISTS", pk.compact_index)

        config = await configure(store, {"cleanup_policy": "compact"})
        written += await roll(store, config)  # appended after the gap: indexed by its append
        # small steps: the cursor goes on over several calls
        result = await compact(store, config, max_index=7)
        assert result.indexed == len(records)
        assert result.index_complete
        assert result.calls > len(records) // 7
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=False)
        log_end = await _state(store, "log_end")
        assert await _state(store, "compact.indexed") == log_end

        # indexed now: appends go on from the cursor's end, the next run indexes nothing
        more = [(b"k1", b"last")]
        written += list(zip(await write(store, config, more), more, strict=True))
        assert await _state(store, "compact.indexed") == await _state(store, "log_end")
        result = await compact(store, config)
        assert (result.indexed, result.removed, result.dirty) == (0, 0, 1)  # 1 of 23: not due

        config = await configure(
            store, {"delete_retention_ms": 0, "min_cleanable_dirty_ratio": "0.01"}
        )
        written += await roll(store, config)
        result = await compact(store, config)
        assert (result.removed, result.tombstones_removed) == (1, 1)  # k4's (k5's superseded)
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=True)

    asyncio.run(with_store(redis_url, body))


def test_records_a_stale_pod_appended_unindexed_are_indexed_before_tombstones_go(
    redis_url: str,
) -> None:
    async def body(store: KafkaStore) -> None:
        stale = await configure(store, {})  # what a pod that missed the change still holds
        config = await configure(store, {"cleanup_policy": "compact", "delete_retention_ms": 0})
        records = versions(5, 2)
        written = list(zip(await write(store, config, records), records, strict=True))
        assert await _state(store, "compact.indexed") == await _state(store, "log_end")
        indexed_before = await _state(store, "compact.indexed")

        # the stale pod writes without the index: k9's only value and another k0
        unindexed = [(b"k9", b"old"), (b"k0", b"stale")]
        written += list(zip(await write(store, stale, unindexed), unindexed, strict=True))
        # then up-to-date pods: k9's tombstone, k0 again; the frontier stays behind the gap
        later = [(b"k9", None), (b"k0", b"newest")]
        written += list(zip(await write(store, config, later), later, strict=True))
        assert await _state(store, "compact.indexed") == indexed_before
        written += await roll(store, config)

        # Without the cursor k9's tombstone would go and "old" would come back as k9's value.
        result = await compact(store, config, max_index=1)
        assert result.indexed == 2  # the two unindexed records
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=True)
        assert all(key != b"k9" for _, (key, _) in await read_log(store, config))
        assert await _state(store, "compact.indexed") == await _state(store, "log_end")

    asyncio.run(with_store(redis_url, body))


def test_tombstones_above_the_indexed_offset_wait_for_the_cursor(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        stale = await configure(store, {})
        # (a dirty ratio for the roll record: 1 superseded of 3 records is due)
        changes = {"cleanup_policy": "compact", "delete_retention_ms": 0}
        config = await configure(store, {**changes, "min_cleanable_dirty_ratio": "0.3"})
        await write(store, stale, [(b"a", b"old")])
        tombstone = await write(store, config, [(b"a", None)])
        [rolled] = await roll(store, config)
        # one cursor step (of one entry) per run: the first run indexes "old" only, which
        # the tombstone supersedes: "old" goes, the tombstone (above the frontier) stays
        result = await compact(store, config, max_index=1, max_calls=1)
        assert (result.index_complete, result.removed, result.tombstones_removed) == (
            False,
            1,
            0,
        )
        assert await read_log(store, config) == [(tombstone[0], (b"a", None)), rolled]
        # the next run's cursor reaches the log end (the tombstone, the roll record): now
        # the tombstone may go
        result = await compact(store, config, max_index=2, max_calls=1)
        assert (result.index_complete, result.tombstones_removed) == (True, 1)
        assert await read_log(store, config) == [rolled]

    asyncio.run(with_store(redis_url, body))


def test_trimmed_records_are_swept_from_the_index(redis_url: str) -> None:
    async def body(store: KafkaStore) -> None:
        config = await configure(store, {"cleanup_policy": "compact,delete"})
        first = [(f"gone{k}".encode(), b"v") for k in range(30)]
        first += [(b"gone0", None), (b"kept", b"1")]
        offsets = await write(store, config, first)
        later = versions(3, 2)
        await write(store, config, later)
        pk = store.partitions.keys.partition(TOPIC, 0)
        call = store.partitions.batcher.call
        assert await call("HLEN", pk.compact_index) == 30 + 1 + 3
        # everything up to "kept" goes: 30 keys whose latest record is gone
        head = store.partitions.head(config, 0)
        await call(*partition_delete_records_call(head, offsets[-1]))

        result = await compact(store, config, max_sweep=4)
        assert result.swept >= 30 + 2  # 30 index fields, gone0's tombstone and its dirty entry
        keys = sorted(await call("HKEYS", pk.compact_index))
        assert keys == [b"k0", b"k1", b"k2", b"kept"]
        assert await call("ZCARD", pk.compact_tombstones) == 0
        # nothing trimmed since: the next run does not scan the index again
        assert (await compact(store, config)).swept == 0
        assert await _state(store, "compact.sweep") is None

    asyncio.run(with_store(redis_url, body))


def test_a_follower_partition_keeps_compacting_and_goes_on_once_promoted(
    redis_url: str,
) -> None:
    async def body(store: KafkaStore) -> None:
        topics = store.partitions.topics
        await topics.create(TOPIC, 1, 2, 1)
        # (a dirty ratio for the roll records: 4 superseded of 10 records is due)
        changes = {
            "cleanup_policy": "compact",
            "segment_ms": "1",
            "min_cleanable_dirty_ratio": "0.4",
        }
        await topics.alter_configs(TOPIC, changes)
        topics.cache.forget(TOPIC)
        config = await topics.topic(TOPIC)
        assert config.replication_factor == 2
        head = store.partitions.head(config, 0)
        call = store.partitions.batcher.call
        records = versions(4, 3)
        written = list(zip(await write(store, config, records), records, strict=True))
        written += await roll(store, config)
        await call(*partition_replica_fetch_call(head, 1, written[-1][0], 1000))

        await call(*partition_set_role_call(head, "follower"))
        result = await compact(store, config)
        assert result.removed == 8
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=False)
        replica = [entry[0] for entry in await call("XRANGE", head.keys.replica(1), "-", "+")]
        log = [entry[0] for entry in await call("XRANGE", head.keys.log, "-", "+")]
        assert replica == log

        await call(*partition_set_role_call(head, "leader"))
        more = versions(4, 1)
        written += list(zip(await write(store, config, more), more, strict=True))
        written += await roll(store, config)
        await call(*partition_replica_fetch_call(head, 1, written[-1][0], 1000))
        result = await compact(store, config)
        assert (result.indexed, result.removed) == (0, 4)
        assert await read_log(store, config) == kafka_keeps(written, tombstones_expired=False)
        replica = [entry[0] for entry in await call("XRANGE", head.keys.replica(1), "-", "+")]
        log = [entry[0] for entry in await call("XRANGE", head.keys.log, "-", "+")]
        assert replica == log

    asyncio.run(with_store(redis_url, body))
