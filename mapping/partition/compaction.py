"""Compaction of topics whose ``cleanup.policy`` holds ``compact`` (docs/compaction.md).

The appends keep, per partition, each key's latest entry, the superseded entries and the
tombstones (lib/append.lua); ``partition/compact.lua`` removes, in bounded steps, what
Kafka's rules allow, below the active segment (mapping/partition/segments.py). Records the appends
did not index (written before the topic became compacted, or by a pod with a stale config)
are indexed first by a cursor
(``partition/compact_index.lua``), and index entries of records retention or DeleteRecords
trimmed are swept (``partition/compact_sweep.lua``), in bounded steps too. The pod's
retention task runs it (one pod at a time, under the retention lease:
mapping/operations/retention.py),
after retention, on every partition of every compacted topic; ``adapter topic compact``
runs it once.

Every step is one script call through the pod's pipeline (mapping/connection/batcher.py), so
appends go
between the steps; a step is kept small because an append queued behind it waits for it
(bench/compaction.py measures the trade: docs/compaction.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapping.connection import scripts
from mapping.partition.partition_scripts import PartitionHead
from mapping.partition.partitions import Partitions
from mapping.partition.segments import roll_partition
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_rules import Compaction, compaction_of

PARTITION_COMPACT = scripts.load("partition/compact")
PARTITION_COMPACT_INDEX = scripts.load("partition/compact_index")
PARTITION_COMPACT_SWEEP = scripts.load("partition/compact_sweep")

# Records one removal step removes at most (one XDEL of this many ids per stream). Measured
# with bench/compaction.py on the 2-core VM: 1000 per step held an append up to ~5 ms
# (p99), 100 holds it about 1 ms for half the throughput (docs/compaction.md).
MAX_REMOVE_PER_CALL = 100
# Log entries one index step reads, index fields one sweep step scans (each cheaper than a
# removal: one XRANGE page or HSCAN page and a hash/zset write per record).
MAX_INDEX_PER_CALL = 200
MAX_SWEEP_PER_CALL = 200
# Calls of each kind one partition gets per run at most; the next run goes on.
MAX_CALLS_PER_RUN = 10_000


def partition_compact_call(
    head: PartitionHead, settings: Compaction, max_remove: int, triggered: bool
) -> tuple:
    """partition/compact.lua on the partition of ``head`` (its replica streams too)."""
    args = [
        settings.min_compaction_lag_ms,
        settings.max_compaction_lag_ms,
        repr(settings.min_cleanable_dirty_ratio),
        settings.delete_retention_ms,
        max_remove,
        int(triggered),
    ]
    return head.command(PARTITION_COMPACT, [*head.keys.compaction(), *head.replicas()], args)


def partition_compact_index_call(head: PartitionHead, max_entries: int) -> tuple:
    """partition/compact_index.lua: index up to ``max_entries`` unindexed log entries."""
    return head.command(PARTITION_COMPACT_INDEX, head.keys.compaction(), [max_entries])


def partition_compact_sweep_call(head: PartitionHead, max_fields: int) -> tuple:
    """partition/compact_sweep.lua: sweep up to ``max_fields`` index fields of trimmed records."""
    return head.command(PARTITION_COMPACT_SWEEP, head.keys.compaction(), [max_fields])


@dataclass(frozen=True, slots=True)
class CompactionResult:
    topic: str
    partition: int
    removed: int  # superseded records removed
    tombstones_removed: int
    dirty: int  # superseded records still in the log (not old enough, or compaction not due)
    calls: int
    indexed: int = 0  # records the cursor indexed (the appends had not)
    swept: int = 0  # index entries of trimmed records removed
    index_complete: bool = True  # False: the cursor has more to index (the next run goes on)


async def compact_partition(
    partitions: Partitions,
    config: TopicConfig,
    partition: int,
    *,
    max_remove: int = MAX_REMOVE_PER_CALL,
    max_calls: int = MAX_CALLS_PER_RUN,
    max_index: int = MAX_INDEX_PER_CALL,
    max_sweep: int = MAX_SWEEP_PER_CALL,
) -> CompactionResult:
    """Compact one partition: index what the appends did not, sweep what retention trimmed,
    then remove what may go now; each in bounded script calls."""
    settings = compaction_of(config)
    head = partitions.head(config, partition)
    batcher = partitions.batcher
    calls = indexed = swept = 0
    index_complete = False
    for _ in range(max_calls):
        reply = await batcher.call(*partition_compact_index_call(head, max_index))
        calls += 1
        indexed += int(reply[2])
        if int(reply[1]):
            index_complete = True
            break
    for _ in range(max_calls):
        reply = await batcher.call(*partition_compact_sweep_call(head, max_sweep))
        calls += 1
        swept += int(reply[0]) + int(reply[2])
        if int(reply[1]):
            break
    # the cleaner's range ends at the active segment: find where it starts now
    await roll_partition(partitions, config, partition)
    removed = tombstones = dirty = 0
    triggered = False
    for _ in range(max_calls):
        reply = await batcher.call(*partition_compact_call(head, settings, max_remove, triggered))
        calls += 1
        removed += int(reply[0])
        tombstones += int(reply[1])
        dirty = int(reply[3])
        triggered = bool(int(reply[4]))
        if not int(reply[2]):
            break
    return CompactionResult(
        config.name, partition, removed, tombstones, dirty, calls, indexed, swept, index_complete
    )


async def compact_topic(partitions: Partitions, topic: str) -> list[CompactionResult]:
    """Compact every partition of ``topic`` once (nothing when it is not compacted)."""
    config = await partitions.topics.lookup(topic)
    if config is None or not compaction_of(config).compact:
        return []
    # One partition after the other: an append waits behind at most one step, not one per
    # partition in the same pipeline.
    return [await compact_partition(partitions, config, p) for p in range(config.partitions)]


async def compact_all(partitions: Partitions) -> list[CompactionResult]:
    results: list[CompactionResult] = []
    for topic in await partitions.topics.names():
        results.extend(await compact_topic(partitions, topic))
    return results
