"""Compaction of topics whose ``cleanup.policy`` holds ``compact`` (docs/compaction.md).

The appends keep, per partition, each key's latest entry, the superseded entries and the
tombstones (lib/append.lua); ``partition/compact.lua`` removes, in bounded steps, what
Kafka's rules allow. The pod's retention task runs it (one pod at a time, under the
retention lease: mapping/retention.py), after retention, on every partition of every
compacted topic; ``adapter topic compact`` runs it once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping import scripts
from mapping.partition_scripts import PartitionHead
from mapping.partitions import Partitions
from mapping.topic_config import TopicConfig
from mapping.topic_rules import Compaction, compaction_of

PARTITION_COMPACT = scripts.load("partition/compact")

# Records one script call removes at most (one XDEL of this many ids): a call holds Redis
# for about a millisecond per thousand.
MAX_REMOVE_PER_CALL = 1000
# Calls one partition gets per run at most; the next run goes on.
MAX_CALLS_PER_RUN = 1000


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


@dataclass(frozen=True, slots=True)
class CompactionResult:
    topic: str
    partition: int
    removed: int  # superseded records removed
    tombstones_removed: int
    dirty: int  # superseded records still in the log (not old enough, or compaction not due)
    calls: int


async def compact_partition(
    partitions: Partitions,
    config: TopicConfig,
    partition: int,
    *,
    max_remove: int = MAX_REMOVE_PER_CALL,
    max_calls: int = MAX_CALLS_PER_RUN,
) -> CompactionResult:
    """Compact one partition: bounded script calls until nothing more may go now."""
    settings = compaction_of(config)
    head = partitions.head(config, partition)
    removed = tombstones = calls = dirty = 0
    triggered = False
    while calls < max_calls:
        reply = await partitions.batcher.call(
            *partition_compact_call(head, settings, max_remove, triggered)
        )
        calls += 1
        removed += int(reply[0])
        tombstones += int(reply[1])
        dirty = int(reply[3])
        triggered = bool(int(reply[4]))
        if not int(reply[2]):
            break
    return CompactionResult(config.name, partition, removed, tombstones, dirty, calls)


async def compact_topic(partitions: Partitions, topic: str) -> list[CompactionResult]:
    """Compact every partition of ``topic`` once (nothing when it is not compacted)."""
    config = await partitions.topics.lookup(topic)
    if config is None or not compaction_of(config).compact:
        return []
    return list(
        await asyncio.gather(
            *(compact_partition(partitions, config, p) for p in range(config.partitions))
        )
    )


async def compact_all(partitions: Partitions) -> list[CompactionResult]:
    results: list[CompactionResult] = []
    for topic in await partitions.topics.names():
        results.extend(await compact_topic(partitions, topic))
    return results
