"""``python -m bench.compaction``: compaction throughput (records removed per second) and its
effect on produce latency while it runs.

A redis-server of its own; a compacted topic prefilled with ``--records`` records over
``--keys`` keys (all but the last version of each key superseded); then, against the same
Redis, a producer appends one record at a time to another topic for ``--duration`` seconds
alone (the baseline), and again while the compacted partition is compacted
(mapping/partition/compaction.py, the pods' code, bounded script calls; finding the segments first,
mapping/partition/segments.py). Prints one row: records removed, the rate, and the producer's
p50/p99
without and with compaction beside it.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from bench.report import Row
from bench.stats import Histogram
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess
from mapping.connection.startup import pin_sequence_bits
from mapping.core.keys import Keys
from mapping.partition.compaction import MAX_REMOVE_PER_CALL, CompactionResult, compact_partition
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics

BITS = 10
VALUE = b"x" * 100
COMPACTED = "compacted"
LIVE = "live"


@dataclass(frozen=True, slots=True)
class CompactionRow:
    removed: int
    seconds: float
    p50_alone_us: float
    p99_alone_us: float
    p50_during_us: float
    p99_during_us: float
    produced_alone_per_s: float = 0.0  # the producer's records/s, alone and during
    produced_during_per_s: float = 0.0

    @property
    def removed_per_second(self) -> float:
        return self.removed / self.seconds if self.seconds else 0.0

    def line(self) -> str:
        return (
            f"compaction  removed={self.removed} in {self.seconds:.2f}s "
            f"({self.removed_per_second:,.0f} rec/s)  produce p50/p99 alone "
            f"{self.p50_alone_us:.0f}/{self.p99_alone_us:.0f} us, during compaction "
            f"{self.p50_during_us:.0f}/{self.p99_during_us:.0f} us "
            f"(p99 x{self.p99_during_us / max(self.p99_alone_us, 1):.2f})"
        )


async def _produce_for(
    partitions: Partitions, stop: asyncio.Event | None, seconds: float
) -> Histogram:
    """One record at a time to the live topic until ``stop`` is set or ``seconds`` pass."""
    config = await partitions.topics.topic(LIVE)
    latencies = Histogram()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and not (stop is not None and stop.is_set()):
        started = time.perf_counter()
        await partitions.produce(config, 0, [(b"key", VALUE)])
        latencies.add(time.perf_counter() - started)
    return latencies


async def _measure(
    url: str, records: int, keys: int, duration: float, max_remove: int
) -> CompactionRow:
    client = connect(url, 10.0)
    names = Keys("bench-compaction")
    await pin_sequence_bits(client, names, BITS)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        topics = Topics(batcher, names, topic_defaults=TopicDefaults(1, 1, 1))
        partitions = Partitions(batcher, names, topics, sequence_bits=BITS)
        await topics.topic(COMPACTED)
        # a small segment.ms, as Kafka users set to see compaction at work: the record after
        # the prefill rolls its segment, so the cleaner may clean all of it
        await topics.alter_configs(COMPACTED, {"cleanup_policy": "compact", "segment_ms": "1"})
        topics.cache.forget(COMPACTED)
        config = await topics.topic(COMPACTED)
        for start in range(0, records, 1000):
            chunk = range(start, min(start + 1000, records))
            await partitions.produce(config, 0, [(b"k%d" % (i % keys), VALUE) for i in chunk])
        await asyncio.sleep(0.01)  # past segment.ms
        await partitions.produce(config, 0, [(b"roll", VALUE)])

        alone = await _produce_for(partitions, None, duration)
        stop = asyncio.Event()
        during_task = asyncio.create_task(_produce_for(partitions, stop, 3600))
        started = time.perf_counter()
        result: CompactionResult = await compact_partition(
            partitions, config, 0, max_remove=max_remove, max_calls=1_000_000
        )
        seconds = time.perf_counter() - started
        stop.set()
        during = await during_task
    finally:
        runner.cancel()
        await client.aclose()
    return CompactionRow(
        removed=result.removed,
        seconds=seconds,
        p50_alone_us=alone.percentile_us(0.5) or 0.0,
        p99_alone_us=alone.percentile_us(0.99) or 0.0,
        p50_during_us=during.percentile_us(0.5) or 0.0,
        p99_during_us=during.percentile_us(0.99) or 0.0,
        produced_alone_per_s=alone.total / duration,
        produced_during_per_s=during.total / seconds if seconds else 0.0,
    )


def run(
    records: int, keys: int, duration: float, max_remove: int = MAX_REMOVE_PER_CALL
) -> CompactionRow:
    with tempfile.TemporaryDirectory() as folder:
        with RedisProcess(Path(folder), appendonly=False) as server:
            return asyncio.run(_measure(server.url, records, keys, duration, max_remove))


def rows(records: int, keys: int, duration: float) -> list[Row]:
    """The two rows of ``python -m bench``: produce p50/p99 on an idle Redis (the baseline)
    and while a partition is compacted beside it, the ratio being p99 during / p99 idle; the
    compaction's own rate (records removed per second) in the second row's note."""
    result = run(records, keys, duration)
    alone, during_rate = result.produced_alone_per_s, result.produced_during_per_s
    idle = Row("produce, compaction idle", "redis", 1, "one-at-a-time", alone, alone,
               result.p50_alone_us, result.p99_alone_us, None,
               note="one record at a time, another topic of the same Redis")  # fmt: skip
    during = Row("produce during compaction", "adapter", 1, "one-at-a-time",
                 during_rate, during_rate,
                 result.p50_during_us, result.p99_during_us, None,
                 ratio=result.p99_during_us / max(result.p99_alone_us, 1.0),
                 ratio_to="p99 / idle p99",
                 note=f"compaction removed {result.removed_per_second:,.0f} rec/s",
                 extra={"removed": result.removed, "seconds": result.seconds,
                        "removed_per_s": result.removed_per_second})  # fmt: skip
    return [idle, during]


@click.command(context_settings={"show_default": True})
@click.option("--records", default=200_000, help="Records in the compacted partition.")
@click.option("--keys", default=1_000, help="Distinct keys among them.")
@click.option("--duration", default=3.0, help="Seconds of the producer's baseline.")
@click.option(
    "--max-remove", default=MAX_REMOVE_PER_CALL, help="Records one compaction step removes."
)
def main(records: int, keys: int, duration: float, max_remove: int) -> None:
    """Compaction throughput and produce latency while it runs."""
    click.echo(run(records, keys, duration, max_remove).line())


if __name__ == "__main__":
    main()
