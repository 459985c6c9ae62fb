"""Share groups' state in Redis (KIP-932): membership (``share_group/heartbeat``) and, per
share-partition, the records in flight on a Redis consumer group of the partition's log
(``share_group/acquire``, ``share_group/acknowledge``, ``share_group/release``). Nothing is
kept in the pod: any pod serves any member and any share-partition.

A member's records in flight are on the logs of its partitions, in other Redis Cluster
slots than the group's membership: the heartbeat script names the members that left or
expired, and their records are released here, one script call per partition."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import entry_id, to_str
from mapping.core.keys import Keys, PartitionKeys, ShareGroupKeys, group_part, is_valid_name
from mapping.share_group.assignor import assign

log = logging.getLogger(__name__)

SHARE_GROUP_HEARTBEAT = scripts.load("share_group/heartbeat")
SHARE_GROUP_ACQUIRE = scripts.load("share_group/acquire")
SHARE_GROUP_ACKNOWLEDGE = scripts.load("share_group/acknowledge")
SHARE_GROUP_RELEASE = scripts.load("share_group/release")

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
# Acknowledge types (ShareFetch/ShareAcknowledge AcknowledgeTypes); RENEW from v2 (KIP-1222).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
# share_group/heartbeat's statuses.
HEARTBEAT_OK, UNKNOWN_MEMBER, FENCED_MEMBER = 0, 1, 2
# How long after a member's leave its records are released (when its share session's close
# did not release them first): a client closing sends its last acknowledgements and its
# leave together (librdkafka does, to other pods), and the acknowledgements must find the
# records still the member's.
LEAVE_RELEASE_DELAY_S = 2.0
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
    read_committed: bool = False

    @staticmethod
    def of(stored: dict[str, str]) -> ShareSettings:
        values = {**DEFAULTS, **{n: v for n, v in stored.items() if n in DEFAULTS}}
        return ShareSettings(
            lock_ms=int(values[LOCK_DURATION]),
            delivery_limit=int(values[DELIVERY_COUNT_LIMIT]),
            earliest=values[AUTO_OFFSET_RESET] == "earliest",
            session_timeout_ms=int(values[SESSION_TIMEOUT]),
            heartbeat_interval_ms=int(values[HEARTBEAT_INTERVAL]),
            read_committed=values[ISOLATION_LEVEL] == "read_committed",
        )


@dataclass(frozen=True, slots=True)
class ShareClient:
    """Who a member is, as ShareGroupDescribe shows it: the request header's client id, the
    connection's peer host, the heartbeat's rack (None: none)."""

    client_id: str
    host: str
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int  # HEARTBEAT_OK, UNKNOWN_MEMBER or FENCED_MEMBER
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


def invalid_acknowledgements(batches: list[AckBatch], renew_allowed: bool) -> bool:
    """Whether a partition's acknowledgement batches break Kafka's rules (the partition's
    answer is then INVALID_REQUEST and none of them applies): each batch's range in order
    and apart from the one before, one type for the range or one per offset, each a known
    type; RENEW only in a request that says it carries renewals (v2's IsRenewAck)."""
    highest = RENEW if renew_allowed else REJECT
    previous_last = -1
    for batch in batches:
        first, last, types = batch.first_offset, batch.last_offset, batch.types
        if first < 0 or first > last or first <= previous_last or not types:
            return True
        if len(types) > 1 and len(types) != last - first + 1:
            return True
        if any(t < GAP or t > highest for t in types):
            return True
        previous_last = last
    return False


def departed_members(encoded: bytes | str) -> dict[str, list[str]]:
    """share_group/heartbeat's gone JSON: member id -> the topics it was subscribed to."""
    gone = json.loads(to_str(encoded) or "{}")
    return {m: [t for t in ts if isinstance(t, str)] for m, ts in gone.items() if ts}


def share_group_heartbeat_call(
    keys: ShareGroupKeys,
    *,
    now_ms: int,
    session_timeout_ms: int,
    member_id: str,
    member_epoch: int,
    subscribed_topics: list[str] | None,
    client: ShareClient | None = None,
) -> tuple:
    """share_group/heartbeat.lua (``subscribed_topics``, ``client`` None: unchanged)."""
    topics = json.dumps(sorted(set(subscribed_topics))) if subscribed_topics is not None else ""
    described = json.dumps(dataclasses.asdict(client)) if client is not None else ""
    args = [now_ms, session_timeout_ms, member_id, member_epoch, topics, described]
    return SHARE_GROUP_HEARTBEAT.command(keys.script_keys(), args)


def share_group_acquire_call(
    partition: PartitionKeys,
    *,
    consumer_group: str,
    member_id: str,
    settings: ShareSettings,
    max_records: int,
    sequence_bits: int,
    max_bytes: int | None = None,
    first: bool = True,
) -> tuple:
    """share_group/acquire.lua on one share-partition (``max_bytes`` None: no bound;
    ``first``: nothing is in the answer yet, so one record may go past ``max_bytes``)."""
    args = [
        consumer_group,
        member_id,
        settings.lock_ms,
        max_records,
        settings.delivery_limit,
        "0" if settings.earliest else "$",
        sequence_bits,
        int(settings.read_committed),
        -1 if max_bytes is None else max(0, max_bytes),
        int(first),
    ]
    keys = [partition.log, partition.state, partition.txn_aborted]
    return SHARE_GROUP_ACQUIRE.command(keys, args)


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


def share_group_release_call(
    partition: PartitionKeys, *, consumer_group: str, member_id: str, lock_ms: int
) -> tuple:
    """share_group/release.lua: everything ``member_id`` holds on one share-partition."""
    return SHARE_GROUP_RELEASE.command([partition.log], [consumer_group, member_id, lock_ms])


async def partition_counts(batcher: RedisBatcher, keys: Keys, topics: list[str]) -> dict[str, int]:
    """The partition counts of the ``topics`` that exist (what the simple assignor and the
    releases of departed members spread over)."""
    counts = await asyncio.gather(
        *(batcher.call("HGET", keys.topic(t), "partitions") for t in topics)
    )
    return {t: int(c) for t, c in zip(topics, counts, strict=True) if c}


class ShareGroups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, sequence_bits: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.bits = sequence_bits
        self._settings: dict[str, tuple[float, ShareSettings]] = {}
        self._releases: set[asyncio.Task[Any]] = set()  # leaves' delayed releases

    async def settings(self, group: str, *, fresh: bool = False) -> ShareSettings:
        """The group's share configs (IncrementalAlterConfigs on the GROUP resource), read
        again at most every CONFIG_TTL_S, or now when ``fresh`` (a ShareFetch reads them
        as it starts: a change applies to the next fetch, as in Kafka)."""
        now = time.monotonic()
        cached = self._settings.get(group)
        if cached is not None and now - cached[0] < CONFIG_TTL_S and not fresh:
            return cached[1]
        fields = await self.batcher.call("HGETALL", self.keys.group_configs(group))
        settings = ShareSettings.of({to_str(k): to_str(v) for k, v in fields.items()})
        if len(self._settings) > 10_000:
            self._settings.clear()
        self._settings[group] = (now, settings)
        return settings

    async def member_epoch(self, group: str, member_id: str) -> int | None:
        """The member epoch ``member_id`` holds (its last heartbeat's answer), None when it
        is no member: what a client that keeps no epoch of its own (V1) heartbeats with."""
        raw = await self.batcher.call("HGET", self.keys.share_group(group).members, member_id)
        if raw is None:
            return None
        return int(json.loads(to_str(raw)).get("epoch") or 0)

    async def heartbeat(
        self,
        group: str,
        member_id: str,
        member_epoch: int,
        subscribed: list[str] | None,
        client: ShareClient | None = None,
        release_delay_s: float = LEAVE_RELEASE_DELAY_S,
    ) -> HeartbeatResult:
        """ShareGroupHeartbeat: join (epoch 0), leave (-1) or stay; the member's assignment
        by the simple assignor over the members as they are now. A join registers the
        group in the share groups set (ListGroups), beside the script: another slot.
        Members whose session expired have their records released at once, a member that
        leaves after ``release_delay_s`` (its last acknowledgements may be on their way)."""
        settings = await self.settings(group)
        if member_epoch == 0:
            await self.batcher.call("SADD", self.keys.share_groups, group_part(group))
        reply = await self.batcher.call(
            *share_group_heartbeat_call(
                self.keys.share_group(group),
                now_ms=int(time.time() * 1000),
                session_timeout_ms=settings.session_timeout_ms,
                member_id=member_id,
                member_epoch=member_epoch,
                subscribed_topics=subscribed,
                client=client,
            )
        )
        status, epoch = int(reply[0]), int(reply[1])
        gone = departed_members(reply[3]) if len(reply) > 3 else {}
        leaving = gone.pop(member_id, None) if member_epoch == -1 else None
        if gone:
            await self.release_members(group, gone)
        if leaving:
            self._release_later(group, member_id, leaving, release_delay_s)
        if status != HEARTBEAT_OK:
            return HeartbeatResult(status, -1, settings.heartbeat_interval_ms)
        if member_epoch == -1:
            return HeartbeatResult(HEARTBEAT_OK, -1, settings.heartbeat_interval_ms)
        members = {m: list(ts) for m, ts in json.loads(to_str(reply[2])).items()}
        topics = sorted({t for ts in members.values() for t in ts if is_valid_name(t)})
        target = assign(members, await partition_counts(self.batcher, self.keys, topics))
        assigned = target.get(member_id, {})
        return HeartbeatResult(HEARTBEAT_OK, epoch, settings.heartbeat_interval_ms, assigned)

    def _release_later(self, group: str, member: str, topics: list[str], delay_s: float) -> None:
        """Release what ``member`` holds after ``delay_s``, unless it joined again meanwhile
        (a pod that stops first leaves the records to their lock)."""

        async def release() -> None:
            await asyncio.sleep(delay_s)
            members = self.keys.share_group(group).members
            if not await self.batcher.call("HEXISTS", members, member):
                await self.release_members(group, {member: topics})

        task = asyncio.ensure_future(release())
        self._releases.add(task)
        task.add_done_callback(self._released)

    def _released(self, task: asyncio.Task[Any]) -> None:
        self._releases.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("releasing a departed share group member's records failed: %s",
                        task.exception())  # fmt: skip

    async def release_members(self, group: str, gone: dict[str, list[str]]) -> int:
        """Release at once the records in flight of members that left or expired, on every
        partition of the topics they were subscribed to (Kafka gives a departed member's
        acquired records back); the number released."""
        topics = sorted({t for ts in gone.values() for t in ts if is_valid_name(t)})
        counts = await partition_counts(self.batcher, self.keys, topics)
        targets = [
            (member, topic, p)
            for member, subscribed in sorted(gone.items())
            for topic in subscribed
            for p in range(counts.get(topic, 0))
        ]
        return await self.release(group, targets)

    async def release(self, group: str, targets: list[tuple[str, str, int]]) -> int:
        """Release what each (member, topic, partition) of ``targets`` holds, concurrently
        (one script call per partition: the logs are in other slots than the group)."""
        if not targets:
            return 0
        settings = await self.settings(group)
        cgroup = self.keys.share_consumer_group(group)
        calls = [
            share_group_release_call(
                self.keys.partition(topic, p),
                consumer_group=cgroup,
                member_id=member,
                lock_ms=settings.lock_ms,
            )
            for member, topic, p in targets
        ]
        released = await asyncio.gather(*(self.batcher.call(*call) for call in calls))
        return sum(int(n) for n in released)

    async def acquire(
        self,
        group: str,
        member_id: str,
        topic: str,
        partition: int,
        max_records: int,
        max_bytes: int | None = None,
        first: bool = True,
    ) -> list[Acquired]:
        """Hand ``member_id`` up to ``max_records`` records of the share-partition (and, new
        ones, up to about ``max_bytes``: see share_group_acquire_call), sorted by offset."""
        settings = await self.settings(group)
        reply = await self.batcher.call(
            *share_group_acquire_call(
                self.keys.partition(topic, partition),
                consumer_group=self.keys.share_consumer_group(group),
                member_id=member_id,
                settings=settings,
                max_records=max(1, min(max_records, MAX_ACQUIRED)),
                sequence_bits=self.bits,
                max_bytes=max_bytes,
                first=first,
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
