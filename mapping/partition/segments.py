"""A partition's segments, as Kafka has them (docs/compaction.md, "Segments").

Kafka divides each partition's log into segments: the active one takes the appends and
rolls when a record arrives after ``segment.ms`` (less ``segment.jitter.ms``'s share) or
would take it past ``segment.bytes``. Compaction never cleans the active segment, and time
retention deletes whole closed segments. Here the appends do nothing for it: offsets encode
append times, so ``partition/segment_roll.lua`` finds the same roll points after the fact,
from where its last step stopped: by time alone, one lookup per roll point, unless the topic
lowered ``segment.bytes`` (then it reads each record once, in bounded steps). The retention task
runs it before retention by time and before compaction; a step that has not reached the
log end yet leaves more in the active segment, so both do less, never more.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapping.connection import scripts
from mapping.partition.partition_scripts import PartitionHead
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_configs import value_of
from mapping.topic.topic_rules import Segments, compaction_of, segments_of

PARTITION_SEGMENT_ROLL = scripts.load("partition/segment_roll")

# Records, and bytes of them, one step reads at most: about the cost of one compaction
# removal step (mapping/partition/compaction.py), so an append queued behind it waits as little.
MAX_ROLL_RECORDS_PER_CALL = 500
MAX_ROLL_BYTES_PER_CALL = 4 << 20
# Topics whose segment.bytes is below this (Kafka's default) roll by bytes too, which needs
# every record read once; the others roll by time alone, reading one entry per roll point.
BYTES_ROLL_BELOW = Segments().segment_bytes
# Steps one partition gets per run at most; the next run goes on from where this one stopped.
MAX_ROLL_CALLS_PER_RUN = 10_000


def partition_segment_roll_call(
    head: PartitionHead,
    segments: Segments,
    keep_roll_points: bool,
    max_records: int = MAX_ROLL_RECORDS_PER_CALL,
    max_bytes: int = MAX_ROLL_BYTES_PER_CALL,
) -> tuple:
    """partition/segment_roll.lua: one step of finding the roll points of ``head``'s log."""
    args = [
        segments.roll_ms,
        segments.segment_bytes,
        segments.jitter_ms,
        int(keep_roll_points),
        max_records,
        max_bytes,
        BYTES_ROLL_BELOW,
    ]
    return head.command(PARTITION_SEGMENT_ROLL, [head.keys.segments], args)


def keeps_roll_points(config: TopicConfig) -> bool:
    """Whether retention by time cuts ``config``'s logs (cleanup.policy holds delete and
    retention.ms is not -1): then every roll point is kept, else only the active segment's."""
    return compaction_of(config).delete and value_of(config, "retention.ms") >= 0


@dataclass(frozen=True, slots=True)
class ActiveSegment:
    first_offset: int  # the active segment's first offset (the last roll point found)
    read: int  # records this run read
    complete: bool  # False: the log end was not reached (the next run goes on)


async def roll_partition(
    partitions: Partitions,
    config: TopicConfig,
    partition: int,
    *,
    max_records: int = MAX_ROLL_RECORDS_PER_CALL,
    max_calls: int = MAX_ROLL_CALLS_PER_RUN,
) -> ActiveSegment:
    """Find the roll points of one partition up to its log end, in bounded steps."""
    head = partitions.head(config, partition)
    segments = segments_of(config)
    keep_roll_points = keeps_roll_points(config)
    first_offset = read = 0
    for _ in range(max_calls):
        call = partition_segment_roll_call(head, segments, keep_roll_points, max_records)
        reply = await partitions.batcher.call(*call)
        first_offset, read = int(reply[0]), read + int(reply[1])
        if int(reply[2]):
            return ActiveSegment(first_offset, read, True)
    return ActiveSegment(first_offset, read, False)
