"""KIP-932's admin APIs, answered from Redis (``mapping.share_group.state``):
ShareGroupDescribe (77), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91) and
DeleteShareGroupOffsets (92), with Kafka 4.2's errors (its GroupCoordinatorService and
KafkaApis): DESCRIBE on the group for the describe APIs, READ on the group and on the
topics to alter or delete; a name that is no share group is GROUP_ID_NOT_FOUND; altering or
deleting the offsets of a group with live members is NON_EMPTY_GROUP. Also the parts of
ListGroups, DescribeGroups and DeleteGroups that concern share groups (group_admin.py)."""

from __future__ import annotations

import uuid
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.admin import authorized_operations, operations_bitfield
from adapter.kafka.context import NO_TOPIC_ID, KafkaContext, topic_id_of
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_GROUP_DESCRIBE,
)
from mapping.security.acls import SUPPORTED, Operation, ResourceType
from mapping.share_group.state import (
    ASSIGNOR,
    UNINITIALIZED,
    Membership,
    ShareGroupState,
    lag,
    start_offset,
)

DescribeResponse = SHARE_GROUP_DESCRIBE.response
Described = DescribeResponse.DescribedGroup
DescribedMember = Described.Member
MemberAssignment = DescribedMember.Assignment
MemberTopic = MemberAssignment.TopicPartitions
OffsetsResponse = DESCRIBE_SHARE_GROUP_OFFSETS.response
OffsetsGroup = OffsetsResponse.DescribeShareGroupOffsetsResponseGroup
OffsetsTopic = OffsetsGroup.DescribeShareGroupOffsetsResponseTopic
OffsetsPartition = OffsetsTopic.DescribeShareGroupOffsetsResponsePartition
AlterResponse = ALTER_SHARE_GROUP_OFFSETS.response
AlterTopic = AlterResponse.AlterShareGroupOffsetsResponseTopic
AlterPartition = AlterTopic.AlterShareGroupOffsetsResponsePartition
DeleteResponse = DELETE_SHARE_GROUP_OFFSETS.response
DeleteTopic = DeleteResponse.DeleteShareGroupOffsetsResponseTopic

NOT_ASKED = -2147483648  # Kafka's "authorized operations not requested"
GROUP_OPERATIONS = frozenset(int(op) for op in SUPPORTED[ResourceType.GROUP])
DEFAULT_LEADER_EPOCH = 0  # Kafka's leader epoch of a share-partition's state (PartitionFactory)
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
TOPIC_DENIED_MESSAGE = (
    "The group has described topic(s) that the client is not authorized to describe."
)


def share_state(context: KafkaContext) -> ShareGroupState:
    pod = context.pod
    return ShareGroupState(pod.batcher, pod.keys, pod.kafka.bits)


async def not_found_message(context: KafkaContext, group: str) -> str:
    """GROUP_ID_NOT_FOUND's message: Kafka names a group of another type so."""
    if await context.pod.kafka_groups.kafka_state_exists(group):
        return f"Group {group} is not a share group."
    return f"Group {group} not found."


# ShareGroupDescribe (77)


async def share_group_describe(context: KafkaContext, request: Request) -> Any:
    names = list(request.body.group_ids or ())
    refused = await authorization.denied(
        context, request, Operation.DESCRIBE, ResourceType.GROUP, names
    )
    asked = bool(request.body.include_authorized_operations)
    groups = []
    for name in names:
        if name in refused:
            groups.append(_undescribed(name, errors.GROUP_AUTHORIZATION_FAILED))
        elif not name:
            groups.append(_undescribed("", errors.INVALID_GROUP_ID))
        else:
            described = await coordinator_call(
                _described(context, request, name),
                lambda code, name=name: _undescribed(name, code),
            )
            if asked and described.error_code == errors.NONE:
                described.authorized_operations = operations_bitfield(
                    authorized_operations(
                        context, request, ResourceType.GROUP, name, GROUP_OPERATIONS
                    )
                )
            groups.append(described)
    return DescribeResponse[request.version](throttle_time_ms=0, groups=groups)


async def _described(context: KafkaContext, request: Request, name: str) -> Any:
    membership: Membership | None = await share_state(context).membership(name)
    if membership is None:
        return _undescribed(name, errors.GROUP_ID_NOT_FOUND, await not_found_message(context, name))
    topics = sorted({t for m in membership.members for t in (*m.subscribed_topics, *m.assignment)})
    # Kafka 4.1+: a group whose members use topics the principal may not DESCRIBE is
    # not described
    if await authorization.denied(context, request, Operation.DESCRIBE, ResourceType.TOPIC, topics):
        return _undescribed(name, errors.TOPIC_AUTHORIZATION_FAILED, TOPIC_DENIED_MESSAGE)
    ids = {t: i for t in topics if (i := await context.topic_id(t)) is not None}
    return Described(
        error_code=errors.NONE,
        error_message=None,
        group_id=name,
        group_state=membership.state,
        group_epoch=membership.group_epoch,
        assignment_epoch=membership.group_epoch,  # assignments follow each epoch at once
        assignor_name=ASSIGNOR,
        members=[
            DescribedMember(
                member_id=m.member_id,
                rack_id=m.rack,
                member_epoch=m.member_epoch
                if m.member_epoch is not None
                else membership.group_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topics,
                assignment=MemberAssignment(
                    topic_partitions=[
                        MemberTopic(topic_id=ids[t], topic_name=t, partitions=ps)
                        for t, ps in sorted(m.assignment.items())
                        if t in ids
                    ]
                ),
            )
            for m in membership.members
        ],
        authorized_operations=NOT_ASKED,
    )


def _undescribed(name: str, code: int, message: str | None = None) -> Any:
    return Described(
        error_code=code,
        error_message=message,
        group_id=name,
        group_state="",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
        members=[],
        authorized_operations=NOT_ASKED,
    )


# DescribeShareGroupOffsets (90)


async def describe_share_group_offsets(context: KafkaContext, request: Request) -> Any:
    groups = []
    for asked in request.body.groups or ():
        name = asked.group_id
        if not await authorization.allowed(
            context, request, Operation.DESCRIBE, ResourceType.GROUP, name or ""
        ):
            groups.append(_offsets_error(name, errors.GROUP_AUTHORIZATION_FAILED))
        elif not name:
            groups.append(_offsets_error("", errors.INVALID_GROUP_ID))
        else:
            groups.append(
                await coordinator_call(
                    _offsets(context, request, name, asked.topics),
                    lambda code, name=name: _offsets_error(name, code),
                )
            )
    return OffsetsResponse[request.version](throttle_time_ms=0, groups=groups)


async def _offsets(context: KafkaContext, request: Request, name: str, asked: Any) -> Any:
    state = share_state(context)
    answered: list[Any] = []
    wanted: list[tuple[str, int]] = []
    topic_ids: dict[str, uuid.UUID] = {}
    if asked is None:  # every share-partition with state, of the topics one may DESCRIBE
        everything = await state.partitions(name)
        hidden = await authorization.denied(
            context, request, Operation.DESCRIBE, ResourceType.TOPIC,
            sorted({t for t, _ in everything}), audited=False,
        )  # fmt: skip
        wanted = [(t, p) for t, p in everything if t not in hidden]
    else:
        names = [t.topic_name for t in asked]
        refused = await authorization.denied(
            context, request, Operation.DESCRIBE, ResourceType.TOPIC, names
        )
        for topic in asked:
            partitions = list(topic.partitions or ())
            if topic.topic_name in refused:
                answered.append(
                    _offsets_topic(topic.topic_name, NO_TOPIC_ID, [
                        _offsets_partition(p, code=errors.TOPIC_AUTHORIZATION_FAILED)
                        for p in partitions
                    ])
                )  # fmt: skip
                continue
            config = await context.find_topic(topic.topic_name)
            if config is None:  # Kafka: no data, no error (as OffsetFetch)
                answered.append(
                    _offsets_topic(
                        topic.topic_name, NO_TOPIC_ID, [_offsets_partition(p) for p in partitions]
                    )
                )
                continue
            topic_ids[topic.topic_name] = topic_id_of(config)
            wanted += [(topic.topic_name, p) for p in partitions]
    states = await state.describe(name, [(t, p) for t, p in wanted if p >= 0])
    by_topic: dict[str, list[Any]] = {}
    for t, p in wanted:
        found = states.get((t, p))
        if asked is None and found is None:
            continue
        by_topic.setdefault(t, []).append(
            _offsets_partition(p, start_offset(found, state.bits), lag(found))
        )
    for t, partitions in by_topic.items():
        if t not in topic_ids:
            config = await context.find_topic(t)
            topic_ids[t] = topic_id_of(config) if config is not None else NO_TOPIC_ID
        answered.append(_offsets_topic(t, topic_ids[t], partitions))
    return OffsetsGroup(group_id=name, topics=answered, error_code=errors.NONE, error_message=None)


def _offsets_topic(name: str, topic_id: uuid.UUID, partitions: list[Any]) -> Any:
    return OffsetsTopic(topic_name=name, topic_id=topic_id, partitions=partitions)


def _offsets_partition(
    partition: int, start: int = UNINITIALIZED, lag_records: int = UNINITIALIZED, code: int = 0
) -> Any:
    return OffsetsPartition(
        partition_index=partition,
        start_offset=start if code == errors.NONE else UNINITIALIZED,
        leader_epoch=DEFAULT_LEADER_EPOCH,
        lag=lag_records if code == errors.NONE else UNINITIALIZED,
        error_code=code,
        error_message=None,
    )


def _offsets_error(name: str, code: int, message: str | None = None) -> Any:
    return OffsetsGroup(group_id=name, topics=[], error_code=code, error_message=message)


# AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92)


async def _group_refusal(
    context: KafkaContext, request: Request, name: str
) -> tuple[int, str | None] | None:
    """The top-level error that stops an alter or delete of the group's offsets (READ on the
    group; a share group that exists and has no live members), or None."""
    if not await authorization.allowed(context, request, Operation.READ, ResourceType.GROUP, name):
        return errors.GROUP_AUTHORIZATION_FAILED, None
    if not name:
        return errors.INVALID_GROUP_ID, None
    membership = await share_state(context).membership(name)
    if membership is None:
        return errors.GROUP_ID_NOT_FOUND, await not_found_message(context, name)
    if membership.members:
        return errors.NON_EMPTY_GROUP, f"The group {name} is not empty."
    return None


async def alter_share_group_offsets(context: KafkaContext, request: Request) -> Any:
    body = request.body
    name = body.group_id or ""

    def failed(code: int, message: str | None = None) -> Any:
        return AlterResponse[request.version](
            throttle_time_ms=0, error_code=code, error_message=message, responses=[]
        )

    async def work() -> Any:
        refusal = await _group_refusal(context, request, name)
        if refusal is not None:
            return failed(*refusal)
        topics = list(body.topics or ())
        refused = await authorization.denied(
            context, request, Operation.READ, ResourceType.TOPIC, [t.topic_name for t in topics]
        )
        answered: list[Any] = []
        offsets: dict[tuple[str, int], int] = {}
        for topic in topics:
            config = (
                None if topic.topic_name in refused else await context.find_topic(topic.topic_name)
            )
            results = []
            for asked in topic.partitions or ():
                p = asked.partition_index
                code, message = errors.NONE, None
                if topic.topic_name in refused:
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                elif config is None or not 0 <= p < config.partitions:
                    code, message = errors.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE
                elif asked.start_offset < 0:
                    code, message = errors.INVALID_REQUEST, "The start offset must not be negative."
                else:
                    offsets[(topic.topic_name, p)] = asked.start_offset
                results.append(
                    AlterPartition(partition_index=p, error_code=code, error_message=message)
                )
            topic_id = topic_id_of(config) if config is not None else NO_TOPIC_ID
            answered.append(
                AlterTopic(topic_name=topic.topic_name, topic_id=topic_id, partitions=results)
            )
        await share_state(context).alter(name, offsets)
        return AlterResponse[request.version](
            throttle_time_ms=0, error_code=errors.NONE, error_message=None, responses=answered
        )

    return await coordinator_call(work(), failed)


async def delete_share_group_offsets(context: KafkaContext, request: Request) -> Any:
    body = request.body
    name = body.group_id or ""

    def failed(code: int, message: str | None = None) -> Any:
        return DeleteResponse[request.version](
            throttle_time_ms=0, error_code=code, error_message=message, responses=[]
        )

    async def work() -> Any:
        refusal = await _group_refusal(context, request, name)
        if refusal is not None:
            return failed(*refusal)
        names = list(dict.fromkeys(t.topic_name for t in body.topics or ()))
        refused = await authorization.denied(
            context, request, Operation.READ, ResourceType.TOPIC, names
        )
        answered: list[Any] = []
        partitions: list[tuple[str, int]] = []
        for topic in names:
            code, message, topic_id = errors.NONE, None, NO_TOPIC_ID
            config = None if topic in refused else await context.find_topic(topic)
            if topic in refused:
                code = errors.TOPIC_AUTHORIZATION_FAILED
            elif config is None:
                code, message = errors.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE
            else:
                topic_id = topic_id_of(config)
                partitions += [(topic, p) for p in range(config.partitions)]
            answered.append(
                DeleteTopic(
                    topic_name=topic, topic_id=topic_id, error_code=code, error_message=message
                )
            )
        await share_state(context).delete(name, partitions)
        return DeleteResponse[request.version](
            throttle_time_ms=0, error_code=errors.NONE, error_message=None, responses=answered
        )

    return await coordinator_call(work(), failed)
