"""Kafka consumer groups (classic protocol) with all state in Redis: the API the Kafka wire
handlers call (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
OffsetDelete, TxnOffsetCommit and EndTxn's offsets, ListGroups, DescribeGroups,
DeleteGroups) and the KIP-848 consumer protocol (ConsumerGroupHeartbeat,
ConsumerGroupDescribe). Plain values in and out: bytes for
protocol metadata and assignments, Kafka's numeric error codes (``mapping.core.kafka_errors``),
no wire encoding. Any pod may serve any request of any group: see docs/kafka-groups-design.md
and ``mapping/lua/lib/kgroup.lua`` for the state machine.
"""

from __future__ import annotations

from mapping.kafka_group.admin import (
    GroupAdmin,
    GroupDescription,
    GroupListing,
    MemberDescription,
)
from mapping.kafka_group.base import KafkaGroupSettings
from mapping.kafka_group.classic import ClassicGroups, JoinedMember, JoinResult, SyncResult
from mapping.kafka_group.consumer import (
    ConsumerGroupDescription,
    ConsumerGroups,
    ConsumerHeartbeatResult,
    ConsumerMemberDescription,
)
from mapping.kafka_group.offsets import (
    NO_EPOCH,
    NO_OFFSET,
    CommittedOffset,
    GroupOffsets,
    OffsetToCommit,
)
from mapping.kafka_group.txn_offsets import TxnCommitter, TxnOffset, TxnOffsets


class KafkaGroups(ClassicGroups, ConsumerGroups, GroupOffsets, TxnOffsets, GroupAdmin):
    """One pod's door to every Kafka group: ``KafkaGroups(batcher, Waits(subscriber, Channel),
    keys, settings, v1_session_timeout_ms=...)``; several pods (instances on their own
    connections) share the groups."""


__all__ = [
    "NO_EPOCH",
    "NO_OFFSET",
    "CommittedOffset",
    "ConsumerGroupDescription",
    "ConsumerHeartbeatResult",
    "ConsumerMemberDescription",
    "GroupDescription",
    "GroupListing",
    "JoinResult",
    "JoinedMember",
    "KafkaGroupSettings",
    "KafkaGroups",
    "MemberDescription",
    "OffsetToCommit",
    "SyncResult",
    "TxnCommitter",
    "TxnOffset",
]
