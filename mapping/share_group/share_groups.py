"""Share groups' state in Redis (KIP-932): membership (``share_group/heartbeat``) and, per
share-partition, the records in flight on a Redis consumer group of the partition's log
(``share_group/acquire``, ``share_group/acknowledge``). Nothing is kept in the pod: any pod
serves any member and any share-partition."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import entry_id, to_str
from mapping.core.keys import Keys, PartitionKeys, ShareGroupKeys, is_valid_name
from mapping.share_group.assignor import assign

SHARE_GROUP_HEARTBEAT = scripts.load("share_group/heartbeat")
SHARE_GROUP_ACQUIRE = scripts.load("share_group/acquire")
SHARE_GROUP_ACKNOWLEDGE = scripts.load("share_group/acknowledge")

# Kafka's group configs of share groups and their defaults (GroupConfig, ShareGroupConfig).
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
DEFAULTS: dict[str, str] = {
    LOCK_DURATION: "30000",
    DELIVERY_COUNT_LIMIT: "5",
    AUTO_OFFSET_RESET: "latest",
    ISOLATION_LEVEL: "read_uncommitted",
    SESSION_TIMEOUT: "45000",
    HEARTBEAT_INTERVAL: "5000",
}
# Acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
# What one acquisition takes per share-partition at most.
MAX_ACQUIRED = 500
# How long a pod trusts the group configs it read (they change rarely).
CONFIG_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class ShareSettings:
    lock_ms: int
    delivery_limit: int
    earliest: bool
    session_timeout_ms: int
    heartbeat_interval_ms: int

    @staticmethod
    def of(stored: dict[str, str]) -> ShareSettings:
        values = {**DEFAULTS, **{n: v for n, v in stored.items() if n in DEFAULTS}}
        return ShareSettings(
            lock_ms=int(values[LOCK_DURATION]),
            delivery_limit=int(values[DELIVERY_COUNT_LIMIT]),
            earliest=values[AUTO_OFFSET_RESET] == "earliest",
            session_timeout_ms=int(values[SESSION_TIMEOUT]),
            heartbeat_interval_ms=int(values[HEARTBEAT_INTERVAL]),
        )


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int  # 0, or UNKNOWN_MEMBER_ID (the caller's table)
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Acquired:
    """One record handed to a member: its entry, as XRANGE replies carry it, and its
    delivery count."""

    entry_id: bytes
    fields: list[bytes]
    delivery_count: int


@dataclass(frozen=True, slots=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: list[int]


def share_group_heartbeat_call(
    keys: ShareGroupKeys,
    *,
    now_ms: int,
    session_timeout_ms: int,
    member_id: str,
    member_epoch: int,
    subscribed_topics: list[str] | None,
) -> tuple:
    """share_group/heartbeat.lua (``subscribed_topics`` None: unchanged)."""
    topics = json.dumps(sorted(set(subscribed_topics))) if subscribed_topics is not None else ""
    args = [now_ms, session_timeout_ms, member_id, member_epoch, topics]
    return SHARE_GROUP_HEARTBEAT.command(keys.script_keys(), args)


def share_group_acquire_call(
    partition: PartitionKeys,
    *,
    consumer_group: str,
    member_id: str,
    settings: ShareSettings,
    max_records: int,
    sequence_bits: int,
) -> tuple:
    """share_group/acquire.lua on one share-partition."""
    args = [
        consumer_group,
        member_id,
        settings.lock_ms,
        max_records,
        settings.delivery_limit,
        "0" if settings.earliest else "$",
        sequence_bits,
    ]
    return SHARE_GROUP_ACQUIRE.command([partition.log, partition.state], args)


def share_group_acknowledge_call(
    partition: PartitionKeys,
    *,
    consumer_group: str,
    member_id: str,
    lock_ms: int,
    sequence_bits: int,
    batches: list[AckBatch],
) -> tuple:
    """share_group/acknowledge.lua: ``batches`` of one share-partition."""
    args: list[str | int] = [consumer_group, member_id, lock_ms, sequence_bits]
    for batch in batches:
        first, last = max(batch.first_offset, 0), max(batch.last_offset, 0)
        args += [
            entry_id(first, sequence_bits),
            entry_id(last, sequence_bits),
            first,
            ",".join(str(t) for t in batch.types) or "0",
        ]
    return SHARE_GROUP_ACKNOWLEDGE.command([partition.log], args)


class ShareGroups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, sequence_bits: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.bits = sequence_bits
        self._settings: dict[str, tuple[float, ShareSettings]] = {}

    async def settings(self, group: str) -> ShareSettings:
        """The group's share configs (IncrementalAlterConfigs on the GROUP resource), read
        again at most every CONFIG_TTL_S."""
        now = time.monotonic()
        cached = self._settings.get(group)
        if cached is not None and now - cached[0] < CONFIG_TTL_S:
            return cached[1]
        fields = await self.batcher.call("HGETALL", self.keys.group_configs(group))
        settings = ShareSettings.of({to_str(k): to_str(v) for k, v in fields.items()})
        if len(self._settings) > 10_000:
            self._settings.clear()
        self._settings[group] = (now, settings)
        return settings

    async def heartbeat(
        self, group: str, member_id: str, member_epoch: int, subscribed: list[str] | None
    ) -> HeartbeatResult:
        """ShareGroupHeartbeat: join (epoch 0), leave (-1) or stay; the member's assignment
        by the simple assignor over the members as they are now."""
        settings = await self.settings(group)
        reply = await self.batcher.call(
            *share_group_heartbeat_call(
                self.keys.share_group(group),
                now_ms=int(time.time() * 1000),
                session_timeout_ms=settings.session_timeout_ms,
                member_id=member_id,
                member_epoch=member_epoch,
                subscribed_topics=subscribed,
            )
        )
        status, epoch = int(reply[0]), int(reply[1])
        if status != 0:
            return HeartbeatResult(1, -1, settings.heartbeat_interval_ms)
        if member_epoch == -1:
            return HeartbeatResult(0, -1, settings.heartbeat_interval_ms)
        members = {m: list(ts) for m, ts in json.loads(to_str(reply[2])).items()}
        topics = sorted({t for ts in members.values() for t in ts if is_valid_name(t)})
        target = assign(members, await self.partition_counts(topics))
        return HeartbeatResult(0, epoch, settings.heartbeat_interval_ms, target.get(member_id, {}))

    async def partition_counts(self, topics: list[str]) -> dict[str, int]:
        """The partition counts of the ``topics`` that exist."""
        counts = await asyncio.gather(
            *(self.batcher.call("HGET", self.keys.topic(t), "partitions") for t in topics)
        )
        return {t: int(c) for t, c in zip(topics, counts, strict=True) if c}

    async def acquire(
        self, group: str, member_id: str, topic: str, partition: int, max_records: int
    ) -> list[Acquired]:
        """Hand ``member_id`` up to ``max_records`` records of the share-partition, sorted
        by offset."""
        settings = await self.settings(group)
        reply = await self.batcher.call(
            *share_group_acquire_call(
                self.keys.partition(topic, partition),
                consumer_group=self.keys.share_consumer_group(group),
                member_id=member_id,
                settings=settings,
                max_records=max(1, min(max_records, MAX_ACQUIRED)),
                sequence_bits=self.bits,
            )
        )
        taken = [Acquired(bytes(e[0]), list(e[2]), int(e[1])) for e in reply]
        taken.sort(key=lambda a: tuple(int(x) for x in a.entry_id.split(b"-")))
        return taken

    async def acknowledge(
        self, group: str, member_id: str, topic: str, partition: int, batches: list[AckBatch]
    ) -> bool:
        """Apply ``batches``; False when one named records the member does not hold (Kafka's
        INVALID_RECORD_STATE)."""
        if not batches:
            return True
        settings = await self.settings(group)
        refused = await self.batcher.call(
            *share_group_acknowledge_call(
                self.keys.partition(topic, partition),
                consumer_group=self.keys.share_consumer_group(group),
                member_id=member_id,
                lock_ms=settings.lock_ms,
                sequence_bits=self.bits,
                batches=batches,
            )
        )
        return int(refused) == 0
