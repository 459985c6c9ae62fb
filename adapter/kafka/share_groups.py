"""ShareGroupHeartbeat (KIP-932), answered by ``mapping.share_group``: members join (epoch
0), heartbeat and leave (-1); the pods assign with Kafka's simple assignor (a partition may
go to several members). Topics travel by id, as for KIP-848 groups."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import SHARE_GROUP_HEARTBEAT
from mapping.security.acls import Operation, ResourceType

Response = SHARE_GROUP_HEARTBEAT.response
Assignment = Response.Assignment
AssignedTopic = Assignment.TopicPartitions


def _answer(request: Request, code: int, message: str | None = None, **fields: Any) -> Any:
    return Response[request.version](
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        member_id=fields.get("member_id"),
        member_epoch=fields.get("member_epoch", -1),
        heartbeat_interval_ms=fields.get("heartbeat_interval_ms", 0),
        assignment=fields.get("assignment"),
    )


async def share_group_heartbeat(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if context.authorizer.enabled and not await authorization.allowed(
        context, request, Operation.READ, ResourceType.GROUP, body.group_id or ""
    ):
        return _answer(request, errors.GROUP_AUTHORIZATION_FAILED)
    if not body.group_id:
        return _answer(request, errors.INVALID_GROUP_ID)
    if not body.member_id:  # the client makes its member id (KIP-1082)
        return _answer(request, errors.INVALID_REQUEST, "MemberId can't be empty.")
    if body.member_epoch == 0 and body.subscribed_topic_names is None:
        return _answer(request, errors.INVALID_REQUEST, "SubscribedTopicNames must be set.")
    return await coordinator_call(_heartbeat(context, request), partial(_answer, request))


async def _heartbeat(context: KafkaContext, request: Request) -> Any:
    body = request.body
    subscribed = body.subscribed_topic_names
    result = await context.share_groups.heartbeat(
        body.group_id,
        body.member_id,
        body.member_epoch,
        list(subscribed) if subscribed is not None else None,
    )
    if result.error:
        return _answer(request, errors.UNKNOWN_MEMBER_ID, member_id=body.member_id)
    if body.member_epoch == -1:
        return _answer(request, errors.NONE, member_id=body.member_id, member_epoch=-1)
    topics: list[Any] = []
    for topic, partitions in sorted(result.assignment.items()):
        topic_id: uuid.UUID | None = await context.topic_id(topic)
        if topic_id is not None:
            topics.append(AssignedTopic(topic_id=topic_id, partitions=partitions))
    return _answer(
        request,
        errors.NONE,
        member_id=body.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=Assignment(topic_partitions=topics),
    )
