"""The Kafka broker registry: each pod with a Kafka listener registers its advertised
address with a TTL it keeps refreshing; Metadata lists the live ones.

Node ids come from INCR, one per advertised address, so pods behind one load balancer
address are one broker to clients, and a pod that restarts on the same address keeps its
id. A pod removes itself on shutdown; a killed one expires after the TTL.
"""

from __future__ import annotations

import logging

from mapping import partitioner, resilient, scripts
from mapping.batcher import RedisBatcher
from mapping.codec import to_str
from mapping.keys import Keys

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

    async def register(self) -> int:
        reply = await self.batcher.call(
            *kafka_register_call(self.keys, self.pod_id, self.address, self.ttl_ms)
        )
        self.node_id = int(reply)
        return self.node_id

    async def run(self) -> None:
        """Refresh the registration every third of the TTL until cancelled (the pod calls
        ``unregister`` on shutdown, while its batcher still runs). Any failure (Redis down,
        a cluster failing over) is logged and retried soon: it never ends the task."""
        await resilient.every(
            "refreshing the Kafka broker registration", self.register, self.ttl_ms / 3000
        )

    async def unregister(self) -> None:
        live, pods = self.keys[0], self.keys[1]
        try:
            await self.batcher.call("ZREM", live, self.pod_id)
            await self.batcher.call("HDEL", pods, self.pod_id)
        except resilient.REDIS_TROUBLE as exc:
            log.info("cannot remove the Kafka broker registration: %s", exc)

    async def live(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every live broker, by node id."""
        return live_brokers(await self.batcher.call(*kafka_brokers_call(self.keys)))
