"""One consumer group across its protocols, for operators (``adapter group describe`` and
``group list``; ``adapter group reset-offsets`` asks it whether the group is inactive).

A group name may have state under three protocols (docs/kafka-groups-design.md): Kafka's
classic protocol and KIP-848 (keyed by the group, ``Keys.kafka_group``), and V1 (keyed by
(group, topic), ``Keys.group``); all three share the committed offsets of each (group,
topic). The overview reads each through the code its protocol is served with
(``KafkaGroups.describe_group`` and ``consumer_describe``, which settle the group first, as
DescribeGroups does; V1's hashes, with a member live while its last heartbeat is within
the V1 session timeout, on Redis' clock) and the lag through ``partition/lag.lua``: lag is
counted in records, never as log end minus committed offset, which on time-encoded offsets
is a distance in time.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from mapping.connection.batcher import RedisBatcher
from mapping.core import codec
from mapping.core import kafka_errors as errors
from mapping.core.keys import Keys, group_name, parse_group_entry
from mapping.kafka_group import KafkaGroups
from mapping.operations.inspection import (
    END_FIELDS,
    LAG_COUNT_CAP,
    log_end_offset,
    needs_entry,
    partition_lag_call,
    reader_bound,
)
from mapping.partition.partition_scripts import PartitionHead
from mapping.replication.durable_reads import WAIT_REPLICAS_FIELD

CLASSIC = "classic"  # Kafka's classic group protocol (JoinGroup/SyncGroup)
CONSUMER = "consumer"  # KIP-848 (ConsumerGroupHeartbeat), Kafka's name for it
V1 = "v1"
EMPTY, DEAD, STABLE = "Empty", "Dead", "Stable"
# States in which Kafka's tool resets offsets ("the group is inactive")
INACTIVE = frozenset({EMPTY, DEAD})


@dataclass(frozen=True, slots=True)
class ProtocolState:
    """The group's state under one protocol (V1: on one topic, a V1 group's key)."""

    protocol: str
    topic: str | None
    state: str
    generation: int  # classic: the generation; KIP-848: the group epoch; V1: the generation
    assignment_strategy: str  # classic: the chosen protocol (range, ...); else the assignor
    members: int


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    protocol: str
    client_id: str = ""  # "" where the protocol carries none (V1)
    host: str = ""
    instance_id: str | None = None
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """kafka-consumer-groups --describe's row: committed offset, log end offset, lag."""

    topic: str
    partition: int
    current_offset: int | None  # the committed offset (the next to read); None: none
    # Kafka's (exclusive), what ListOffsets latest answers: inspection.log_end_offset
    log_end_offset: int
    lag: int | None  # records from the committed offset to the hw; None: nothing committed
    lag_exact: bool  # False: at least ``lag`` (entries from before records were numbered)
    member_id: str | None  # the member it is assigned to


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group: str
    state: str  # the state of the protocol with live members, else of the stored state
    protocol: str  # CLASSIC, CONSUMER or V1 ("" when the group only has committed offsets)
    states: list[ProtocolState]
    members: list[Member]
    partitions: list[PartitionOffsets]

    @property
    def inactive(self) -> bool:
        """No protocol has a member: what Kafka's tool requires to reset offsets."""
        return all(s.state in INACTIVE for s in self.states) and not self.members


async def group_names(groups: KafkaGroups) -> list[str]:
    """Every group name with state under any protocol or committed offsets."""
    batcher, keys = groups.batcher, groups.keys
    kafka, pairs = await asyncio.gather(
        batcher.call("SMEMBERS", keys.kafka_groups), batcher.call("SMEMBERS", keys.groups)
    )
    names = {group_name(n) for n in kafka}
    names |= {pair[0] for pair in map(parse_group_entry, pairs) if pair is not None}
    return sorted(names)


async def overview(
    groups: KafkaGroups, group: str, sequence_bits: int, *, offsets: bool = True
) -> GroupOverview | None:
    """Group ``group`` under every protocol; None when it has no state and no offsets.
    ``offsets`` False: states and members only (no per-partition reads)."""
    classic, consumer, topics = await asyncio.gather(
        groups.describe_group(group), groups.consumer_describe(group), groups.topics_of(group)
    )
    states: list[ProtocolState] = []
    members: list[Member] = []
    if classic.generation >= 0:  # (-1: no classic state, Kafka's "unknown generation")
        states.append(
            ProtocolState(
                protocol=CLASSIC,
                topic=None,
                state=classic.state,
                generation=classic.generation,
                assignment_strategy=classic.protocol,
                members=len(classic.members),
            )
        )
        for m in classic.members:
            assigned = _assigned(m.assignment) if classic.protocol_type == "consumer" else {}
            members.append(
                Member(
                    m.member_id, CLASSIC, m.client_id, m.client_host, m.group_instance_id, assigned
                )
            )
    if consumer.error == errors.NONE:
        states.append(
            ProtocolState(
                protocol=CONSUMER,
                topic=None,
                state=consumer.state,
                generation=consumer.group_epoch,
                assignment_strategy=consumer.assignor,
                members=len(consumer.members),
            )
        )
        for c in consumer.members:
            members.append(
                Member(
                    c.member_id,
                    CLASSIC if c.classic else CONSUMER,  # (a classic member of the group)
                    c.client_id,
                    c.client_host,
                    c.instance_id,
                    {t: sorted(ps) for t, ps in c.assignment.items()},
                )
            )
    v1_states, v1_members = await _v1(groups, group, topics)
    states += v1_states
    members += v1_members
    if not states and not topics:
        return None
    state, protocol = _summary(states)
    partitions = await _offsets(groups, group, topics, members, sequence_bits) if offsets else []
    return GroupOverview(group, state, protocol, states, members, partitions)


def _assigned(assignment: bytes) -> dict[str, list[int]]:
    """A classic consumer's partitions from its ConsumerProtocolAssignment (kafka-python's
    codec); {} for bytes that are not one (another protocol type, or none yet)."""
    if not assignment:
        return {}
    try:
        decoded = ConsumerProtocolAssignment.decode(assignment)
    except (ValueError, struct.error):
        return {}
    found: dict[str, list[int]] = {}
    for topic_partitions in decoded.assigned_partitions:
        found.setdefault(topic_partitions.topic, []).extend(topic_partitions.partitions)
    return {t: sorted(ps) for t, ps in found.items()}


async def _v1(
    groups: KafkaGroups, group: str, topics: list[str]
) -> tuple[list[ProtocolState], list[Member]]:
    """The V1 groups of ``group`` (one per topic it joined), with their live members."""
    batcher = groups.batcher
    keys = [groups.keys.group(group, t) for t in topics]
    time, *hashes = await asyncio.gather(
        batcher.call("TIME"),
        *(batcher.call("HGETALL", h) for k in keys for h in (k.meta, k.members, k.assignment)),
    )
    now_ms = int(time[0]) * 1000 + int(time[1]) // 1000
    states, members = [], []
    for i, topic in enumerate(topics):
        meta, heartbeats, assignment = (_text(h) for h in hashes[3 * i : 3 * i + 3])
        if "generation" not in meta:  # offsets only (a Kafka or Spark commit)
            continue
        live = sorted(
            m
            for m, hb in heartbeats.items()
            if now_ms - int(float(hb)) <= groups.v1_session_timeout_ms
        )
        states.append(
            ProtocolState(
                protocol=V1,
                topic=topic,
                state=STABLE if live else EMPTY,
                generation=int(meta["generation"]),
                assignment_strategy=meta.get("assignor", "round_robin"),
                members=len(live),
            )
        )
        for m in live:
            parts = [int(p) for p in assignment.get(m, "").split()]
            members.append(Member(m, V1, assignment={topic: parts}))
    return states, members


def _text(raw: dict) -> dict[str, str]:
    return {codec.to_str(k): codec.to_str(v) for k, v in raw.items()}


def _summary(states: list[ProtocolState]) -> tuple[str, str]:
    """(state, protocol) of the group as one: the protocol whose members are live (the
    protocols exclude each other while they have members), else the Kafka state kept."""
    for s in states:
        if s.members:
            return s.state, s.protocol
    kafka = [s for s in states if s.protocol != V1]
    if kafka:
        return kafka[0].state, kafka[0].protocol
    if states:
        return EMPTY, V1
    return EMPTY, ""  # committed offsets only


async def _offsets(
    groups: KafkaGroups,
    group: str,
    topics: list[str],
    members: list[Member],
    bits: int,
) -> list[PartitionOffsets]:
    """Every partition of every topic the group commits on or is assigned."""
    owners = {(t, p): m.member_id for m in members for t, ps in m.assignment.items() for p in ps}
    names = sorted(set(topics) | {t for t, _ in owners})
    counts, committed = await asyncio.gather(
        groups.partition_counts(names),
        asyncio.gather(
            *(groups.batcher.call("HGETALL", groups.keys.group(group, t).offsets) for t in names)
        ),
    )
    wanted: list[tuple[str, int, int | None]] = []
    for topic, stored in zip(names, committed, strict=True):
        offsets = {int(p): int(o) for p, o in stored.items()}
        count = counts[topic]
        # a deleted topic the groups set still names: its committed partitions
        for p in range(count) if count is not None else sorted(offsets):
            wanted.append((topic, p, offsets.get(p)))
    batcher, keys = groups.batcher, groups.keys
    stored = await batcher.call("HGET", keys.meta, WAIT_REPLICAS_FIELD)
    durable = stored is not None and int(stored) > 0
    lags, ends = await asyncio.gather(
        asyncio.gather(*(record_lag(batcher, keys, t, p, c or 0, bits) for t, p, c in wanted)),
        asyncio.gather(*(log_end(batcher, keys, t, p, bits, durable) for t, p, _ in wanted)),
    )
    return [
        PartitionOffsets(t, p, c, end, lag if c is not None else None, exact, owners.get((t, p)))
        for (t, p, c), (_, lag, exact), end in zip(wanted, lags, ends, strict=True)
    ]


async def log_end(
    batcher: RedisBatcher, keys: Keys, topic: str, partition: int, bits: int, durable: bool
) -> int:
    """Kafka's log end offset of the partition (inspection.log_end_offset), read-only."""
    pk = keys.partition(topic, partition)
    state = await batcher.call("HMGET", pk.state, *END_FIELDS)
    bound, last, start = reader_bound(state, durable)
    before = None
    if needs_entry(bound, last):
        before = await batcher.call(
            "XREVRANGE", pk.log, codec.entry_id(bound, bits), "-", "COUNT", 1
        )
    return log_end_offset(bound, start, before, bits)


async def record_lag(
    batcher: RedisBatcher, keys: Keys, topic: str, partition: int, position: int, bits: int
) -> tuple[int, int, bool]:
    """(V1 hw, records from ``position`` to it, whether that count is exact):
    partition/lag.lua, which reads two entries whatever the backlog."""
    # the lag script reads no replication factor nor lag bound: 1 and 0
    head = PartitionHead(keys.partition(topic, partition), bits, 1, 0)
    start = codec.entry_id(max(position, 0), bits)
    reply = await batcher.call(*partition_lag_call(head, start, LAG_COUNT_CAP))
    return int(reply[0]), int(reply[1]), bool(int(reply[3]))
