"""The offsets mirror: every committed offset, and every deletion of one, appended to the
read-only topic ``__consumer_offsets`` in Kafka's record format (mapping/group/offsets_topic.py),
so tools that read Kafka's offsets topic (Burrow) see the groups' commits.

The committed offsets themselves stay where they are (mapping/group/groups.py and
mapping/kafka_group/: one hash per (group, topic)); the mirror is derived from them and
written after them, never instead. A group's keys and the mirror's partition are two slots
(Redis Cluster), so the two cannot be one script call: the mirror is best effort after the
commit. What may happen, and what keeps it right:

- **Order.** Every record carries the time of its commit or deletion (Redis' clock, read by
  the script that made it) as its CreateTime; ``offsets_topic/append.lua`` leaves out a
  record older than the key's latest one in the log, so a pod that mirrors late never puts
  an older commit over a newer one another pod mirrored.
- **Loss.** A pod that dies between a commit and its mirroring (or while Redis is away:
  failed appends are retried every ``COALESCE_S``) leaves the mirror one commit behind for
  that partition until its next commit. A pod stopped with SIGTERM writes what it holds.
- **Cost.** V1 COMMITs are hot (a consumer may commit after every CONSUME): the pod keeps
  the latest of each (group, topic, partition) and writes them at most once per
  ``COALESCE_S``, one script call per mirror partition. Kafka commits, transactional ones
  and deletions are written at once (in the next pipeline), as are the records of the
  command line, which waits for them, and the Spark connector's (``mirror_sync``).

Pods started with ``--offsets-topic`` (the default) make the topic at start (50 partitions,
Kafka's ``offsets.topic.num.partitions``; ``cleanup.policy=compact``; one replica: it is
derived data, its hw follows its appends) and, when they made it, fill it from the
offsets already committed. The command line mirrors its deletions into the topic when it
exists and never makes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import anyio
from redis.asyncio import Redis

from mapping.connection import scripts
from mapping.connection.resilient import log_failure
from mapping.connection.scripts import call_sync
from mapping.core.codec import DEFAULT_SEQUENCE_BITS, to_str
from mapping.core.keys import Keys, epoch_field, parse_group_entry
from mapping.group.offsets_topic import (
    NO_LEADER_EPOCH,
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    encode_key,
    encode_value,
    partition_for,
)
from mapping.partition.partition_scripts import PartitionHead, compaction_keys
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig, config_field
from mapping.topic.topics import ensure_topic_sync

log = logging.getLogger(__name__)

OFFSETS_TOPIC_APPEND = scripts.load("offsets_topic/append")

# How long a V1 commit may wait to be mirrored: the latest of each partition's commits in
# that time is written, once.
COALESCE_S = 1.0
# Groups read per step when the mirror is filled from the committed offsets.
SEED_BATCH = 200
CLEANUP_POLICY = config_field("cleanup.policy")
# The ISR lag bound a pod-less writer passes (the mirror has one replica: none lags)
REPLICA_LAG_MAX_MS = 10_000

# The mirror's key: (group, topic, partition) of a committed offset.
MirrorKey = tuple[str, str, int]


class Mirrored(NamedTuple):
    """What the mirror records of one committed offset; ``offset`` None: it was deleted.
    (A tuple: V1 COMMIT's hot path notes a plain one, a third of the cost.)"""

    offset: int | None
    time_ms: int  # when it was committed or deleted (Redis' clock)
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


# A record noted: a ``Mirrored`` or the same four fields as a plain tuple.
Noted = tuple[int | None, int, int, str]


def offsets_topic_append_call(
    head: PartitionHead, items: list[bytes | int], compaction: list[str]
) -> tuple:
    """offsets_topic/append.lua: ``items`` are key, value (b"": a tombstone), time, ...;
    ``compaction``: the partition's compaction keys (on a compacted mirror)."""
    return head.command(OFFSETS_TOPIC_APPEND, compaction, items)


def append_calls(
    config: TopicConfig, batch: dict[MirrorKey, Noted], head: Callable[[int], PartitionHead]
) -> list[tuple[int, tuple]]:
    """(mirror partition, its offsets_topic/append.lua call) for ``batch``; ``head``: a
    partition's script head."""
    items: dict[int, list[bytes | int]] = {}
    for key, mirrored in batch.items():
        try:
            record = _record(key, mirrored)
        except ValueError as exc:  # a name too long for Kafka's format: not mirrored
            log.warning("not mirrored into %s: %s %s", OFFSETS_TOPIC, key[:2], exc)
            continue
        items.setdefault(mirror_partition(config, key), []).extend(record)
    calls = []
    for partition, args in sorted(items.items()):
        partition_head = head(partition)
        compaction = compaction_keys(config, partition_head.keys)
        calls.append((partition, offsets_topic_append_call(partition_head, args, compaction)))
    return calls


def mirror_sync(client: Any, keys: Keys, batch: dict[MirrorKey, Noted]) -> int:
    """Write ``batch`` into the mirror, if there is one, on a synchronous client: writers
    of committed offsets that run without a pod (the Spark connector); the records appended."""
    ensured = ensure_topic_sync(client, keys, OFFSETS_TOPIC, 1, 1, 1, create=False)
    if ensured is None or not batch:
        return 0
    config = ensured.config
    bits = int(client.hget(keys.meta, "sequence_bits") or DEFAULT_SEQUENCE_BITS)

    def head(partition: int) -> PartitionHead:
        pk = keys.partition(OFFSETS_TOPIC, partition)
        return PartitionHead(pk, bits, config.replication_factor, REPLICA_LAG_MAX_MS)

    return sum(int(call_sync(client, call)[1]) for _, call in append_calls(config, batch, head))


def mirror_partition(config: TopicConfig, key: MirrorKey) -> int:
    """The mirror partition of a committed offset: its group's (Kafka's rule)."""
    return partition_for(key[0], config.partitions)


def _record(key: MirrorKey, mirrored: Noted) -> list[bytes | int]:
    """The script's three items of one record."""
    group, topic, partition = key
    offset, time_ms, leader_epoch, metadata = mirrored
    value = b"" if offset is None else encode_value(offset, leader_epoch, metadata, time_ms)
    return [encode_key(group, topic, partition), value, time_ms]


class OffsetsMirror:
    def __init__(
        self, partitions: Partitions, client: Redis, *, window_s: float = COALESCE_S
    ) -> None:
        """``client``: for the last write at shutdown, when the pod's pipeline has
        stopped."""
        self.partitions = partitions
        self.client = client
        # make the topic when it is missing: from ``run`` on (a pod); the command line, which
        # does not run it, writes only into a mirror that exists
        self.create = False
        self.window_s = window_s
        self._pending: dict[MirrorKey, Noted] = {}
        self._urgent = False  # something noted must not wait for the window
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._task: asyncio.Task[None] | None = None
        self.appended = 0  # records this pod appended (older ones left out not counted)

    # --- what is mirrored ------------------------------------------------------------------

    def note_v1_commit(
        self, group: str, topic: str, partition: int, offset: int, time_ms: int
    ) -> None:
        """A V1 COMMIT (the hot path): written within ``window_s``, the latest one wins."""
        self._pending[(group, topic, partition)] = (offset, time_ms, NO_LEADER_EPOCH, "")
        if self._timer is None and self._task is None:
            self._request(self.window_s)

    def note_commits(
        self, group: str, topic: str, written: dict[int, tuple[int, str, int]], time_ms: int
    ) -> None:
        """Kafka commits of one (group, topic): partition -> (offset, metadata, leader
        epoch), written in the next pipeline."""
        for partition, (offset, metadata, epoch) in written.items():
            self._pending[(group, topic, partition)] = Mirrored(offset, time_ms, epoch, metadata)
        self._soon()

    def note_deleted(self, group: str, topic: str, partitions: list[int], time_ms: int) -> None:
        """Offsets deleted: one tombstone each, written in the next pipeline."""
        for partition in partitions:
            self._pending[(group, topic, partition)] = Mirrored(None, time_ms)
        self._soon()

    # --- when it is written ----------------------------------------------------------------

    def _soon(self) -> None:
        self._urgent = True
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # (noted outside a loop: the next flush writes it)
            return
        self._request(0.0)

    def _request(self, delay: float) -> None:
        """A flush in ``delay`` seconds at the latest (one scheduled at a time)."""
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        if self._timer is not None:
            if due >= self._due:
                return
            self._timer.cancel()
        self._due = due
        self._timer = loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._task is None:  # else the running flush looks again when it ends
            self._task = asyncio.ensure_future(self._flush_in_background())

    async def _flush_in_background(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # kept to be retried (flush put it back)
            log_failure("mirroring committed offsets into __consumer_offsets", exc)
        finally:
            self._task = None
            if self._pending:
                self._request(0.0 if self._urgent else self.window_s)

    async def flush(self) -> int:
        """Write everything noted; the records appended. On a failure what was not written
        is kept (unless a newer note replaced it) for the next flush, and the error raised."""
        if not self._pending:
            return 0
        batch, self._pending, self._urgent = self._pending, {}, False
        try:
            config = await self.topic()
            if config is None:  # no mirror topic, and this one makes none: nothing to do
                return 0
            calls = self._calls(config, batch)
            replies = await asyncio.gather(
                *(self.partitions.script_reply(config, call) for _, call in calls),
                return_exceptions=True,
            )
        except BaseException:
            self._keep(batch)
            raise
        appended, failure = 0, None
        for (partition, _), reply in zip(calls, replies, strict=True):
            if isinstance(reply, BaseException):
                failure = reply
                self._keep(
                    {k: v for k, v in batch.items() if mirror_partition(config, k) == partition}
                )
            else:
                appended += int(reply[1])
                if self.partitions.durable is not None:
                    self.partitions.durable.note(config, partition)
        self.appended += appended
        if failure is not None:
            raise failure
        return appended

    async def settle(self) -> None:
        """Write what is noted now (a caller that waits for its records: the command line,
        deletions); a failure is logged, never raised, and retried within ``window_s``."""
        try:
            await self.flush()
        except Exception as exc:
            log_failure("mirroring committed offsets into __consumer_offsets", exc)
            if self._pending:
                self._request(self.window_s)

    def _keep(self, batch: dict[MirrorKey, Noted]) -> None:
        """Put back what a failed flush did not write, under what was noted since."""
        for key, mirrored in batch.items():
            self._pending.setdefault(key, mirrored)

    def _calls(self, config: TopicConfig, batch: dict[MirrorKey, Noted]) -> list[tuple]:
        return append_calls(config, batch, partial(self.partitions.head, config))

    # --- the topic -------------------------------------------------------------------------

    async def topic(self) -> TopicConfig | None:
        """The mirror topic's settings; made now when missing and ``create`` (None: missing
        and not made)."""
        topics = self.partitions.topics
        config = topics.cache.known(OFFSETS_TOPIC) or await topics.lookup(OFFSETS_TOPIC)
        if config is None and self.create:
            config = await self.ensure()
        return config

    async def ensure(self) -> TopicConfig:
        """Make the mirror topic unless it exists (compacted; filled from the committed
        offsets when made now); its settings."""
        topics = self.partitions.topics
        config, created = await topics.create(OFFSETS_TOPIC, OFFSETS_TOPIC_PARTITIONS, 1, 1)
        # (also when a pod that made it stopped before setting it; an operator's own
        # cleanup.policy stays)
        if config.config(CLEANUP_POLICY) is None:
            await topics.alter_configs(OFFSETS_TOPIC, {CLEANUP_POLICY: "compact"})
        topics.cache.forget(OFFSETS_TOPIC)
        config = await topics.lookup(OFFSETS_TOPIC) or config
        if created:
            log.info("made %s: the committed offsets are mirrored there", OFFSETS_TOPIC)
            await self.seed()
        return config

    async def seed(self) -> int:
        """Note every offset committed now (the groups set's groups), each with its (group,
        topic)'s last activity as its time, and write them; the records appended."""
        call = self.partitions.batcher.call
        keys = self.partitions.keys
        pairs = [p for p in map(parse_group_entry, await call("SMEMBERS", keys.groups)) if p]
        seconds, micros = await call("TIME")
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        for start in range(0, len(pairs), SEED_BATCH):
            chunk = pairs[start : start + SEED_BATCH]
            found = await asyncio.gather(*(self._committed(g, t) for g, t in chunk))
            for (group, topic), (offsets, details, active) in zip(chunk, found, strict=True):
                time_ms = int(active) if active is not None else now_ms
                for field, offset in offsets.items():
                    p = to_str(field)
                    epoch = details.get(epoch_field(p).encode())
                    self._pending.setdefault(
                        (group, topic, int(p)),
                        Mirrored(
                            int(offset),
                            time_ms,
                            int(epoch) if epoch is not None else NO_LEADER_EPOCH,
                            to_str(details.get(field, b"")),
                        ),
                    )
        return await self.flush()

    async def _committed(self, group: str, topic: str) -> tuple[dict, dict, Any]:
        gk = self.partitions.keys.group(group, topic)
        call = self.partitions.batcher.call
        return await asyncio.gather(
            call("HGETALL", gk.offsets),
            call("HGETALL", gk.offset_metadata),
            call("HGET", gk.meta, "active_ms"),
        )

    # --- the pod's part --------------------------------------------------------------------

    async def run(self) -> None:
        """The pod's background part: make the topic (retried while Redis is away); at the
        end (the pod stops), write what is still noted."""
        self.create = True
        try:
            while True:
                try:
                    await self.topic()
                    break
                except Exception as exc:  # (never the pod's end: resilient.py's rule)
                    log_failure(f"making {OFFSETS_TOPIC}", exc)
                    await asyncio.sleep(self.window_s)
            await asyncio.Event().wait()  # until cancelled
        finally:
            await self._last_flush()

    async def _last_flush(self) -> None:
        """Write what is noted straight on the client: the pipeline stops with the pod."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        config = self.partitions.topics.cache.known(OFFSETS_TOPIC)
        if not self._pending or config is None:
            return
        batch, self._pending = self._pending, {}
        try:
            with anyio.move_on_after(1.0, shield=True):
                for _, call in self._calls(config, batch):
                    await self.client.execute_command(*scripts.as_eval(call))
        except Exception as exc:
            log.warning("could not mirror the last commits into %s: %s", OFFSETS_TOPIC, exc)
