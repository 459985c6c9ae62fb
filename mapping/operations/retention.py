"""Topic retention: trim old records by time and size, never past what groups still need.
(The same task then compacts the compacted topics: mapping/partition/compaction.py.)

A topic's retention lives in its hash (``retention_ms``, ``retention_bytes``,
``retention_ignore_groups``; -1 / absent: unlimited), set with ``adapter topic create`` or
``adapter topic alter``. One pod at a time enforces it (a lease, taken and renewed with the
replicator's lease script, so a dead owner is replaced within a few intervals): every
``interval_ms`` it runs ``partition/retention_trim.lua`` on each partition of each topic with a
retention. The script trims only committed records (at most hw) and, unless the topic says
``retention_ignore_groups``, only below the slowest committed offset of the topic's groups
on that partition. A partition a group has never committed on is not held by that group
(as in Kafka, where retention ignores groups altogether: a consumer starting there may find
the oldest records gone). Before trimming, the same run applies offsets retention
(``mapping.group.deletion.expire_groups``): a group with no member and no commit for
``offsets_retention_ms`` is deleted, so a group that went away cannot hold a topic forever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis

from mapping.connection import resilient, scripts
from mapping.core.keys import parse_group_entry
from mapping.group.deletion import expire_groups
from mapping.group.offsets_mirror import OffsetsMirror
from mapping.operations.inspection import Retention, retention_of
from mapping.partition.compaction import CompactionResult, compact_all
from mapping.partition.partition_scripts import PartitionHead
from mapping.partition.partitions import Partitions
from mapping.partition.segments import roll_partition
from mapping.replication.replicator import replicator_tick_call
from mapping.topic.topic_rules import compaction_of
from mapping.topic.topics import Topics

log = logging.getLogger(__name__)

# Entries one script call trims at most, so one call never holds Redis for long.
MAX_TRIM_PER_CALL = 10_000

PARTITION_RETENTION_TRIM = scripts.load("partition/retention_trim")


def partition_retention_trim_call(
    head: PartitionHead, retention_ms: int, retention_bytes: int, floor: int, max_trim: int
) -> tuple:
    """partition/retention_trim.lua (-1: no limit, no floor), the replica streams too."""
    args = [retention_ms, retention_bytes, floor, max_trim]
    keys = [head.keys.segments, *head.replicas()]
    return head.command(PARTITION_RETENTION_TRIM, keys, args)


@dataclass(frozen=True, slots=True)
class TrimResult:
    topic: str
    partition: int
    trimmed: int
    first_kept: int  # the first offset left in the log; -1: empty


async def retention(topics: Topics, topic: str) -> Retention:
    # the topic's own settings over the cluster-wide defaults (log.retention.ms ...)
    return retention_of({**dict(topics.broker_defaults), **await topics.read_settings(topic)})


async def group_floors(topics: Topics, topic: str, partitions: int) -> dict[int, int]:
    """Per partition, the slowest committed offset of the topic's groups (absent: no group
    has committed on it, nothing holds it)."""
    pairs = await topics.batcher.call("SMEMBERS", topics.keys.groups)
    groups = []
    for raw in pairs:
        pair = parse_group_entry(raw)
        if pair is not None and pair[1] == topic:
            groups.append(pair[0])
    offsets = await asyncio.gather(
        *(topics.batcher.call("HGETALL", topics.keys.group(g, topic).offsets) for g in groups)
    )
    floors: dict[int, int] = {}
    for committed in offsets:
        for field, value in committed.items():
            p, position = int(field), int(value)
            if 0 <= p < partitions:
                floors[p] = min(floors.get(p, position), position)
    return floors


async def enforce_topic(partitions: Partitions, topic: str) -> list[TrimResult]:
    """Apply the topic's retention to each partition once (one script call each)."""
    topics = partitions.topics
    settings = await retention(topics, topic)
    if not settings.enabled:
        return []
    config = await topics.lookup(topic)
    if config is None:  # deleted meanwhile
        return []
    if not compaction_of(config).delete:  # cleanup.policy=compact: Kafka trims nothing
        return []
    floors = {} if settings.ignore_groups else await group_floors(topics, topic, config.partitions)
    if settings.ms >= 0:
        # time retention cuts at roll points: find them up to the log ends first
        for p in range(config.partitions):
            await roll_partition(partitions, config, p)
    calls = []
    for p in range(config.partitions):
        head = partitions.head(config, p)
        floor = floors.get(p, -1)
        call = partition_retention_trim_call(
            head, settings.ms, settings.bytes, floor, MAX_TRIM_PER_CALL
        )
        calls.append(partitions.batcher.call(*call))
    replies = await asyncio.gather(*calls)
    return [TrimResult(topic, p, int(r[0]), int(r[1])) for p, r in enumerate(replies)]


async def enforce_all(partitions: Partitions) -> list[TrimResult]:
    results: list[TrimResult] = []
    for topic in await partitions.topics.names():
        results.extend(await enforce_topic(partitions, topic))
    return results


class RetentionTask:
    """The pod's periodic retention run, by whichever pod holds the lease."""

    def __init__(
        self,
        partitions: Partitions,
        client: Redis,
        *,
        pod_id: str,
        interval_ms: int,
        offsets_retention_ms: int = 0,
        session_timeout_ms: int = 10_000,
    ) -> None:
        """``offsets_retention_ms``: groups idle this long expire (0: never)."""
        self.partitions = partitions
        self.client = client  # for the release at shutdown, when the batcher has stopped
        self.pod_id = pod_id
        self.interval_ms = interval_ms
        self.offsets_retention_ms = offsets_retention_ms
        self.session_timeout_ms = session_timeout_ms
        self.owner = False
        self.runs = 0
        self.compacted = 0  # records compaction removed while this pod held the lease
        self.on_compacted: Callable[[CompactionResult], None] | None = None  # metrics
        # expired offsets' tombstones go to __consumer_offsets (mapping/group/offsets_mirror.py)
        self.mirror: OffsetsMirror | None = None

    async def run(self) -> None:
        if self.interval_ms <= 0:
            return
        try:
            await resilient.every("retention run", self.tick, self.interval_ms / 1000)
        finally:
            if self.owner:
                await self._release()

    async def tick(self) -> None:
        owner = bool(await self._lease(release=False))
        if owner != self.owner:
            log.info("retention owner: %s", "this pod" if owner else "another pod")
        self.owner = owner
        if owner:
            if self.offsets_retention_ms > 0:
                expired = await expire_groups(
                    self.partitions,
                    retention_ms=self.offsets_retention_ms,
                    session_timeout_ms=self.session_timeout_ms,
                    mirror=self.mirror,
                )
                if self.mirror is not None:
                    await self.mirror.settle()
                for group, topic in expired:
                    log.info("offsets retention: group %s of topic %s expired", group, topic)
            trimmed = [r for r in await enforce_all(self.partitions) if r.trimmed]
            # compaction after retention (compact,delete: both), under the same lease
            compacted = await compact_all(self.partitions)
            self.runs += 1
            for r in trimmed:
                log.info("retention trimmed %d record(s) of %s/%d; first kept offset %d",
                         r.trimmed, r.topic, r.partition, r.first_kept)  # fmt: skip
            for c in compacted:
                self.compacted += c.removed + c.tombstones_removed
                if self.on_compacted is not None:
                    self.on_compacted(c)
                if c.removed or c.tombstones_removed:
                    log.info("compaction removed %d superseded record(s) and %d tombstone(s) "
                             "of %s/%d", c.removed, c.tombstones_removed, c.topic,
                             c.partition)  # fmt: skip

    def _lease_call(self, release: bool) -> tuple:
        # The replicator's lease script with one shard: heartbeat, take it when free, renew.
        keys = self.partitions.keys.retention_lease
        return replicator_tick_call(keys, self.pod_id, max(3 * self.interval_ms, 1000), release)

    async def _lease(self, release: bool) -> list:
        return await self.partitions.batcher.call(*self._lease_call(release))

    async def _release(self) -> None:
        """On a clean stop, give the lease back so another pod takes over at once."""
        try:
            # Shielded: this runs while the pod's task group is being cancelled.
            with anyio.move_on_after(1.0, shield=True):
                await self.client.execute_command(*scripts.as_eval(self._lease_call(True)))
        except Exception as exc:
            log.debug("could not release the retention lease: %s", exc)
