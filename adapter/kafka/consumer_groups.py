"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848, ``group.protocol=consumer``),
answered by ``mapping.kafka_group`` (``consumer_heartbeat``: the pods assign, members
reconcile).
Topics travel by id: the ids stored with the topics (context.topic_id), the same Metadata
answers; a deleted topic is left out of assignments (it has no id any more). A v1
SubscribedTopicRegex subscribes the member to the topics it matches, those created later
too, less those its principal may not describe (``mapping.kafka_group.subscriptions``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from functools import partial
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from mapping.security.acls import Operation, ResourceType

Response = CONSUMER_GROUP_HEARTBEAT.response
Assignment = Response.Assignment
AssignedTopic = Assignment.TopicPartitions


def heartbeat_answer(
    response: Any, request: Request, code: int, message: str | None = None, **fields: Any
) -> Any:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat answer (``response``: the API's
    response class): the two have the same fields."""
    return response[request.version](
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        member_id=fields.get("member_id"),
        member_epoch=fields.get("member_epoch", -1),
        heartbeat_interval_ms=fields.get("heartbeat_interval_ms", 0),
        assignment=fields.get("assignment"),
    )


def _answer(request: Request, code: int, message: str | None = None, **fields: Any) -> Any:
    return heartbeat_answer(Response, request, code, message, **fields)


async def consumer_group_heartbeat(context: KafkaContext, request: Request) -> Any:
    if context.authorizer.enabled:
        code = await _heartbeat_refusal(context, request)
        if code != errors.NONE:
            return _answer(request, code)
    return await coordinator_call(_heartbeat(context, request), partial(_answer, request))


async def _heartbeat_refusal(context: KafkaContext, request: Request) -> int:
    """READ on the group (else GROUP_AUTHORIZATION_FAILED), DESCRIBE on every subscribed
    topic (else TOPIC_AUTHORIZATION_FAILED: clients see no topic they may not describe)."""
    body = request.body
    if not await authorization.allowed(
        context, request, Operation.READ, ResourceType.GROUP, body.group_id or ""
    ):
        return errors.GROUP_AUTHORIZATION_FAILED
    names = body.subscribed_topic_names or ()
    if await authorization.denied(context, request, Operation.DESCRIBE, ResourceType.TOPIC, names):
        return errors.TOPIC_AUTHORIZATION_FAILED
    return errors.NONE


async def _heartbeat(context: KafkaContext, request: Request) -> Any:
    body = request.body
    owned = None
    if body.topic_partitions is not None:
        owned = {}
        for tp in body.topic_partitions:
            name = await context.topic_name(tp.topic_id)
            if name is not None:  # a topic deleted meanwhile: nothing to give up
                owned[name] = list(tp.partitions or ())
    subscribed = body.subscribed_topic_names

    async def visible(topics: list[str]) -> list[str]:
        """The regex's matches the member's principal may describe (Kafka leaves the
        others out of its subscription, unaudited)."""
        hidden = await authorization.denied(
            context, request, Operation.DESCRIBE, ResourceType.TOPIC, topics, audited=False
        )
        return [t for t in topics if t not in hidden]

    result = await context.pod.kafka_groups.consumer_heartbeat(
        body.group_id or "",
        body.member_id or "",
        body.member_epoch,
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=body.rebalance_timeout_ms,
        subscribed_topic_names=list(subscribed) if subscribed is not None else None,
        # v0 has no such field
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=owned,
        client_id=request.client_id or "",
        client_host=request.client_host,
        visible=visible if context.authorizer.enabled else None,
    )
    ids = await _topic_ids(context, result.assignment or {})
    assignment = None
    if result.assignment is not None:
        assignment = Assignment(
            topic_partitions=[
                AssignedTopic(topic_id=ids[topic], partitions=partitions)
                for topic, partitions in sorted(result.assignment.items())
                if topic in ids
            ]
        )
    return _answer(
        request,
        result.error,
        result.message,
        member_id=result.member_id or None,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )


DescribeResponse = CONSUMER_GROUP_DESCRIBE.response
Described = DescribeResponse.DescribedGroup
DescribedMember = Described.Member
MemberAssignment = DescribedMember.Assignment
MemberTopic = MemberAssignment.TopicPartitions
# MemberType (v1, KIP-1099): a member of the classic protocol, of the consumer protocol
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


async def _topic_ids(context: KafkaContext, topics: Iterable[str]) -> dict[str, uuid.UUID]:
    """The ids of ``topics`` that exist (the configs are cached: no Redis call, mostly)."""
    ids = {}
    for topic in sorted(set(topics)):
        topic_id = await context.topic_id(topic)
        if topic_id is not None:
            ids[topic] = topic_id
    return ids


def _assignment(ids: dict[str, uuid.UUID], assigned: dict[str, list[int]]) -> Any:
    return MemberAssignment(
        topic_partitions=[
            MemberTopic(topic_id=ids[t], topic_name=t, partitions=ps)
            for t, ps in sorted(assigned.items())
            if t in ids
        ]
    )


async def consumer_group_describe(context: KafkaContext, request: Request) -> Any:
    names = list(request.body.group_ids or ())
    refused = await authorization.denied(
        context, request, Operation.DESCRIBE, ResourceType.GROUP, names
    )
    groups = [
        _undescribed(name, errors.GROUP_AUTHORIZATION_FAILED)
        if name in refused
        else await coordinator_call(_described(context, name or ""), partial(_undescribed, name))
        for name in names
    ]
    return DescribeResponse[request.version](throttle_time_ms=0, groups=groups)


async def _described(context: KafkaContext, name: str) -> Any:
    found = await context.pod.kafka_groups.consumer_describe(name)
    topics = [t for m in found.members for t in (*m.assignment, *m.target_assignment)]
    ids = await _topic_ids(context, topics)
    return Described(
        error_code=found.error,
        group_id=found.group_id,
        group_state=found.state,
        group_epoch=found.group_epoch,
        assignment_epoch=found.assignment_epoch,
        assignor_name=found.assignor,
        members=[
            DescribedMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topics,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=_assignment(ids, m.assignment),
                target_assignment=_assignment(ids, m.target_assignment),
                member_type=CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER,
            )
            for m in found.members
        ],
    )


def _undescribed(name: str | None, code: int) -> Any:
    """A group that could not be described: only its id and ``code``."""
    return Described(
        error_code=code,
        group_id=name,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=[],
    )
