"""A query's start and (batch) end positions: its options (offset_specs.py) resolved against
what Redis holds now, on the driver.

By timestamp means what the pods' Kafka ListOffsets means (adapter/kafka/list_offsets.py):
the first committed record appended at or after the time, by its stream id (the append's
millisecond, Redis' clock), never the record's own CreateTime. A JSON spec's partitions not
named start at earliest (end at latest), as this connector did before the per-topic form;
a topic or partition the query does not read is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from mapping.core import codec
from mapping.core.keys import Keys
from spark_connector.errors import NoOffsetForTimestamp, OptionError
from spark_connector.offset_specs import (
    KAFKA_EARLIEST,
    KAFKA_LATEST,
    AtTimestamp,
    ByTimestamp,
    Earliest,
    GroupOffsets,
    Latest,
    OffsetSpec,
    PerPartition,
    TopicPartition,
)
from spark_connector.offsets import (
    Positions,
    TopicInfo,
    bounds,
    describe_topics,
    group_positions,
    topic_partitions,
)
from spark_connector.options import SourceOptions


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The subscribed topics as the driver read them at one moment."""

    topics: dict[str, TopicInfo]
    ends: Positions  # the end of what may be read (hw + 1, the last stable offset)
    firsts: Positions  # the log starts

    @property
    def sequence_bits(self) -> int:
        return next(iter(self.topics.values())).sequence_bits if self.topics else 0


def take_snapshot(
    client: redis.Redis, keys: Keys, opts: SourceOptions, *, require_all: bool = True
) -> Snapshot:
    topics = describe_topics(client, keys, opts.subscription, require_all=require_all)
    ends, firsts = bounds(client, keys, topic_partitions(topics), opts.durable_reads)
    return Snapshot(topics, ends, firsts)


def offsets_for_times(
    client: redis.Redis, keys: Keys, snap: Snapshot, times: dict[TopicPartition, int]
) -> dict[TopicPartition, int | None]:
    """Per partition, the offset of the first record appended at or after its time that is
    below the partition's end; None when there is none (Kafka's ListOffsets answers -1)."""
    wanted = sorted(times)
    pipe = client.pipeline(transaction=False)
    for topic, p in wanted:
        pipe.xrange(keys.partition(topic, p).log, f"{times[(topic, p)]}-0", "+", count=1)
    found: dict[TopicPartition, int | None] = {}
    for tp, entries in zip(wanted, pipe.execute(), strict=True):
        offset = codec.offset_of(entries[0][0], snap.sequence_bits) if entries else None
        found[tp] = offset if offset is not None and offset < snap.ends[tp] else None
    return found


def _check_named(
    option: str, named: list[TopicPartition], snap: Snapshot, opts: SourceOptions
) -> None:
    for topic in sorted({topic for topic, _ in named}):
        if topic not in snap.topics:
            raise OptionError(
                f"option {option} names topic {topic!r}, which this query does not read "
                f"(it reads {opts.subscription.describe()}; existing topics only)"
            )
        count = snap.topics[topic].partitions
        outside = sorted(p for t, p in named if t == topic and p >= count)
        if outside:
            raise OptionError(
                f"option {option} names partition(s) {outside} of topic {topic!r} but it has "
                f"{count}"
            )


def _spec_times(
    spec: AtTimestamp | ByTimestamp, option: str, snap: Snapshot, opts: SourceOptions
) -> dict[TopicPartition, int]:
    if isinstance(spec, AtTimestamp):
        return {tp: spec.timestamp for tp in snap.ends}
    times = spec.as_dict()
    _check_named(option, list(times), snap, opts)
    return times


def resolve_start(
    client: redis.Redis, keys: Keys, opts: SourceOptions, spec: OffsetSpec, snap: Snapshot
) -> Positions:
    """Start positions of every partition of ``snap``; earliest means the log start, so
    retention is not data loss for it."""
    if isinstance(spec, Earliest):
        return dict(snap.firsts)
    if isinstance(spec, Latest):
        return dict(snap.ends)
    if isinstance(spec, GroupOffsets):
        return {
            (topic, p): offset
            for topic, info in snap.topics.items()
            for p, offset in group_positions(
                client, keys, spec.group, topic, info.partitions
            ).items()
        }
    if isinstance(spec, PerPartition):
        given = spec.as_dict()
        _check_named("startingOffsets", list(given), snap, opts)
        positions: Positions = {}
        for tp, end in snap.ends.items():
            offset = given.get(tp, KAFKA_EARLIEST)
            if offset == KAFKA_EARLIEST:
                offset = snap.firsts[tp]
            positions[tp] = end if offset == KAFKA_LATEST else offset
        return positions
    assert isinstance(spec, AtTimestamp | ByTimestamp)
    option = "startingTimestamp" if isinstance(spec, AtTimestamp) else "startingOffsetsByTimestamp"
    times = _spec_times(spec, option, snap, opts)
    found = offsets_for_times(client, keys, snap, times)
    positions = dict(snap.firsts)  # partitions not named: earliest
    for tp, offset in found.items():
        if offset is not None:
            positions[tp] = offset
        elif opts.timestamp_strategy == "latest":
            positions[tp] = snap.ends[tp]
        else:
            raise NoOffsetForTimestamp(
                f"no committed record of topic {tp[0]!r} partition {tp[1]} was appended at or "
                f"after timestamp {times[tp]} (option {option}); set the option "
                "startingOffsetsByTimestampStrategy=latest to start such partitions at latest"
            )
    return positions


def resolve_end(
    client: redis.Redis, keys: Keys, opts: SourceOptions, spec: OffsetSpec, snap: Snapshot
) -> Positions:
    """End positions for a batch query, never past the partitions' ends."""
    if isinstance(spec, Latest):
        return dict(snap.ends)
    if isinstance(spec, PerPartition):
        given = spec.as_dict()
        _check_named("endingOffsets", list(given), snap, opts)
        return {
            tp: end if given.get(tp, KAFKA_LATEST) == KAFKA_LATEST else min(given[tp], end)
            for tp, end in snap.ends.items()
        }
    assert isinstance(spec, AtTimestamp | ByTimestamp)
    option = "endingTimestamp" if isinstance(spec, AtTimestamp) else "endingOffsetsByTimestamp"
    found = offsets_for_times(client, keys, snap, _spec_times(spec, option, snap, opts))
    # no record at or after the time: latest, as Spark does
    ends: Positions = {}
    for tp, end in snap.ends.items():
        offset = found.get(tp)
        ends[tp] = end if offset is None else min(offset, end)
    return ends
