"""The KIP-848 consumer protocol: ConsumerGroupHeartbeat and ConsumerGroupDescribe, with the
server-side ``uniform`` and ``range`` assignors (``mapping/kafka_group/assignors.py``).

No barrier and no waiting: every heartbeat runs ``kafka_group/consumer_heartbeat``, which
applies the member's changes and moves it toward its target assignment (``lib/kconsumer.lua``).
When the group's epoch is ahead of its target, the script hands the assignor's input back; this
pod computes the target and stores it with ``kafka_group/consumer_target`` (only if the epoch is
unchanged, else it computes again), which answers the member too. Partition counts come from
the topics' hashes (other slots) and are passed in; a changed count starts a new epoch.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from mapping.connection import scripts
from mapping.connection.script_constants import NEED_TARGET
from mapping.core import kafka_errors as errors
from mapping.core.codec import to_str
from mapping.core.keys import KafkaGroupKeys, group_part
from mapping.kafka_group.assignors import ASSIGNORS, choose
from mapping.kafka_group.base import GroupsBase, kafka_group_consumer_describe_call
from mapping.kafka_group.subscriptions import (
    InvalidRegex,
    Subscription,
    Visible,
    compile_regex,
    matching,
    topic_list,
)

KAFKA_GROUP_CONSUMER_HEARTBEAT = scripts.load("kafka_group/consumer_heartbeat")
KAFKA_GROUP_CONSUMER_TARGET = scripts.load("kafka_group/consumer_target")

# The GROUP resource's configs the coordinator reads (mapping/topic/broker_configs.py
# GROUP_CONFIGS).
CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    error: int
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    # topic -> partitions the member owns from now on; None: unchanged since last sent
    assignment: dict[str, list[int]] | None = None
    message: str | None = None  # the error's text, where Kafka gives one


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """What a classic member's JoinGroup adds to its heartbeat in a consumer group: its
    session, its protocols' names (the first is the one its SyncGroup names) and its
    subscription's version (its assignment's)."""

    session_timeout_ms: int
    protocols: list[str]
    version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "session_timeout_ms": self.session_timeout_ms,
            "protocols": self.protocols,
            "version": self.version,
        }


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: list[str]  # the names it subscribed to
    subscribed_topic_regex: str | None
    assignment: dict[str, list[int]]
    target_assignment: dict[str, list[int]]
    classic: bool = False  # a member that speaks the classic protocol (lib/kmixed.lua)


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    error: int
    state: str  # Empty, Assigning, Reconciling, Stable; Dead when unknown
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    members: list[ConsumerMemberDescription] = field(default_factory=list)


def _owned_json(owned: dict[str, list[int]] | None) -> str:
    return json.dumps(owned) if owned is not None else ""


def kafka_group_consumer_heartbeat_call(
    keys: KafkaGroupKeys,
    *,
    session_timeout_ms: int,
    member_id: str,
    member_epoch: int,
    instance_id: str | None,
    rack_id: str | None,
    client_id: str,
    client_host: str,
    rebalance_timeout_ms: int,
    subscribed_topics: list[str] | None,
    subscription: Subscription | None,
    server_assignor: str | None,
    owned: dict[str, list[int]] | None,
    partition_counts: dict[str, int],
    classic: ClassicJoin | None = None,
) -> tuple:
    """kafka_group/consumer_heartbeat.lua (None: unchanged, or not sent).
    ``subscribed_topics`` are the topics the assignor gives the member; ``subscription``
    what it subscribed with (its names and regex), kept to be described and matched
    again; ``classic``: a classic member's JoinGroup (lib/kmixed.lua)."""
    args = [
        session_timeout_ms,
        member_id,
        member_epoch,
        instance_id or "",
        rack_id or "",
        client_id,
        client_host,
        rebalance_timeout_ms,
        json.dumps(subscribed_topics) if subscribed_topics is not None else "",
        server_assignor or "",
        _owned_json(owned),
        json.dumps(partition_counts),
        json.dumps(subscription.as_json()) if subscription is not None else "",
        json.dumps(classic.as_json()) if classic is not None else "",
    ]
    return KAFKA_GROUP_CONSUMER_HEARTBEAT.command(keys.script_keys(), args)


def kafka_group_consumer_target_call(
    keys: KafkaGroupKeys,
    *,
    session_timeout_ms: int,
    group_epoch: int,
    target: dict[str, dict[str, list[int]]],
    assignor: str,
    member_id: str,
    owned: dict[str, list[int]] | None,
    full: bool,
    partition_counts: dict[str, int] | None = None,
) -> tuple:
    """kafka_group/consumer_target.lua: store ``target`` (member -> topic -> partitions)
    for ``group_epoch``, then answer ``member_id`` (``full``: its whole assignment);
    ``partition_counts``: the counts the target was computed with for topics the group had
    none of."""
    args = [
        session_timeout_ms,
        group_epoch,
        json.dumps(target),
        assignor,
        member_id,
        _owned_json(owned),
        "1" if full else "0",
        json.dumps(partition_counts or {}),
    ]
    return KAFKA_GROUP_CONSUMER_TARGET.command(keys.script_keys(), args)


def _int_or(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:  # never stored so (the catalogue checks), but never fatal either
        return default


def _partitions(value: Any) -> dict[str, list[int]]:
    # Lua's cjson writes an empty table as {}: a dict either way.
    return {t: sorted(int(p) for p in ps) for t, ps in dict(value or {}).items() if ps}


def _visible(member: dict) -> dict[str, list[int]]:
    """What the member owns: assigned, less what it is giving up."""
    assigned, revoking = _partitions(member.get("assigned")), _partitions(member.get("revoking"))
    kept = {t: [p for p in ps if p not in revoking.get(t, [])] for t, ps in assigned.items()}
    return {t: ps for t, ps in kept.items() if ps}


class ConsumerGroups(GroupsBase):
    async def consumer_heartbeat(
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: list[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        owned: dict[str, list[int]] | None = None,
        client_id: str = "",
        client_host: str = "",
        visible: Visible | None = None,
        classic: ClassicJoin | None = None,
    ) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat. ``member_epoch`` 0 joins (``member_id`` may be empty:
        one is made), -1 leaves, -2 is a static member's temporary leave: with an
        ``instance_id`` the member is static, and one that left with -2 keeps its place
        and partitions until its session runs out or a join with its instance id takes
        them over (``kafka_group/consumer_heartbeat.lua``). ``None`` fields are
        "unchanged" as in the request. Topic ids are the caller's business: topics here
        are names. A member subscribed by ``subscribed_topic_regex`` is subscribed to its
        names and every topic the regex matches when it heartbeats (``visible``: those of
        them its principal may see), so a topic created later joins its assignment.
        ``classic``: a classic member's JoinGroup, served as this member's heartbeat with
        its own session timeout (``ClassicGroups.join``)."""
        if not group:  # Kafka's rule: any group id but the empty one
            return ConsumerHeartbeatResult(errors.INVALID_GROUP_ID, member_id)
        if instance_id == "":
            return ConsumerHeartbeatResult(
                errors.INVALID_REQUEST, member_id, message="InstanceId can't be empty."
            )
        if member_epoch < -2:
            return ConsumerHeartbeatResult(
                errors.INVALID_REQUEST, member_id, message="MemberEpoch is invalid."
            )
        if member_epoch == -2 and instance_id is None:
            return ConsumerHeartbeatResult(
                errors.INVALID_REQUEST, member_id, message="InstanceId can't be null."
            )
        if server_assignor is not None and server_assignor not in ASSIGNORS:
            return ConsumerHeartbeatResult(errors.UNSUPPORTED_ASSIGNOR, member_id)
        if subscribed_topic_regex:
            try:
                compile_regex(subscribed_topic_regex)
            except InvalidRegex as invalid:
                return ConsumerHeartbeatResult(
                    errors.INVALID_REGULAR_EXPRESSION, member_id, message=str(invalid)
                )
        if member_epoch == 0:
            if subscribed_topic_names is None and subscribed_topic_regex is None:
                return ConsumerHeartbeatResult(errors.INVALID_REQUEST, member_id)
            member_id = member_id or str(uuid.uuid4())
            if await self.v1_members_live(group):
                return ConsumerHeartbeatResult(errors.INCONSISTENT_GROUP_PROTOCOL, member_id)
        elif not member_id:
            return ConsumerHeartbeatResult(errors.UNKNOWN_MEMBER_ID, member_id)
        gk = self.keys.kafka_group(group)
        # the group's own configs (IncrementalAlterConfigs GROUP) and the member's state,
        # in one pipeline
        configs = self.batcher.submit("HGETALL", self.keys.group_configs(group))
        member = None
        if member_epoch != 0:  # a joining member starts over
            stored = await self.batcher.submit("HGET", gk.consumer_member, member_id)
            member = json.loads(stored) if stored else None
        session_timeout_ms, heartbeat_interval_ms = self._member_timing(await configs)
        if classic is not None:
            session_timeout_ms = classic.session_timeout_ms
        sent = subscribed_topic_names is not None or subscribed_topic_regex is not None
        subscription = Subscription.stored(member).updated(
            subscribed_topic_names, subscribed_topic_regex
        )
        subscribed = None  # unchanged: the script keeps what it has
        if member_epoch >= 0 and (sent or member is not None):  # (not for a leaver)
            subscribed = await self._subscribed(subscription, visible)
            if not sent and subscribed == topic_list(member and member.get("subscribed")):
                subscribed = None
        # the group's topics as this pod last saw them: their counts go with the request
        known = self.consumer_topics.setdefault(group, set())
        counts = await self.partition_counts(sorted(known | set(subscribed or [])))
        full = member_epoch == 0 or subscribed is not None
        call = kafka_group_consumer_heartbeat_call(
            gk,
            session_timeout_ms=session_timeout_ms,
            member_id=member_id,
            member_epoch=member_epoch,
            instance_id=instance_id,
            rack_id=rack_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topics=subscribed,
            subscription=subscription if sent else None,  # (a join always sends one)
            server_assignor=server_assignor,
            owned=owned,
            partition_counts={t: c or 0 for t, c in counts.items()},
            classic=classic,
        )
        registered = self.batcher.submit("SADD", self.keys.kafka_groups, group_part(group))
        reply = await self.call_group_script(call)
        await registered
        while int(reply[0]) == NEED_TARGET:
            epoch = int(reply[1])
            members = {m: d for m, d in json.loads(reply[2] or b"{}").items()}
            previous = {m: _partitions(a) for m, a in dict(json.loads(reply[3])).items()}
            stored_counts = {t: int(c) for t, c in dict(json.loads(reply[4])).items()}
            subscriptions = {m: topic_list(d.get("subscribed")) for m, d in members.items()}
            known.update(t for subscribed in subscriptions.values() for t in subscribed)
            # topics no heartbeat brought counts of yet (a classic group's, upgraded)
            unseen = sorted(known - stored_counts.keys())
            if unseen:
                read = await self.partition_counts(unseen)
                stored_counts |= {t: c or 0 for t, c in read.items()}
            name = choose([str(d.get("assignor") or "") for d in members.values()])
            target = ASSIGNORS[name](subscriptions, stored_counts, previous)
            reply = await self.call_group_script(
                kafka_group_consumer_target_call(
                    gk,
                    session_timeout_ms=session_timeout_ms,
                    group_epoch=epoch,
                    target=target,
                    assignor=name,
                    member_id=member_id,
                    owned=owned,
                    full=full,
                    partition_counts={t: stored_counts[t] for t in unseen},
                )
            )
        code = int(reply[0])
        if code != errors.NONE:
            return ConsumerHeartbeatResult(code, member_id)
        assignment = _partitions(json.loads(reply[3])) if reply[3] else None
        return ConsumerHeartbeatResult(
            errors.NONE,
            to_str(reply[1]),
            int(reply[2]),
            heartbeat_interval_ms if int(reply[2]) >= 0 else 0,
            assignment,
        )

    async def _subscribed(self, subscription: Subscription, visible: Visible | None) -> list[str]:
        """The topics ``subscription`` names now: its names and, with a regex, the topics
        it matches (those ``visible`` keeps)."""
        names = set(subscription.names)
        if subscription.regex:
            topics = [to_str(t) for t in await self.batcher.call("SMEMBERS", self.keys.topics)]
            matched = matching(subscription.regex, topics)
            names.update(await visible(matched) if visible is not None and matched else matched)
        return sorted(names)

    def _member_timing(self, configs: dict[Any, Any]) -> tuple[int, int]:
        """The session timeout and heartbeat interval of a group's members: its GROUP
        configs ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms`` where
        set (validated and bounded when altered: adapter/kafka/configs.py), else the pod's
        ``--kafka-group-consumer-*`` options."""
        stored = {to_str(k): to_str(v) for k, v in configs.items()}
        settings = self.settings
        return (
            _int_or(stored.get(CONSUMER_SESSION_TIMEOUT), settings.consumer_session_timeout_ms),
            _int_or(
                stored.get(CONSUMER_HEARTBEAT_INTERVAL), settings.consumer_heartbeat_interval_ms
            ),
        )

    async def consumer_describe(self, group: str) -> ConsumerGroupDescription:
        """ConsumerGroupDescribe for one group (GROUP_ID_NOT_FOUND when it has no state
        under this protocol)."""
        if not group:
            return ConsumerGroupDescription(group, errors.INVALID_GROUP_ID, "Dead")
        reply = await self.call_group_script(
            kafka_group_consumer_describe_call(self.keys.kafka_group(group))
        )
        if int(reply[0]) == 0:
            return ConsumerGroupDescription(group, errors.GROUP_ID_NOT_FOUND, "Dead")
        members = []
        for i in range(5, len(reply), 3):
            m = json.loads(reply[i + 1])
            sent = Subscription.stored(m)
            members.append(
                ConsumerMemberDescription(
                    member_id=to_str(reply[i]),
                    instance_id=m.get("instance_id") or None,
                    rack_id=m.get("rack_id") or None,
                    client_id=m.get("client_id", ""),
                    client_host=m.get("client_host", ""),
                    member_epoch=int(m.get("epoch", 0)),
                    subscribed_topics=list(sent.names),
                    subscribed_topic_regex=sent.regex or None,
                    assignment=_visible(m),
                    target_assignment=_partitions(json.loads(reply[i + 2])),
                    classic="classic" in m,
                )
            )
        return ConsumerGroupDescription(
            group,
            errors.NONE,
            to_str(reply[1]),
            int(reply[2]),
            int(reply[3]),
            to_str(reply[4]),
            sorted(members, key=lambda m: m.member_id),
        )
