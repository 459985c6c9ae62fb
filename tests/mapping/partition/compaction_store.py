"""What the compaction tests of this folder share: a store on a fresh key prefix, topic
configs set as a pod sees them, writes through kafka/produce.lua, the log read back, and
what Kafka's cleaner keeps."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Mapping

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core.keys import Keys
from mapping.core.records import entry_record
from mapping.partition.compaction import CompactionResult, compact_partition
from mapping.partition.kafka import KafkaStore
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig, TopicDefaults
from mapping.topic.topics import Topics

BITS = 10
TOPIC = "compacted"


async def with_store(redis_url: str, body: Callable[[KafkaStore], Awaitable[None]]) -> None:
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


# The tests' segment.ms: a record appended 2 ms after a segment's first record rolls it, as
# Kafka users set a small segment.ms to see compaction at work (docs/compaction.md).
SEGMENT_MS = "1"


async def configure(store: KafkaStore, changes: Mapping[str, int | str | None]) -> TopicConfig:
    """Set topic configs (``segment.ms`` SEGMENT_MS unless ``changes`` say otherwise) and
    read the topic again (as a pod does when told)."""
    topics = store.partitions.topics
    await topics.topic(TOPIC)
    await topics.alter_configs(TOPIC, {"segment_ms": SEGMENT_MS, **changes})
    topics.cache.forget(TOPIC)
    return await topics.topic(TOPIC)


Record = tuple[bytes, bytes | None]  # (key, value); None: a tombstone


async def write(store: KafkaStore, config: TopicConfig, records: list[Record]) -> list[int]:
    """The records through kafka/produce.lua, one batch; their offsets."""
    batch = [(k, v, 0, []) for k, v in records]
    result = await store.append_batch(config, 0, batch)
    assert result.status == 0
    return list(range(result.base_offset, result.last_offset + 1))


async def roll(store: KafkaStore, config: TopicConfig) -> list[tuple[int, Record]]:
    """Close the active segment as Kafka would: one record (of a key of its own) appended
    after segment.ms; what was written before it is then in closed segments."""
    # not a synchronisation: the record's append time must lie past segment.ms
    await asyncio.sleep(0.01)
    record = (f"roll-{uuid.uuid4().hex[:8]}".encode(), b"r")
    return list(zip(await write(store, config, [record]), [record], strict=True))


def versions(keys: int, versions: int) -> list[Record]:
    return [(f"k{k}".encode(), f"v{v}-{k}".encode()) for v in range(versions) for k in range(keys)]


def kafka_keeps(
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


async def read_log(store: KafkaStore, config: TopicConfig) -> list[tuple[int, Record]]:
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


async def compact(store: KafkaStore, config: TopicConfig, **bounds: int) -> CompactionResult:
    return await compact_partition(store.partitions, config, 0, **bounds)
