"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3) and by timestamp.

By timestamp means by append time: the first committed record whose stream id (the
append's millisecond, Redis' clock) is at or after the time asked for; the answer carries
that append time. A record's own CreateTime (``create_ts``) is not indexed: producers'
clocks may disagree and go backwards, append times never do. Max timestamp (-3) answers
the newest committed record with its own timestamp. Under read_committed (isolation_level 1)
latest is the last stable offset (mapping/partition_txns.py), as in Kafka.
"""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import LIST_OFFSETS
from mapping.errors import BrokerError

Response = LIST_OFFSETS.response
TopicResponse = Response.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


async def handle(context: KafkaContext, request: Request) -> Any:
    topics = []
    # read_committed (isolation_level 1, v2+): latest is the last stable offset
    committed = getattr(request.body, "isolation_level", 0) == 1
    for topic in request.body.topics or ():  # an array sent as null: none
        parts = []
        for p in topic.partitions or ():
            code, timestamp, offset = await _one(
                context, topic.name, p.partition_index, p.timestamp, committed
            )
            parts.append(
                PartitionResponse(
                    partition_index=p.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=0,
                )
            )
        topics.append(TopicResponse(name=topic.name, partitions=parts))
    return Response[request.version](throttle_time_ms=0, topics=topics)


async def _one(
    context: KafkaContext, name: str, index: int, spec: int, committed: bool = False
) -> tuple[int, int, int]:
    try:
        config = await context.find_topic(name)
        if config is None or not 0 <= index < config.partitions:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        kafka = context.pod.kafka
        if spec in (LATEST, EARLIEST):
            start, end = await kafka.first_offset(config, index, committed)
            return errors.NONE, -1, end if spec == LATEST else start
        if spec == MAX_TIMESTAMP:
            newest = await kafka.last_committed(config, index)
            if newest is None:
                return errors.NONE, -1, -1
            return errors.NONE, newest.timestamp, newest.offset
        if spec < 0:
            return errors.INVALID_REQUEST, -1, -1
        found = await kafka.at_or_after_time(config, index, spec)
        if found is None:
            return errors.NONE, -1, -1
        return errors.NONE, found.timestamp, found.offset
    except BrokerError as exc:
        return error_of(exc), -1, -1
