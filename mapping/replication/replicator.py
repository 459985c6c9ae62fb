"""The built-in replicator: pods play the follower replicas so acks=all works out of the box.

Ownership. Partitions are spread over ``shards`` lease keys (crc32 of "<topic>:<p>" modulo
``shards``); a pod plays every follower replica of the partitions in the shards it owns. A
lease is ``<prefix>:replicator:{leases}:shard:<n>`` holding the owner's pod id, taken with
SET NX PX and renewed by its owner only (compare-and-set in replicator/tick.lua). Pods
heartbeat in ``<prefix>:replicator:{leases}:pods`` so each takes about its fair share
(ceil(shards / live pods)) and gives back the rest. When an owner dies its leases expire and
the others take them over on their next tick (every lease/3): takeover within about
lease + lease/3. One tick is one script call, so an idle pod costs 2 calls per tick (tick +
SMEMBERS of the topics set), whatever the number of partitions.

Waking. No polling: the pod's single pub/sub connection (shared with the acks=all waiters)
subscribes to the "appended" channel of each owned partition; partition/produce.lua publishes there
when a follower had everything before the append (an idle follower needs waking). Woken
partitions are fetched together (one pipeline through the batcher); a partition whose copy
stopped at the per-call bound is fetched again at once, so a busy partition needs no
notifications. New topics are announced on ``<prefix>:topics:created``.

Failover. A fetch that ran on a primary which then failed over (or on a Redis that
restarted from a slightly old AOF) may be lost while the appends before it were kept: the
followers are behind again, and appends no longer wake anyone. So after any failed call,
after a pub/sub reconnect, and when Redis changed under the pod (the cluster's epoch grew,
or the server's run id changed, checked at each tick), every played partition is fetched
again. None of the loops ever ends for Redis trouble (mapping/connection/resilient.py).

Two owners at once (a paused pod whose lease expired) are harmless: REPLICA_FETCH copies
from the replica stream's own last entry, so concurrent fetches are idempotent.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from functools import partial

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mapping.connection import resilient, scripts
from mapping.connection.pubsub import Subscriber
from mapping.core.errors import UNKNOWN_TOPIC, BrokerError
from mapping.partition.partition_scripts import DEFAULT_MAX_COPY, LATEST_OFFSET
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics

log = logging.getLogger(__name__)

PartitionId = tuple[str, int]

REPLICATOR_TICK = scripts.load("replicator/tick")


def replicator_tick_call(keys: list[str], pod_id: str, lease_ms: int, release: bool) -> tuple:
    """replicator/tick.lua on ``keys``: the pods set, then the lease keys (one hash tag);
    ``release``: give every lease up."""
    return REPLICATOR_TICK.command(keys, [pod_id, lease_ms, "1" if release else "0"])


def shard_of(topic: str, partition: int, shards: int) -> int:
    return zlib.crc32(f"{topic}:{partition}".encode()) % shards


class Replicator:
    def __init__(
        self,
        client: Redis | RedisCluster,
        topics: Topics,
        partitions: Partitions,
        subscriber: Subscriber,
        *,
        pod_id: str,
        lease_ms: int,
        shards: int = 16,
        max_copy: int = DEFAULT_MAX_COPY,
    ) -> None:
        self.client = client
        self.topics = topics
        self.partitions = partitions
        self.subscriber = subscriber
        self.pod_id = pod_id
        self.lease_ms = lease_ms
        self.shards = shards
        self.max_copy = max_copy
        self.owned: set[int] = set()
        self._keys = partitions.keys.replicator_leases(shards)
        self._configs: dict[str, TopicConfig] = {}
        self._partitions: dict[PartitionId, TopicConfig] = {}  # played by this pod
        self._dirty: set[PartitionId] = set()
        self._wake = asyncio.Event()
        self._discover = asyncio.Event()
        self._tasks: set[asyncio.Task] = set()
        self._epoch: int | str | None = None  # the Redis seen at the last tick
        self._resync = False  # a call failed: fetch every partition once Redis answers
        self.fetches = 0

    async def run(self) -> None:
        self.subscriber.on_reconnect(self._mark_all_dirty)
        try:
            # Neither ever ends for Redis trouble (nor for a bug): the pod goes on.
            await resilient.together(
                partial(
                    resilient.every,
                    "replicator tick",
                    self._lease_step,
                    self.lease_ms / 3000,
                    wait=self._discovered,
                    on_failure=self._trouble,
                ),
                partial(resilient.supervised, "replicator fetches", self._fetch_loop),
                partial(
                    self.subscriber.subscribe,
                    self.topics.keys.topics_channel,
                    lambda _: self._discover.set(),
                ),
            )
        finally:
            await self._release()

    async def _tick(self, release: bool = False) -> set[int]:
        reply = await self.partitions.batcher.call(
            *replicator_tick_call(self._keys, self.pod_id, self.lease_ms, release)
        )
        return {int(n) for n in reply}

    async def _release(self) -> None:
        """On a clean stop, give the leases back so another pod takes over at once."""
        if not self.owned:
            return
        release = scripts.as_eval(
            replicator_tick_call(self._keys, self.pod_id, self.lease_ms, True)
        )
        try:
            # Shielded: this runs while the pod's tasks are being cancelled.
            with anyio.move_on_after(1.0, shield=True):
                await self.client.execute_command(*release)
        except Exception as exc:
            log.debug("could not release replicator leases: %s", exc)

    async def _lease_step(self) -> None:
        self._discover.clear()
        owned = await self._tick()
        if owned != self.owned:
            log.info("replicator %s owns shards %s", self.pod_id, sorted(owned))
        self.owned = owned
        await self._sync()
        if await self._failed_over() or self._resync:
            # A fetch that ran on a primary which then failed over may be lost with it:
            # its followers are behind again, and appends wake only followers that had
            # everything (lib/append.lua), so nothing would wake them. Fetch them all again.
            self._resync = False
            self._mark_all_dirty()

    async def _discovered(self, seconds: float) -> None:
        """Until the next tick: ``seconds``, or sooner when a topic was created."""
        try:
            async with asyncio.timeout(seconds):
                await self._discover.wait()
        except TimeoutError:
            pass

    def _trouble(self, _: BaseException) -> None:
        """Redis failed a call: once it answers again, every partition is fetched again
        (whatever happened meanwhile, a failover or a restart, may have lost fetches)."""
        self._resync = True

    async def _failed_over(self) -> bool:
        """Whether Redis changed under the pod since the last tick: on a cluster the
        cluster's epoch grew (every failover raises it); else the server's run id changed
        (a restart, or Sentinel's failover to another server). False on the first call."""
        if isinstance(self.client, RedisCluster):
            info = await self.client.cluster_info()
            epoch: int | str = int(info.get("cluster_current_epoch", 0))
            # Nodes learn of a new epoch by gossip: one that has not yet is no change.
            changed = self._epoch is not None and epoch > self._epoch  # type: ignore[operator]
            if self._epoch is None or changed:
                self._epoch = epoch
            return changed
        info = await self.client.info("server")
        epoch = str(info.get("run_id", ""))
        changed = self._epoch is not None and epoch != self._epoch
        self._epoch = epoch
        return changed

    async def _sync(self) -> None:
        """Play exactly the partitions of the owned shards (topics with RF > 1)."""
        names = await self.topics.names()
        for gone in [n for n in self._configs if n not in names]:
            del self._configs[gone]
        missing = [n for n in names if n not in self._configs]
        for config in await asyncio.gather(*(self.topics.lookup(n) for n in missing)):
            if config is not None:  # None: deleted since the set was read
                self._configs[config.name] = config
        wanted: dict[PartitionId, TopicConfig] = {}
        for name in names:
            config = self._configs.get(name)
            if config is None:
                continue
            if config.replication_factor < 2:
                continue
            for p in range(config.partitions):
                if shard_of(name, p, self.shards) in self.owned:
                    wanted[(name, p)] = config
        for pid in [pid for pid in self._partitions if pid not in wanted]:
            del self._partitions[pid]
            self._dirty.discard(pid)
            await self.subscriber.unsubscribe(self._channel(pid))
        new = [pid for pid in wanted if pid not in self._partitions]
        for pid in new:
            self._partitions[pid] = wanted[pid]
        if new:
            # Not awaited here: lease renewal must not wait on the pub/sub connection.
            task = asyncio.ensure_future(self._start(new))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start(self, new: list[PartitionId]) -> None:
        # Subscribed first, then fetched once: no append between the two is missed.
        await asyncio.gather(
            *(self.subscriber.subscribe(self._channel(pid), self._waker(pid)) for pid in new)
        )
        self._dirty.update(pid for pid in new if pid in self._partitions)
        self._wake.set()

    def forget(self, topic: str) -> None:
        """Topic ``topic`` was deleted (it may come back with other settings): stop playing
        its partitions now and read its settings again if it reappears."""
        self._configs.pop(topic, None)
        for pid in [pid for pid in self._partitions if pid[0] == topic]:
            del self._partitions[pid]
            self._dirty.discard(pid)
            asyncio.ensure_future(self.subscriber.unsubscribe(self._channel(pid)))
        self._discover.set()

    def reread(self, topic: str) -> None:
        """Topic ``topic`` got more partitions: read its settings again and play the new
        partitions too (the ones played go on undisturbed)."""
        self._configs.pop(topic, None)
        self._discover.set()

    def _channel(self, pid: PartitionId) -> str:
        return self.partitions.keys.partition(*pid).appended_channel

    def _waker(self, pid: PartitionId):  # noqa: ANN202
        def wake(_: bytes) -> None:
            if pid in self._partitions:
                self._dirty.add(pid)
                self._wake.set()

        return wake

    def _mark_all_dirty(self) -> None:
        self._dirty.update(self._partitions)
        self._wake.set()

    async def _fetch_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = [pid for pid in self._dirty if pid in self._partitions]
            self._dirty.clear()
            if not batch:
                continue
            results = await asyncio.gather(
                *(self._fetch(pid) for pid in batch), return_exceptions=True
            )
            failed = []
            for pid, result in zip(batch, results, strict=True):
                if result is True:
                    self._dirty.add(pid)  # the copy bound stopped it: more to copy
                elif isinstance(result, BaseException):
                    if isinstance(result, asyncio.CancelledError):
                        raise result
                    failed.append(pid)
                    log.warning("replica fetch of %s/%d failed: %s", *pid, result)
            if failed:
                self._resync = True
                await asyncio.sleep(0.5)  # Redis trouble: retry, not in a tight loop
                self._dirty.update(failed)
            if self._dirty:
                self._wake.set()

    async def _fetch(self, pid: PartitionId) -> bool:
        """Bring every follower of the partition up to the log end; True if more is left."""
        config = self._partitions[pid]
        try:
            results = await asyncio.gather(
                *(
                    self.partitions.replica_fetch(config, pid[1], r, LATEST_OFFSET, self.max_copy)
                    for r in range(1, config.replication_factor)
                )
            )
        except BrokerError as exc:
            if "not leader" in exc.message:
                return False  # a follower partition: set_role to leader wakes us again
            if exc.code == UNKNOWN_TOPIC:
                return False  # deleted: the next lease tick stops playing it
            raise
        self.fetches += 1
        return not all(r.complete for r in results)
