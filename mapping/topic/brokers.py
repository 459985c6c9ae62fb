"""The Kafka broker registry: each pod with a Kafka listener registers its advertised
address with a TTL it keeps refreshing; Metadata lists the live ones.

Node ids come from INCR, one per advertised address, so pods behind one load balancer
address are one broker to clients, and a pod that restarts on the same address keeps its
id. A pod removes itself on shutdown; a killed one expires after the TTL.

While Redis cannot be read a pod answers with the brokers it last read (``last_live``), as a
Kafka broker answers from its metadata cache: never fewer, so clients do not forget the
other brokers (and the coordinators they had found on them) over an outage. Nor right after
it: no pod could refresh its registration meanwhile, so an outage longer than the TTL leaves
every entry expired by Redis' clock, and the first reads would list only the pods that
registered again so far. For one TTL after an outage the brokers read before it stay
listed: a live pod registers again within a third of the TTL, one still missing then is gone.
Only brokers read from Redis are kept so, each for a TTL after the outage that began after
it was read: outages one after another never keep a dead pod listed for longer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from mapping.connection import resilient, scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import to_str
from mapping.core.keys import Keys
from mapping.topic import partitioner

log = logging.getLogger(__name__)

DEFAULT_TTL_MS = 10_000

KAFKA_REGISTER = scripts.load("kafka/register")
KAFKA_BROKERS = scripts.load("kafka/brokers")


def kafka_register_call(registry: list[str], pod_id: str, address: str, ttl_ms: int) -> tuple:
    """kafka/register.lua on ``registry`` (``Keys.kafka_brokers``): the pod's node id."""
    return KAFKA_REGISTER.command(registry, [pod_id, address, ttl_ms])


def kafka_brokers_call(registry: list[str]) -> tuple:
    """kafka/brokers.lua: the live brokers."""
    return KAFKA_BROKERS.command(registry, [])


def live_brokers(reply: list) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every live broker in kafka/brokers.lua's ``reply``, by node
    id."""
    brokers = []
    for i in range(0, len(reply), 2):
        host, _, port = to_str(reply[i + 1]).rpartition(":")
        brokers.append((int(reply[i]), host, int(port)))
    return sorted(brokers)


def leader_index(broker_count: int, topic: str, partition: int) -> int:
    """The index, among ``broker_count`` live brokers by node id, of the partition's leader
    in Metadata: a stable spread (any pod still serves any partition: this only spreads the
    clients' load)."""
    return (partitioner.fnv1a_32(topic.encode()) + partition) % broker_count


def partition_replicas(
    brokers: list[tuple[int, str, int]],
    topic: str,
    partition: int,
    replication_factor: int,
    named: list[int] | None = None,
) -> tuple[list[int], list[int]]:
    """(replicas, in-sync replicas) Metadata reports for the partition over the live
    ``brokers`` (by node id; at least one); its leader is the first in-sync one. ``named``:
    the replicas CreateTopics/CreatePartitions assigned (TopicConfig.replica_assignment),
    reported as long as one of them is live, led by the first live one; otherwise the
    leader is ``leader_index``'s and the next brokers around the ring follow it."""
    live = [node for node, _, _ in brokers]
    if named:
        in_sync = [node for node in named if node in live]
        if in_sync:
            return named, in_sync
    first = leader_index(len(brokers), topic, partition)
    replicas = [live[(first + i) % len(live)] for i in range(min(replication_factor, len(live)))]
    return replicas, replicas


class BrokerRegistry:
    def __init__(
        self,
        batcher: RedisBatcher,
        keys: Keys,
        *,
        pod_id: str,
        address: str,
        ttl_ms: int = DEFAULT_TTL_MS,
    ) -> None:
        self.batcher = batcher
        self.keys = keys.kafka_brokers
        self.pod_id = pod_id
        self.address = address
        self.ttl_ms = ttl_ms
        self.node_id: int | None = None
        # the live brokers as last answered (by node id): what an outage answers
        self.last_live: list[tuple[int, str, int]] = []
        # the live brokers as last read from Redis (no kept ones among them)
        self._read: list[tuple[int, str, int]] = []
        self._in_outage = False  # a read or refresh failed, none succeeded since
        # the brokers read before an outage, each listed until its time (monotonic s; inf
        # while the outage lasts)
        self._kept: dict[tuple[int, str, int], float] = {}
        # set by ``unregister``: a draining pod's refresh task must not list it again (its
        # entry would outlive the process by a TTL, and a client's first Metadata could make
        # the gone pod its controller)
        self._left = False
        # set once the first refresh is done (or failed): the pod serves clients after it,
        # so a client's first Metadata, through any pod, lists the pod that just started
        self.first_refresh = asyncio.Event()

    async def register(self) -> int:
        reply = await self.batcher.call(
            *kafka_register_call(self.keys, self.pod_id, self.address, self.ttl_ms)
        )
        self.node_id = int(reply)
        return self.node_id

    async def run(self) -> None:
        """Refresh the registration every third of the TTL until cancelled (the pod calls
        ``unregister`` on shutdown, while its batcher still runs). Any failure (Redis down,
        a cluster failing over) is logged and retried soon: it never ends the task. After
        ``unregister`` it refreshes nothing."""
        await resilient.every(
            "refreshing the Kafka broker registration", self.refresh, self.ttl_ms / 3000
        )

    async def refresh(self) -> None:
        """Renew the registration, then read the live brokers: ``last_live`` is recent even
        in a worker no client asked yet, for an outage to answer with."""
        if self._left:
            return
        try:
            try:
                await self.register()
            except Exception:
                self._outage_began()
                raise
            await self.live()
        finally:
            self.first_refresh.set()

    async def unregister(self) -> None:
        """Leave the registry for good (SIGTERM): a registration already sent is ahead of
        these removals on the pipeline, and none is sent after them."""
        self._left = True
        live, pods = self.keys[0], self.keys[1]
        try:
            await self.batcher.call("ZREM", live, self.pod_id)
            await self.batcher.call("HDEL", pods, self.pod_id)
        except resilient.REDIS_TROUBLE as exc:
            log.info("cannot remove the Kafka broker registration: %s", exc)

    async def live(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker, by node id, with those listed before
        an outage that ended less than a TTL ago; remembered in ``last_live``."""
        try:
            reply = await self.batcher.call(*kafka_brokers_call(self.keys))
        except Exception:
            self._outage_began()
            raise
        brokers = self._read = live_brokers(reply)
        now = time.monotonic()
        if self._in_outage:
            self._in_outage = False
            ends = now + self.ttl_ms / 1000
            self._kept = {broker: min(until, ends) for broker, until in self._kept.items()}
        self._kept = {broker: until for broker, until in self._kept.items() if now < until}
        if self._kept:
            listed = {node for node, _, _ in brokers}
            brokers = sorted([*brokers, *(b for b in self._kept if b[0] not in listed)])
        self.last_live = brokers
        return brokers

    def _outage_began(self) -> None:
        if not self._in_outage:
            self._in_outage = True
            self._kept.update(dict.fromkeys(self._read, math.inf))
