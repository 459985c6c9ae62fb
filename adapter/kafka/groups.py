"""The classic group protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, answered by
``mapping.kafka_group`` (the state machine in Redis; the barriers wait across pods).

A JoinGroup or a follower's SyncGroup may wait up to the rebalance timeout; the connection
starts later requests meanwhile but answers in request order, as Kafka does (a Kafka broker
reads nothing more from a connection until it answered). Redis unreachable:
COORDINATOR_NOT_AVAILABLE, which clients retry after looking the coordinator up again.

With ``--redis-wait-replicas`` a successful JoinGroup or SyncGroup answers only after a WAIT
round reached the Redis replicas (mapping/replication/durable.py's shared rounds), so a failover
cannot
take back a generation or assignment a member was told of; unconfirmed, it answers
COORDINATOR_NOT_AVAILABLE and the client joins again.
"""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.authorization import GROUP, READ, refusal
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP
from mapping.core.errors import REPLICATION_TIMEOUT, BrokerError
from mapping.kafka_group import JoinResult, SyncResult
from mapping.replication.acks import AckOutcome

JoinResponse = JOIN_GROUP.response
JoinMember = JoinResponse.JoinGroupResponseMember
LeaveResponse = LEAVE_GROUP.response
LeaveMember = LeaveResponse.MemberResponse


async def join_group(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if (refused := await refusal(context, request, READ, GROUP, body.group_id)) is not None:
        return refused

    async def join() -> JoinResult:
        result = await context.pod.kafka_groups.join(
            body.group_id or "",
            body.member_id or "",
            protocol_type=body.protocol_type or "",
            protocols=[(p.name or "", bytes(p.metadata or b"")) for p in body.protocols or ()],
            session_timeout_ms=body.session_timeout_ms,
            rebalance_timeout_ms=body.rebalance_timeout_ms if request.version >= 1 else None,
            group_instance_id=body.group_instance_id or None,
            client_id=request.client_id or "",
            client_host=request.client_host,
            require_known_member_id=request.version >= 4,
        )
        if result.error == errors.NONE:
            await _wait_durable(context)
        return result

    result = await coordinator_call(join(), lambda code: JoinResult(code, body.member_id or ""))
    nullable_name = request.version >= 7
    return JoinResponse[request.version](
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if nullable_name else result.protocol_name or "",
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in result.members
        ],
    )


async def sync_group(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if (refused := await refusal(context, request, READ, GROUP, body.group_id)) is not None:
        return refused

    async def sync() -> SyncResult:
        result = await context.pod.kafka_groups.sync(
            body.group_id or "",
            body.member_id or "",
            body.generation_id,
            {a.member_id: bytes(a.assignment or b"") for a in body.assignments or ()},
            group_instance_id=body.group_instance_id or None,
            protocol_type=body.protocol_type or None,
            protocol_name=body.protocol_name or None,
        )
        if result.error == errors.NONE:
            await _wait_durable(context)
        return result

    result = await coordinator_call(sync(), SyncResult)
    return SYNC_GROUP.response[request.version](
        throttle_time_ms=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def _wait_durable(context: KafkaContext) -> None:
    """--redis-wait-replicas: wait for a WAIT round to reach the Redis replicas; BrokerError
    when it did not in time (returns at once, with no call, without the flag)."""
    ack = await context.pod.replication.acks.await_durable()
    if ack.outcome is not AckOutcome.ACKED:
        raise BrokerError(REPLICATION_TIMEOUT, ack.detail)


async def heartbeat(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if (refused := await refusal(context, request, READ, GROUP, body.group_id)) is not None:
        return refused
    beat = context.pod.kafka_groups.heartbeat(
        body.group_id or "",
        body.member_id or "",
        body.generation_id,
        body.group_instance_id or None,
    )
    code = await coordinator_call(beat, lambda code: code)
    return HEARTBEAT.response[request.version](throttle_time_ms=0, error_code=code)


async def leave_group(context: KafkaContext, request: Request) -> Any:
    body = request.body
    if (refused := await refusal(context, request, READ, GROUP, body.group_id)) is not None:
        return refused
    if request.version < 3:
        leaving = [(body.member_id or "", None)]
    else:
        leaving = [(m.member_id or "", m.group_instance_id or None) for m in body.members or ()]

    async def leave() -> tuple[list[int], int]:
        codes = (
            await context.pod.kafka_groups.leave(body.group_id or "", leaving) if leaving else []
        )
        return codes, errors.NONE

    codes, group_code = await coordinator_call(leave(), lambda code: ([], code))
    if request.version < 3:
        code = group_code if group_code != errors.NONE else codes[0]
        return LeaveResponse[request.version](throttle_time_ms=0, error_code=code)
    if codes and all(c == errors.INVALID_GROUP_ID for c in codes):
        group_code, codes = errors.INVALID_GROUP_ID, []
    members = [
        LeaveMember(member_id=member, group_instance_id=instance, error_code=code)
        for (member, instance), code in zip(leaving, codes, strict=False)
    ]
    return LeaveResponse[request.version](
        throttle_time_ms=0, error_code=group_code, members=members
    )
