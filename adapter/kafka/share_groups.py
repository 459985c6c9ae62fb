"""ShareGroupHeartbeat (KIP-932), answered by ``mapping.share_group``: members join (epoch
0), heartbeat and leave (-1); the pods assign with Kafka's simple assignor (a partition may
go to several members). Topics travel by id, as for KIP-848 groups. A heartbeat whose
epoch is neither the member's nor its previous one is FENCED_MEMBER_EPOCH; a member that
leaves or expires has its records in flight released at once."""

from __future__ import annotations

import uuid
from functools import partial
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.consumer_groups import heartbeat_answer
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import SHARE_GROUP_HEARTBEAT
from mapping.security.acls import Operation, ResourceType
from mapping.share_group.share_groups import FENCED_MEMBER, UNKNOWN_MEMBER, ShareClient

Response = SHARE_GROUP_HEARTBEAT.response
Assignment = Response.Assignment
AssignedTopic = Assignment.TopicPartitions


_answer = partial(heartbeat_answer, Response)
# share_group/heartbeat's refusals as Kafka's error codes
REFUSALS = {UNKNOWN_MEMBER: errors.UNKNOWN_MEMBER_ID, FENCED_MEMBER: errors.FENCED_MEMBER_EPOCH}


async def share_group_heartbeat(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if context.authorizer.enabled:
        if not await authorization.allowed(
            context, request, Operation.READ, ResourceType.GROUP, body.group_id or ""
        ):
            return _answer(request, errors.GROUP_AUTHORIZATION_FAILED)
        # DESCRIBE on every subscribed topic, as for KIP-848 groups
        subscribed = body.subscribed_topic_names or ()
        if await authorization.denied(
            context, request, Operation.DESCRIBE, ResourceType.TOPIC, subscribed
        ):
            return _answer(request, errors.TOPIC_AUTHORIZATION_FAILED)
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
        # who the member is, kept once, at its join (ShareGroupDescribe shows it)
        ShareClient(request.client_id or "", request.client_host, body.rack_id)
        if body.member_epoch == 0
        else None,
    )
    if result.error:
        code = REFUSALS.get(result.error, errors.UNKNOWN_SERVER_ERROR)
        return _answer(request, code, member_id=body.member_id)
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
