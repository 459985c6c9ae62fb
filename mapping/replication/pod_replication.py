"""The pod's replication work: acks=all waits (mapping/replication/acks.py) with
--redis-wait-replicas
rounds (mapping/replication/durable.py), the built-in replicator
(mapping/replication/replicator.py), and what a
topic's deletion or growth (the pod hears of them: adapter/pod.py) means for them."""

from __future__ import annotations

import logging
import os
import socket
import uuid

from redis.asyncio import Redis

from mapping.connection.pubsub import Subscriber
from mapping.partition.partitions import Partitions
from mapping.replication.acks import Acks
from mapping.replication.durable import DurableRounds
from mapping.replication.replicator import Replicator
from mapping.topic.topics import Topics

log = logging.getLogger(__name__)


def new_pod_id() -> str:
    """A pod id unique among the pods of a deployment (and its restarts)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Replication:
    def __init__(
        self,
        client: Redis,
        topics: Topics,
        partitions: Partitions,
        subscriber: Subscriber,
        *,
        pod_id: str,
        acks_timeout_ms: int,
        run_replicator: bool,
        redis_wait_replicas: int = 0,
        lease_ms: int | None = None,
        shards: int = 16,
        linger_s: float = 30.0,
    ) -> None:
        """``subscriber``: the pod's pub/sub connection (the pod runs it), its home channel
        ``keys.pod_channel(pod_id)``. ``redis_wait_replicas``: acks=all also waits for
        Redis ``WAIT`` with this many Redis replicas (0: off), within what is left of the
        acks timeout. ``lease_ms``: the replicator's lease; default half of
        replica_lag_max_ms (at least 200 ms), so a dead owner's followers are taken over
        before they leave the ISR."""
        # --redis-wait-replicas: acks, commits and readers wait for Redis WAIT rounds
        durable = None
        if redis_wait_replicas > 0:
            durable = DurableRounds(client, partitions, redis_wait_replicas, acks_timeout_ms)
            partitions.durable = durable
        self.acks = Acks(
            partitions, subscriber, timeout_ms=acks_timeout_ms, durable=durable, linger_s=linger_s
        )
        self.replicator = None
        if run_replicator:
            self.replicator = Replicator(
                client,
                topics,
                partitions,
                subscriber,
                pod_id=pod_id,
                lease_ms=lease_ms or max(200, partitions.replica_lag_max_ms // 2),
                shards=shards,
            )

    async def run(self) -> None:
        """The replicator, until cancelled (the pod runs the subscriber)."""
        if self.replicator is not None:
            await self.replicator.run()

    def forget_topic(self, name: str) -> None:
        """Topic ``name`` was deleted: its acks=all waiters get TOPIC_DELETED now rather than
        a timeout later, and the replicator drops its partitions."""
        if self.replicator is not None:
            self.replicator.forget(name)
        self.acks.forget_topic(name)

    def reread_topic(self, name: str) -> None:
        """Topic ``name`` changed (partitions, configs): the replicator reads its settings again."""
        if self.replicator is not None:
            self.replicator.reread(name)
