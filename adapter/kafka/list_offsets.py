"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3, v7+), earliest local (-4,
v8+), latest tiered (-5, v9+) and by timestamp.

By timestamp means by append time: the first committed record whose stream id (the
append's millisecond, Redis' clock) is at or after the time asked for; the answer carries
that append time. A record's own CreateTime (``create_ts``) is not indexed: producers'
clocks may disagree and go backwards, append times never do. Max timestamp (-3) answers
the newest committed record with its own timestamp.

What a reader may fetch bounds the answers, as Kafka's Partition.fetchOffsetForTimestamp
bounds them: below the high watermark, under read_committed (isolation_level 1) below the
last stable offset (mapping/partition/partition_txns.py). Latest is that bound; a record found by
timestamp or max timestamp at or past it answers "none" (offset -1, timestamp -1).

There is no tiered storage (KIP-405) here: earliest local (-4) is earliest, and latest
tiered (-5) answers offset -1 and leader epoch -1, as UnifiedLog.fetchOffsetByTimestamp
does without remote storage. A negative timestamp a version does not know (-3 before v7,
-4 before v8, -5 before v9, any other) is UNSUPPORTED_VERSION for its partition, as Kafka
answers. The leader epoch answered with an offset is its record's
(mapping/replication/leader_epochs.py):
the current one for latest, as Kafka answers; -1 without an offset.

Version 0 answers a list of at most ``max_num_offsets`` offsets, newest first, as Kafka 3.9's
legacyFetchOffsetsBefore does over a log's segments: here a partition's log is one segment,
last written at its newest record's append time (``legacy_offsets``).
"""

from __future__ import annotations

import time
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import LIST_OFFSETS
from mapping.core.errors import BrokerError
from mapping.security.acls import Operation, ResourceType

Response = LIST_OFFSETS.response
TopicResponse = Response.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# The first version (v1+) that may ask for each special timestamp (Kafka's
# timestampMinSupportedVersion)
SPECIAL_SINCE = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
NONE_FOUND = (errors.NONE, -1, -1)  # Kafka's UNKNOWN_TIMESTAMP / UNKNOWN_OFFSET


async def handle(context: KafkaContext, request: Request) -> Any:
    refused = await _refused(context, request)
    if request.version == 0:
        return await _handle_v0(context, request, refused)
    topics = []
    # read_committed (isolation_level 1, v2+): latest is the last stable offset
    committed = getattr(request.body, "isolation_level", 0) == 1
    for topic in request.body.topics or ():  # an array sent as null: none
        parts = []
        for p in topic.partitions or ():
            code, timestamp, offset = (
                (errors.TOPIC_AUTHORIZATION_FAILED, -1, -1)
                if topic.name in refused
                else await _one(
                    context, topic.name, p.partition_index, p.timestamp, committed, request.version
                )
            )
            parts.append(
                PartitionResponse(
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=_epoch_of(context, offset, p.timestamp),
                )
            )
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return Response[request.version](throttle_time_ms=0, topics=topics)


def _epoch_of(context: KafkaContext, offset: int, spec: int) -> int:
    """The leader epoch of the record at ``offset`` (latest: the current epoch)."""
    epochs = context.pod.leader_epochs
    if offset < 0:
        return -1
    if spec == LATEST:
        return epochs.current
    return epochs.epoch_at(offset >> context.pod.kafka.bits)


async def _one(
    context: KafkaContext, name: str, index: int, spec: int, committed: bool, version: int
) -> tuple[int, int, int]:
    """(error, timestamp, offset) of one partition."""
    if spec < 0 and version < SPECIAL_SINCE.get(spec, version + 1):
        return errors.UNSUPPORTED_VERSION, -1, -1
    try:
        config = await context.find_topic(name)
        if config is None or not 0 <= index < config.partitions:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        kafka = context.pod.kafka
        if spec in (LATEST, EARLIEST, EARLIEST_LOCAL):
            start, end = await kafka.first_offset(config, index, committed)
            return errors.NONE, -1, end if spec == LATEST else start
        if spec == LATEST_TIERED:  # nothing is ever tiered
            return NONE_FOUND
        if spec == MAX_TIMESTAMP:
            found = await kafka.last_committed(config, index, committed)
        else:
            found = await kafka.at_or_after_time(config, index, spec, committed)
    except BrokerError as exc:
        return error_of(exc), -1, -1
    return NONE_FOUND if found is None else (errors.NONE, found.timestamp, found.offset)


async def _refused(context: KafkaContext, request: Request) -> set[str]:
    """The topics the principal may not DESCRIBE (TOPIC_AUTHORIZATION_FAILED, as Kafka)."""
    return await authorization.denied(
        context, request, Operation.DESCRIBE, ResourceType.TOPIC,
        (t.name for t in request.body.topics or ()),
    )  # fmt: skip


async def _handle_v0(context: KafkaContext, request: Request, refused: set[str]) -> Any:
    topics = []
    for topic in request.body.topics or ():
        parts = []
        for p in topic.partitions or ():
            code, offsets = (
                (errors.TOPIC_AUTHORIZATION_FAILED, [])
                if topic.name in refused
                else await _one_v0(
                    context, topic.name, p.partition_index, p.timestamp, p.max_num_offsets
                )
            )
            parts.append(
                PartitionResponse(
                    partition_index=p.partition_index, error_code=code, old_style_offsets=offsets
                )
            )
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return Response[0](topics=topics)


async def _one_v0(
    context: KafkaContext, name: str, index: int, spec: int, max_num_offsets: int
) -> tuple[int, list[int]]:
    try:
        config = await context.find_topic(name)
        if config is None or not 0 <= index < config.partitions:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, []
        kafka = context.pod.kafka
        start, end = await kafka.first_offset(config, index)
        newest = await kafka.last_committed(config, index)
    except BrokerError as exc:
        return error_of(exc), []
    written = None if newest is None else newest.offset >> kafka.bits  # its append time
    now = time.time_ns() // 1_000_000
    return errors.NONE, legacy_offsets(spec, max_num_offsets, start, end, written, now)


def legacy_offsets(
    spec: int, max_num_offsets: int, start: int, end: int, written_ms: int | None, now_ms: int
) -> list[int]:
    """ListOffsets v0's answer, Kafka 3.9's legacyFetchOffsetsBefore over one segment: the
    points (log start, last written) and, when the log holds records, (log end, now);
    latest (-1) counts from the last point, earliest (-2) from the first, a time from the
    last point written at or before it (none: an empty list); then at most
    ``max_num_offsets`` offsets from there back to the log start."""
    points = [(start, written_ms if written_ms is not None else 0)]
    if written_ms is not None:
        points.append((end, now_ms))
    if spec == LATEST:
        at = len(points) - 1
    elif spec == EARLIEST:
        at = 0
    else:
        at = max((i for i, (_, t) in enumerate(points) if t <= spec), default=-1)
    return [points[i][0] for i in range(at, max(at - max_num_offsets, -1), -1)]
