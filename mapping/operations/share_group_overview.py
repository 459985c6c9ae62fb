"""Share groups (KIP-932) for operators: what ``kafka-share-groups.sh`` shows against Kafka
(``adapter group list / describe / reset-offsets / delete``, ``adapter inspect``) and the
share-group series of the pods' metrics.

Everything is read through ``mapping.share_group.state``: the membership as the heartbeats
left it, and each share-partition's state from the Redis consumer group ``share:<group>`` on
the partition's log. Per share-partition:

- the start offset (SPSO): the first record not yet acknowledged or archived (-1: not
  initialised, no consumer group there yet);
- records in flight: the consumer group's PEL (acquired and not yet acknowledged, or
  released and waiting for the next acquisition);
- records available: not delivered yet (after the group's last-delivered id);
- the lag (KIP-1226): in flight plus available, in records (offsets are time-encoded, so a
  difference of offsets is no record count).

A share group may have state on the partitions of every topic a member subscribed to (the
group's topics set, ``ShareGroupState.partitions``): those are described, in one pipelined
round, and the ones with state shown.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mapping.connection import scripts
from mapping.connection.cluster import SyncClient
from mapping.core import codec
from mapping.core.keys import Keys, group_name
from mapping.operations.group_overview import record_lag
from mapping.operations.offset_reset import (
    EARLIEST,
    LATEST,
    OFFSET,
    TIMESTAMP,
    PlannedOffset,
    ResetTarget,
)
from mapping.partition.kafka import KafkaStore
from mapping.share_group.state import (
    ASSIGNOR,
    EMPTY,
    STABLE,
    UNINITIALIZED,
    PartitionState,
    ShareGroupState,
    ShareMember,
    lag,
    live_members,
    parse_partition_state,
    share_group_offsets_describe_call,
    start_offset,
)
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics

SHARE = "share"  # Kafka's group type (ListGroups) and the protocol column's word
# Commands per pipeline of the synchronous reads: Redis answers other clients in between.
PIPELINE_CHUNK = 1000
NONE_CELL = "-"

STATE_HEADER = ["GROUP", "TYPE", "STATE", "GROUP-EPOCH", "ASSIGNMENT-STRATEGY", "#MEMBERS"]
MEMBER_HEADER = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
# kafka-share-groups.sh --describe --offsets' columns (LEADER-EPOCH left out: always 0
# here), then the records in flight and available
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG", "IN-FLIGHT", "AVAILABLE"]


@dataclass(frozen=True, slots=True)
class SharePartitionRow:
    topic: str
    partition: int
    start_offset: int  # the SPSO; -1: not initialised
    lag: int  # records not yet acknowledged (in flight + available); -1: unknown
    in_flight: int  # the PEL: acquired, or released and waiting to be acquired again
    available: int  # records not delivered yet; -1: unknown (or not initialised)

    @property
    def initialised(self) -> bool:
        return self.start_offset != UNINITIALIZED


@dataclass(frozen=True, slots=True)
class ShareMemberRow:
    member_id: str
    client_id: str
    host: str  # the address its connection came from, Kafka's "/127.0.0.1" form
    member_epoch: int | None
    subscribed_topics: list[str]
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShareGroupOverview:
    group: str
    state: str  # Kafka's ShareGroupState: Stable with live members, else Empty
    group_epoch: int
    assignor: str
    members: list[ShareMemberRow]
    partitions: list[SharePartitionRow]

    @property
    def inactive(self) -> bool:
        """No live member: what AlterShareGroupOffsets and DeleteGroups require."""
        return not self.members


def partition_row(
    topic: str, partition: int, state: PartitionState | None, bits: int
) -> SharePartitionRow:
    """One share-partition's row from its described state (None: not initialised)."""
    if state is None:
        return SharePartitionRow(topic, partition, UNINITIALIZED, UNINITIALIZED, 0, UNINITIALIZED)
    return SharePartitionRow(
        topic, partition, start_offset(state, bits), lag(state), state.in_flight, state.undelivered
    )


def member_row(member: ShareMember) -> ShareMemberRow:
    return ShareMemberRow(
        member.member_id,
        member.client_id,
        member.client_host,
        member.member_epoch,
        list(member.subscribed_topics),
        {t: sorted(ps) for t, ps in member.assignment.items()},
    )


# Tables and summaries (pure)


def cell(value: object) -> str:
    """A table cell: ``-`` for nothing (None, "", -1: not initialised or unknown)."""
    if value is None or value == "" or value == UNINITIALIZED:
        return NONE_CELL
    return str(value)


def assignment_text(assignment: dict[str, list[int]]) -> str:
    """``orders(0,1), audit(2)``, as ``group describe`` shows other groups' members."""
    parts = [f"{t}({','.join(map(str, ps))})" for t, ps in sorted(assignment.items()) if ps]
    return ", ".join(parts) or NONE_CELL


def state_rows(o: ShareGroupOverview) -> list[list[str]]:
    return [[o.group, SHARE, o.state, str(o.group_epoch), o.assignor, str(len(o.members))]]


def member_rows(o: ShareGroupOverview) -> list[list[str]]:
    return [
        [o.group, m.member_id, cell(m.host), cell(m.client_id),
         str(sum(len(ps) for ps in m.assignment.values())), assignment_text(m.assignment)]
        for m in o.members
    ]  # fmt: skip


def offset_rows(o: ShareGroupOverview) -> list[list[str]]:
    return [
        [o.group, p.topic, str(p.partition), cell(p.start_offset), cell(p.lag),
         str(p.in_flight) if p.initialised else NONE_CELL, cell(p.available)]
        for p in o.partitions
    ]  # fmt: skip


def summary_json(o: ShareGroupOverview) -> dict[str, Any]:
    """``group list --json``'s entry of a share group."""
    return {"group": o.group, "protocol": SHARE, "state": o.state, "members": len(o.members)}


def overview_json(o: ShareGroupOverview) -> dict[str, Any]:
    """``group describe --json`` of a share group."""
    return {
        "group": o.group,
        "type": SHARE,
        "state": o.state,
        "group_epoch": o.group_epoch,
        "assignor": o.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "client_id": m.client_id,
                "host": m.host,
                "member_epoch": m.member_epoch,
                "subscribed_topics": m.subscribed_topics,
                "assignment": m.assignment,
            }
            for m in o.members
        ],
        "partitions": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "start_offset": p.start_offset,
                "lag": p.lag,
                "in_flight": p.in_flight,
                "available": p.available,
            }
            for p in o.partitions
        ],
        "lag_unit": "records",
    }


@dataclass(frozen=True, slots=True)
class TopicTotals:
    """A share group's share-partitions of one topic, summed (``inspect groups``, the
    ``_sum`` series): unknown lags (-1) left out, as kafka_exporter leaves them out."""

    topic: str
    partitions: int
    in_flight: int
    available: int
    lag: int


def topic_totals(rows: Iterable[SharePartitionRow]) -> list[TopicTotals]:
    by_topic: dict[str, list[SharePartitionRow]] = {}
    for row in rows:
        if row.initialised:
            by_topic.setdefault(row.topic, []).append(row)
    return [
        TopicTotals(
            topic,
            len(found),
            sum(r.in_flight for r in found),
            sum(r.available for r in found if r.available >= 0),
            sum(r.lag for r in found if r.lag >= 0),
        )
        for topic, found in sorted(by_topic.items())
    ]


# The overview (async: the command line runs it with a pod's batcher)


async def every_partition(topics: Topics, only: list[str] | None = None) -> list[tuple[str, int]]:
    """Every partition of the topics (``only``: of these, those that exist)."""
    names = only if only is not None else await topics.names()
    configs = await asyncio.gather(*(topics.lookup(n) for n in names))
    return [
        (name, p)
        for name, config in zip(names, configs, strict=True)
        if config is not None
        for p in range(config.partitions)
    ]


async def share_overview(
    state: ShareGroupState,
    group: str,
    *,
    offsets: bool = True,
    topic: str | None = None,
) -> ShareGroupOverview | None:
    """Share group ``group``: state, epoch, live members with their assignment, and (with
    ``offsets``) every share-partition with state, plus the members' assigned partitions not
    initialised yet (``topic``: of that topic only); None when there is no such share group."""
    membership = await state.membership(group)
    if membership is None:
        return None
    members = [member_row(m) for m in membership.members]
    rows: list[SharePartitionRow] = []
    if offsets:
        wanted = [tp for tp in await state.partitions(group) if topic is None or tp[0] == topic]
        described = await state.describe(group, wanted)
        assigned = {(t, p) for m in members for t, ps in m.assignment.items() for p in ps}
        rows = [
            partition_row(t, p, found, state.bits)
            for (t, p), found in sorted(described.items())
            if found is not None or (t, p) in assigned
        ]
    return ShareGroupOverview(
        group, membership.state, membership.group_epoch, ASSIGNOR, members, rows
    )


async def share_overviews(
    state: ShareGroupState, *, offsets: bool = False
) -> list[ShareGroupOverview]:
    """Every share group (``group list``)."""
    names = await state.group_names()
    found = await asyncio.gather(*(share_overview(state, g, offsets=offsets) for g in names))
    return [o for o in found if o is not None]


# The metrics' read (synchronous: the scrape thread)


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    members: dict[str, int]  # share group -> live members
    states: dict[str, str]  # share group -> Empty or Stable
    partitions: list[tuple[str, SharePartitionRow]]  # (share group, a share-partition)


def _many(client: SyncClient, commands: list[tuple]) -> list[Any]:
    replies: list[Any] = []
    for start in range(0, len(commands), PIPELINE_CHUNK):
        replies += scripts.call_many_sync(client, commands[start : start + PIPELINE_CHUNK])
    return replies


def membership_counts(
    stored: list[tuple[Any, dict]], names: list[str], now_ms: int
) -> tuple[dict[str, int], dict[str, str]]:
    """(live members, state) per share group from each group's (group epoch, members hash)
    (pure; a group without an epoch is gone)."""
    members: dict[str, int] = {}
    states: dict[str, str] = {}
    for name, (epoch, raw) in zip(names, stored, strict=True):
        if epoch is None:
            continue
        live = live_members({codec.to_str(k): codec.to_str(v) for k, v in raw.items()}, now_ms)
        members[name] = len(live)
        states[name] = STABLE if live else EMPTY
    return members, states


def read_snapshot(
    client: SyncClient, keys: Keys, partition_counts: dict[str, int], bits: int
) -> ShareSnapshot:
    """Every share group's live members and every share-partition with state: the share
    groups set, each group's three keys, and one description per partition of the topics
    its members subscribed to, pipelined."""
    names = sorted(group_name(p) for p in client.smembers(keys.share_groups))
    commands: list[tuple] = []
    for name in names:
        gk = keys.share_group(name)
        commands += [
            ("HGET", gk.meta, "group_epoch"),
            ("HGETALL", gk.members),
            ("SMEMBERS", gk.topics),
        ]
    replies = _many(client, commands)
    stored = [(replies[3 * i], replies[3 * i + 1]) for i in range(len(names))]
    members, states = membership_counts(stored, names, int(time.time() * 1000))
    wanted = [
        (name, topic, p)
        for i, name in enumerate(names)
        if name in members
        for topic in sorted(codec.to_str(t) for t in replies[3 * i + 2])
        for p in range(partition_counts.get(topic, 0))
    ]
    described = _many(
        client, [share_group_offsets_describe_call(keys, g, t, p) for g, t, p in wanted]
    )
    rows = [
        (g, partition_row(t, p, parse_partition_state(reply), bits))
        for (g, t, p), reply in zip(wanted, described, strict=True)
        if reply
    ]
    return ShareSnapshot(members, states, rows)


# Resetting a share group's start offsets (``group reset-offsets`` of a share group)


class CannotResetShare(ValueError):
    """A target share groups do not take (``--shift-by``: Kafka's share tool has none)."""


async def plan_share_reset(
    kafka: KafkaStore,
    state: ShareGroupState,
    group: str,
    config: TopicConfig,
    partitions: list[int],
    target: ResetTarget,
) -> list[PlannedOffset]:
    """Where each share-partition of topic ``config`` starts again (nothing is written):
    ``current`` is its start offset now (None: not initialised), ``lag`` the records from
    the new start to the high watermark, all available once it is written."""
    if target.kind not in (EARLIEST, LATEST, OFFSET, TIMESTAMP):
        raise CannotResetShare(
            "share groups are reset --to-earliest, --to-latest, --to-offset or --to-datetime"
        )
    described = await state.describe(group, [(config.name, p) for p in partitions])

    async def one(p: int) -> PlannedOffset:
        earliest, latest = await kafka.first_offset(config, p)
        if target.kind == EARLIEST:
            asked = earliest
        elif target.kind == LATEST:
            asked = latest
        elif target.kind == OFFSET:
            asked = target.value
        else:
            found = await kafka.at_or_after_time(config, p, target.value)
            asked = latest if found is None else found.offset
        new = min(max(asked, earliest), latest)
        clamped = "" if new == asked else (EARLIEST if new > asked else LATEST)
        start = start_offset(described[(config.name, p)], state.bits)
        _, records, _ = await record_lag(state.batcher, state.keys, config.name, p, new, state.bits)
        current = None if start == UNINITIALIZED else start
        return PlannedOffset(config.name, p, current, new, records, clamped)

    return list(await asyncio.gather(*(one(p) for p in partitions)))


async def execute_share_reset(
    state: ShareGroupState, group: str, plan: list[PlannedOffset]
) -> None:
    """Start each planned share-partition again at its new offset, nothing in flight (the
    caller checked that the group has no live members: AlterShareGroupOffsets' rule)."""
    await state.alter(group, {(p.topic, p.partition): p.new for p in plan})
