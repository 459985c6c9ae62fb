"""``--redis-wait-replicas N``: nothing served or acknowledged that a failover can take back.

Redis replicates asynchronously, so a promoted replica may lack the primary's last writes.
With the flag set:

- acks=all, commits and group joins/syncs answer only after a ``WAIT`` round reached N
  Redis replicas;
- readers (V1 CONSUME, Kafka Fetch/ListOffsets) see hw only up to the partition's
  ``durable_hw`` (``readable_hw`` in lib/partition.lua): a log end the replicas are known to have.

One round serves everyone waiting meanwhile: it reads the log end of every partition noted
since the last round (appended to, read at its end, or acked), then writes a probe key and runs
``WAIT`` on that same connection (Redis replicates in order: replicas that acknowledged the
probe have every earlier write, those log ends included), then stores each log end as
``durable_hw`` (partition/durable_mark.lua, never lowered). Rounds run one at a time, so their
cost is one ``WAIT`` per round for the whole pod, not one per request. A round with no waiter and no
partition behind its log end sends no ``WAIT`` at all.

On Redis Cluster ``WAIT`` covers the node it runs on: each primary has its own rounds (a
``_Lane``), its probe key hash-tagged onto it, so a node whose replica lags holds back only
its own partitions' acks and readers. A commit waits for every primary (the group's keys
and the offsets may be on any).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import AskError, RedisError

from mapping.connection import scripts
from mapping.core.errors import REPLICATION_TIMEOUT, BrokerError
from mapping.core.keys import PartitionKeys
from mapping.partition.partitions import Partitions
from mapping.replication.durable_reads import probe_and_wait
from mapping.topic.topic_config import TopicConfig

log = logging.getLogger(__name__)

# After a failed round with no waiter (Redis down): a pause, so readers cannot make it spin.
RETRY_PAUSE_S = 0.2
# After a failover moved a wait's probe slot twice: the pause before the slot map is read
# again (the nodes learn of a failover by gossip, so one read right after it may find the
# map as it was).
MAP_RETRY_PAUSE_S = 0.1

PARTITION_DURABLE_MARK = scripts.load("partition/durable_mark")


def partition_durable_mark_call(keys: PartitionKeys, log_end: int) -> tuple:
    """partition/durable_mark.lua: the Redis replicas have the log up to ``log_end``."""
    return PARTITION_DURABLE_MARK.command([keys.state, keys.hw_channel], [log_end])


@dataclass(frozen=True, slots=True)
class _Behind:
    """A partition whose log end is past its durable_hw, as a round read it."""

    key: tuple[str, int]
    config: TopicConfig
    keys: PartitionKeys
    end: int


class _Lane:
    """The rounds of one Redis node: one at a time, each shared by all who wait meanwhile."""

    def __init__(self, owner: DurableRounds, node: ClusterNode | None) -> None:
        self.owner = owner
        self.node = node  # None: the single Redis (or Sentinel primary)
        self._noted: dict[tuple[str, int], TopicConfig] = {}
        self._next: asyncio.Future[int] | None = None
        self._running = False

    def note(self, config: TopicConfig, partition: int) -> None:
        self._noted[(config.name, partition)] = config
        self._start()

    async def wait(self, deadline: float) -> int:
        """The replicas a round that started after this call reached (-1: none in time)."""
        loop = asyncio.get_running_loop()
        if self._next is None:
            self._next = loop.create_future()
        future = self._next
        self._start()
        try:
            async with asyncio.timeout_at(deadline):
                return await asyncio.shield(future)
        except TimeoutError:
            return -1

    def _start(self) -> None:
        if not self._running:
            self._running = True
            asyncio.ensure_future(self._rounds())

    async def _rounds(self) -> None:
        try:
            while self._next is not None or self._noted:
                future, self._next = self._next, None
                noted, self._noted = self._noted, {}
                try:
                    replicas = await self._round(noted, future is not None)
                except Exception as exc:
                    if future is not None:
                        future.set_exception(exc)
                        future.exception()  # retrieved: its waiters may all have timed out
                    else:
                        log.warning("redis WAIT round failed: %s", exc)
                        await asyncio.sleep(RETRY_PAUSE_S)
                    continue
                if future is not None:
                    future.set_result(replicas)
        finally:
            self._running = False

    async def _round(self, noted: dict[tuple[str, int], TopicConfig], must_wait: bool) -> int:
        """``must_wait``: someone waits on this round, so WAIT runs even with nothing behind."""
        owner = self.owner
        partitions = owner.partitions
        behind: list[_Behind] = []
        if noted:
            states = [partitions.keys.partition(name, p) for name, p in noted]
            replies = await asyncio.gather(
                *(
                    partitions.batcher.submit("HMGET", pk.state, "log_end", "durable_hw")
                    for pk in states
                )
            )
            for (key, config), pk, (log_end, mark) in zip(
                noted.items(), states, replies, strict=True
            ):
                end = int(log_end) if log_end is not None else -1
                if end > (int(mark) if mark is not None else -1):
                    behind.append(_Behind(key, config, pk, end))
        if not behind and not must_wait:
            return owner.replicas
        stored = False
        try:
            replicas = await self._wait()
            if replicas >= owner.replicas and behind:
                await asyncio.gather(
                    *(
                        partitions.batcher.submit(*partition_durable_mark_call(b.keys, b.end))
                        for b in behind
                    )
                )
            stored = replicas >= owner.replicas
        finally:
            if not stored:  # the marks wait for a round that reaches the replicas
                for b in behind:
                    self._noted.setdefault(b.key, b.config)
        return replicas

    async def _wait(self) -> int:
        """INCR the probe key, then WAIT, on one connection of this lane's node."""
        owner = self.owner
        probe = owner.probe if self.node is None else owner.probe_on(self.node)
        return await probe_and_wait(
            owner.client, self.node, probe, owner.replicas, owner.timeout_ms
        )


class DurableRounds:
    def __init__(
        self, client: Redis | RedisCluster, partitions: Partitions, replicas: int, timeout_ms: int
    ) -> None:
        self.client = client
        self.partitions = partitions
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.probe = partitions.keys.wait_probe
        self._lanes: dict[str, _Lane] = {}

    def note(self, config: TopicConfig, partition: int) -> None:
        """The partition may have records past its durable_hw: a round brings it up soon."""
        self._lane(self.partitions.keys.partition(config.name, partition).state).note(
            config, partition
        )

    async def wait(self, deadline: float, key: str | None = None) -> str | None:
        """None once a round that started after this call reached the replicas (so every
        write this pod made before the call is on them); else why not, by ``deadline``.
        ``key``: on a cluster, the written key (its node must reach them; None: every
        primary). Callers go through mapping/replication/acks.py."""
        loop = asyncio.get_running_loop()
        for attempt in itertools.count():
            if key is None and isinstance(self.client, RedisCluster):
                lanes = [self._node_lane(node) for node in self.client.get_primaries()]
            else:
                lanes = [self._lane(key)]
            try:
                counts = await asyncio.gather(*(lane.wait(deadline) for lane in lanes))
                break
            except AskError as exc:  # (and MovedError) a failover moved the probe's slot
                if not isinstance(self.client, RedisCluster) or loop.time() >= deadline:
                    return f"redis WAIT failed: {exc}"
                # the slot's new owner, then WAIT there: the lane pipelines bypass the
                # cluster client's own redirection. Moved again: the primaries themselves
                # changed (a round for a commit waits on each), so the whole slot map is read
                # again, until the deadline (a node may still tell the map before the
                # failover).
                if attempt == 0:
                    await self.client.nodes_manager.move_slot(exc)
                else:
                    if attempt > 1:
                        await asyncio.sleep(MAP_RETRY_PAUSE_S)
                    await self.client.nodes_manager.initialize()
            except (BrokerError, RedisError, OSError) as exc:
                return f"redis WAIT failed: {exc}"
        replicas = min(counts)
        if replicas < self.replicas:
            return (
                f"{max(replicas, 0)} of {self.replicas} redis replicas acknowledged "
                f"within {self.timeout_ms} ms"
            )
        return None

    def _lane(self, key: str | None) -> _Lane:
        if not isinstance(self.client, RedisCluster):
            lane = self._lanes.get("")
            if lane is None:
                lane = self._lanes[""] = _Lane(self, None)
            return lane
        assert key is not None
        return self._node_lane(self.client.get_node_from_key(key))

    def _node_lane(self, node: ClusterNode) -> _Lane:
        lane = self._lanes.get(node.name)
        if lane is None or lane.node is not node:  # a node met anew after a failover
            lane = self._lanes[node.name] = _Lane(self, node)
        return lane

    def probe_on(self, node: ClusterNode) -> str:
        """A probe key whose hash tag puts it on ``node`` (a few tries: slots are spread)."""
        client = self.client
        assert isinstance(client, RedisCluster)
        slots = client.nodes_manager.slots_cache
        for i in range(100_000):
            key = f"{self.probe}{{{i}}}"
            owners = slots.get(client.keyslot(key))
            if owners and owners[0].name == node.name:
                return key
        raise BrokerError(REPLICATION_TIMEOUT, f"no slot of {node.name} found for WAIT")
