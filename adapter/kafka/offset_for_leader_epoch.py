"""OffsetForLeaderEpoch (KIP-320): where a partition's leader epoch ended, so that a client
that fetched records of an epoch can tell whether a failover took them back (a position
past the end answered is a truncation: librdkafka and the Java client reset it by
``auto.offset.reset``). The epochs are the Redis primaries that served the data
(mapping/replication/leader_epochs.py, docs/durability.md).

As Kafka's Partition.lastOffsetForLeaderEpoch and LeaderEpochFileCache.endOffsetFor answer:
a ``current_leader_epoch`` (v2+) above the current epoch is UNKNOWN_LEADER_EPOCH, below it
FENCED_LEADER_EPOCH (-1: not checked); the current epoch ends at the high watermark (what a
reader reaches; Kafka answers its log end, which a reader's position never passes either);
an earlier epoch answers the largest epoch at or below it and the first position of the
epoch after that; an unknown (later, or -1) epoch answers epoch -1 and offset -1. Epoch 0
(records of pods that kept no epochs) ends where the first registered epoch does.
"""

from __future__ import annotations

from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import OFFSET_FOR_LEADER_EPOCH
from mapping.core.errors import BrokerError
from mapping.replication.leader_epochs import UNDEFINED, epoch_end
from mapping.security.acls import Operation, ResourceType

Response = OFFSET_FOR_LEADER_EPOCH.response
TopicResult = Response.OffsetForLeaderTopicResult
EpochEndOffset = TopicResult.EpochEndOffset


async def handle(context: KafkaContext, request: Request) -> Any:
    epochs = context.pod.leader_epochs
    topics = []
    # KIP-320: CLUSTER_ACTION on the cluster (brokers), else DESCRIBE on each topic
    refused = await authorization.cluster_or_denied(
        context, request, Operation.CLUSTER_ACTION, Operation.DESCRIBE, ResourceType.TOPIC,
        (t.topic for t in request.body.topics or ()),
    )  # fmt: skip
    try:
        await epochs.refresh(context.pod.batcher)  # Redis' registry, not this pod's memory
    except BrokerError as exc:
        code = error_of(exc)
        for topic in request.body.topics or ():
            denial = errors.TOPIC_AUTHORIZATION_FAILED if topic.topic in refused else code
            parts = [_answer(p.partition, denial) for p in topic.partitions or ()]
            topics.append(TopicResult(topic=topic.topic, partitions=parts))
        return Response[request.version](throttle_time_ms=0, topics=topics)
    for topic in request.body.topics or ():
        parts = []
        for p in topic.partitions or ():
            if topic.topic in refused:
                parts.append(_answer(p.partition, errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            current = p.current_leader_epoch if request.version >= 2 else -1
            code, epoch, end = await _one(context, topic.topic, p.partition, current,
                                          p.leader_epoch)  # fmt: skip
            parts.append(_answer(p.partition, code, epoch, end))
        topics.append(TopicResult(topic=topic.topic, partitions=parts))
    return Response[request.version](throttle_time_ms=0, topics=topics)


def _answer(partition: int, code: int, epoch: int = -1, end: int = -1) -> Any:
    return EpochEndOffset(error_code=code, partition=partition, leader_epoch=epoch, end_offset=end)


async def _one(
    context: KafkaContext, name: str, index: int, current_leader_epoch: int, wanted: int
) -> tuple[int, int, int]:
    """(error, epoch, end offset) of one partition."""
    epochs = context.pod.leader_epochs
    try:
        config = await context.find_topic(name)
        if config is None or not 0 <= index < config.partitions:
            return errors.UNKNOWN_TOPIC_OR_PARTITION, *UNDEFINED
        if current_leader_epoch >= 0 and current_leader_epoch != epochs.current:
            fenced = current_leader_epoch < epochs.current
            return (errors.FENCED_LEADER_EPOCH if fenced else errors.UNKNOWN_LEADER_EPOCH,
                    *UNDEFINED)  # fmt: skip
        if wanted < 0 or wanted > epochs.current:
            return errors.NONE, *UNDEFINED
        if epochs.same_log(wanted) == epochs.current:
            _, end = await context.pod.kafka.first_offset(config, index)
            return errors.NONE, wanted, end
        found = epochs.next_start(wanted)
        if found is None:
            return errors.NONE, *UNDEFINED
        floor, next_start_ms = found
        end = await epoch_end(context.pod.partitions, config, index, next_start_ms)
        _, high_watermark = await context.pod.kafka.first_offset(config, index)
        return errors.NONE, floor, min(end, high_watermark)
    except BrokerError as exc:
        return error_of(exc), *UNDEFINED
