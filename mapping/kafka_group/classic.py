"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

The state machine lives in Redis and changes only in the ``kafka_group/*`` Lua scripts (see
``mapping/lua/lib/kgroup.lua``); this module turns requests into script calls and waits, across
pods, for the barriers: a JoinGroup until every member of the last generation rejoined (or the
rebalance timeout passed), a follower's SyncGroup until the leader stored the assignment. The
waits wake on the group's pub/sub channel; the only timer is the deadline the script names
(rebalance timeout, initial delay, a session expiry), after which the script checks again.

A group that is a KIP-848 consumer group with live members serves classic consumers as its
members (Kafka's online migration, ``mapping/lua/lib/kmixed.lua``): their JoinGroup is a
heartbeat of the member, answered at once with no leader; their SyncGroup gets the member's
partitions, encoded here.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field

from mapping.connection import scripts
from mapping.connection.script_constants import CONSUMER_GROUP, WAIT
from mapping.core import kafka_errors as errors
from mapping.core.codec import to_str
from mapping.core.keys import KafkaGroupKeys, group_part
from mapping.kafka_group import consumer_protocol
from mapping.kafka_group.base import raw
from mapping.kafka_group.consumer import ClassicJoin, ConsumerGroups

# The Redis clock and the pod's timer are not the same clock: re-check a little after.
_DEADLINE_MARGIN_S = 0.005

KAFKA_GROUP_JOIN = scripts.load("kafka_group/join")
KAFKA_GROUP_JOIN_WAIT = scripts.load("kafka_group/join_wait")
KAFKA_GROUP_SYNC = scripts.load("kafka_group/sync")
KAFKA_GROUP_HEARTBEAT = scripts.load("kafka_group/heartbeat")
KAFKA_GROUP_LEAVE = scripts.load("kafka_group/leave")


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: int
    member_id: str
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    # True for a static leader that rejoined a Stable group: it must not assign again
    # (JoinGroup v9's SkipAssignment; older versions just get the members).
    skip_assignment: bool = False
    members: list[JoinedMember] = field(default_factory=list)  # the leader's only


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: int
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


def _optional(value: str | None) -> str:
    return value or ""


def kafka_group_join_call(
    keys: KafkaGroupKeys,
    *,
    initial_delay_ms: int,
    member_id: str,
    instance_id: str | None,
    client_id: str,
    client_host: str,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocol_type: str,
    require_known_id: bool,
    new_member_id: str,
    protocols: list[tuple[str, bytes]],
) -> tuple:
    """kafka_group/join.lua; ``new_member_id``: the id to hand out if one is needed."""
    args: list = [
        initial_delay_ms,
        member_id,
        _optional(instance_id),
        client_id,
        client_host,
        session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type,
        "1" if require_known_id else "0",
        new_member_id,
    ]
    for name, metadata in protocols:
        args += [name, metadata]
    return KAFKA_GROUP_JOIN.command(keys.script_keys(), args)


def kafka_group_join_wait_call(keys: KafkaGroupKeys, member_id: str) -> tuple:
    return KAFKA_GROUP_JOIN_WAIT.command(keys.script_keys(), [member_id])


def kafka_group_sync_call(
    keys: KafkaGroupKeys,
    *,
    member_id: str,
    instance_id: str | None,
    generation: int,
    protocol_type: str | None,
    protocol_name: str | None,
    recheck: bool,
    assignments: dict[str, bytes],
) -> tuple:
    """kafka_group/sync.lua; ``recheck``: a waiting follower's (no assignments then)."""
    args: list = [
        member_id,
        _optional(instance_id),
        generation,
        _optional(protocol_type),
        _optional(protocol_name),
        "1" if recheck else "0",
    ]
    for assigned_member, assignment in assignments.items():
        args += [assigned_member, assignment]
    return KAFKA_GROUP_SYNC.command(keys.script_keys(), args)


def kafka_group_heartbeat_call(
    keys: KafkaGroupKeys, member_id: str, instance_id: str | None, generation: int
) -> tuple:
    return KAFKA_GROUP_HEARTBEAT.command(
        keys.script_keys(), [member_id, _optional(instance_id), generation]
    )


def kafka_group_leave_call(keys: KafkaGroupKeys, members: list[tuple[str, str | None]]) -> tuple:
    """kafka_group/leave.lua for (member id, group.instance.id) pairs."""
    args: list = []
    for member_id, instance_id in members:
        args += [member_id, _optional(instance_id)]
    return KAFKA_GROUP_LEAVE.command(keys.script_keys(), args)


def _join_result(reply: list) -> JoinResult:
    members = [
        JoinedMember(to_str(reply[i]), to_str(reply[i + 1]) or None, raw(reply[i + 2]))
        for i in range(7, len(reply), 3)
    ]
    return JoinResult(
        error=errors.NONE,
        member_id=to_str(reply[1]),
        generation=int(reply[2]),
        protocol_type=to_str(reply[3]) or None,
        protocol_name=to_str(reply[4]) or None,
        leader=to_str(reply[5]),
        skip_assignment=int(reply[6]) == 1,
        members=members,
    )


class ClassicGroups(ConsumerGroups):
    async def join(
        self,
        group: str,
        member_id: str,
        *,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int | None = None,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = True,
    ) -> JoinResult:
        """JoinGroup; returns when the join barrier completed with this member (or at once
        with an error, or MEMBER_ID_REQUIRED and the member id to rejoin with).
        ``rebalance_timeout_ms`` None (JoinGroup v0): the session timeout, as Kafka does.
        ``require_known_member_id``: JoinGroup v4+."""
        if not group:  # Kafka's rule: any group id but the empty one
            return JoinResult(errors.INVALID_GROUP_ID, member_id)
        limits = self.settings
        if not limits.min_session_timeout_ms <= session_timeout_ms <= limits.max_session_timeout_ms:
            return JoinResult(errors.INVALID_SESSION_TIMEOUT, member_id)
        if not protocol_type or not protocols:
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id and await self.v1_members_live(group):
            # The name is in live use by V1 consumers: memberships are per protocol.
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        prefix = group_instance_id or client_id or "member"
        # Kafka's form: client id (or instance id) - UUID
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        gk = self.keys.kafka_group(group)
        call = kafka_group_join_call(
            gk,
            initial_delay_ms=limits.initial_rebalance_delay_ms,
            member_id=member_id,
            instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=(
                rebalance_timeout_ms if rebalance_timeout_ms is not None else session_timeout_ms
            ),
            protocol_type=protocol_type,
            require_known_id=require_known_member_id,
            new_member_id=new_member_id,
            protocols=protocols,
        )
        # who waits: a new member (static, or without the MEMBER_ID_REQUIRED round) under the
        # id made here, any other under its own
        waiting_id = member_id or new_member_id
        with self.waits.watch(gk.events) as watch:
            await watch.subscribed()
            registered = self.batcher.submit("SADD", self.keys.kafka_groups, group_part(group))
            reply = await self.call_group_script(call)
            await registered
            while int(reply[0]) == WAIT:
                await watch.next(int(reply[1]) / 1000 + _DEADLINE_MARGIN_S)
                reply = await self.call_group_script(kafka_group_join_wait_call(gk, waiting_id))
        code = int(reply[0])
        if code == errors.NONE:
            return _join_result(reply)
        if code == CONSUMER_GROUP:
            if not member_id and group_instance_id is None and require_known_member_id:
                return JoinResult(errors.MEMBER_ID_REQUIRED, new_member_id)
            return await self._join_consumer_group(
                group,
                member_id or new_member_id,
                protocols=protocols,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
            )
        if code == errors.MEMBER_ID_REQUIRED:
            return JoinResult(code, to_str(reply[1]))
        return JoinResult(code, member_id)

    async def _join_consumer_group(
        self,
        group: str,
        member_id: str,
        *,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int | None,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
    ) -> JoinResult:
        """A classic consumer's JoinGroup to a consumer group: a heartbeat of the member with
        the topics and owned partitions of its subscription (any protocol's metadata: a
        consumer sends the same subscription with each), answered at once with its member
        epoch as the generation and no leader, as Kafka's coordinator answers it."""
        subscription = consumer_protocol.subscription(protocols[0][1])
        if subscription is None:
            return JoinResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        names = [name for name, _ in protocols]
        result = await self.consumer_heartbeat(
            group,
            member_id,
            0,
            instance_id=group_instance_id,
            rebalance_timeout_ms=(
                rebalance_timeout_ms if rebalance_timeout_ms is not None else session_timeout_ms
            ),
            subscribed_topic_names=subscription.topics,
            owned=subscription.owned,
            client_id=client_id,
            client_host=client_host,
            classic=ClassicJoin(session_timeout_ms, names, subscription.version),
        )
        if result.error == errors.FENCED_MEMBER_EPOCH:  # (a classic client knows this one)
            return JoinResult(errors.UNKNOWN_MEMBER_ID, member_id)
        if result.error != errors.NONE:
            return JoinResult(result.error, member_id)
        return JoinResult(
            errors.NONE,
            result.member_id,
            result.member_epoch,
            protocol_type="consumer",
            protocol_name=names[0],
        )

    async def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> SyncResult:
        """SyncGroup: the leader's ``assignments`` (member id -> bytes) are stored and every
        member gets its own; a follower waits (on any pod) until the leader's arrive, or
        gets REBALANCE_IN_PROGRESS when the group starts over meanwhile."""
        if not group:
            return SyncResult(errors.INVALID_GROUP_ID)
        gk = self.keys.kafka_group(group)

        def call(recheck: bool) -> tuple:
            return kafka_group_sync_call(
                gk,
                member_id=member_id,
                instance_id=group_instance_id,
                generation=generation,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                recheck=recheck,
                assignments={} if recheck else assignments or {},
            )

        with self.waits.watch(gk.events) as watch:
            await watch.subscribed()
            reply = await self.call_group_script(call(recheck=False))
            while int(reply[0]) == WAIT:
                await watch.next(int(reply[1]) / 1000 + _DEADLINE_MARGIN_S)
                reply = await self.call_group_script(call(recheck=True))
        code = int(reply[0])
        if code == CONSUMER_GROUP:  # a classic member of a consumer group: its partitions
            partitions = json.loads(reply[1] or b"{}")
            assignment = consumer_protocol.assignment(
                {t: [int(p) for p in ps] for t, ps in dict(partitions).items()}, int(reply[3])
            )
            return SyncResult(errors.NONE, assignment, "consumer", to_str(reply[2]))
        if code != errors.NONE:
            return SyncResult(code)
        return SyncResult(
            errors.NONE, raw(reply[1]), to_str(reply[2]) or None, to_str(reply[3]) or None
        )

    async def heartbeat(
        self, group: str, member_id: str, generation: int, group_instance_id: str | None = None
    ) -> int:
        """Heartbeat: NONE, or REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION,
        UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID as Kafka answers."""
        if not group:
            return errors.INVALID_GROUP_ID
        call = kafka_group_heartbeat_call(
            self.keys.kafka_group(group), member_id, group_instance_id, generation
        )
        reply = await self.call_group_script(call)
        return int(reply[0])

    async def leave(self, group: str, members: list[tuple[str, str | None]]) -> list[int]:
        """LeaveGroup for (member id, group.instance.id) pairs (v3+ batches; a static
        member may be named by its instance id alone): one error code per member."""
        if not group:
            return [errors.INVALID_GROUP_ID] * len(members)
        reply = await self.call_group_script(
            kafka_group_leave_call(self.keys.kafka_group(group), members)
        )
        return [int(code) for code in reply]
