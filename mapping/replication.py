"""The pod's replication work: acks=all waits (mapping/acks.py) with --redis-wait-replicas
rounds (mapping/durable.py), the built-in replicator (mapping/replicator.py), and what a
topic's deletion or growth, heard on pub/sub, means for them."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from redis.asyncio import Redis

from mapping.acks import Acks
from mapping.durable import DurableRounds
from mapping.partitions import Partitions
from mapping.pubsub import Subscriber
from mapping.replicator import Replicator
from mapping.topics import Topics

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
        """``subscriber``: the pod's pub/sub connection (run here), its home channel
        ``keys.pod_channel(pod_id)``. ``redis_wait_replicas``: acks=all also waits for
        Redis ``WAIT`` with this many Redis replicas (0: off), within what is left of the
        acks timeout. ``lease_ms``: the replicator's lease; default half of
        replica_lag_max_ms (at least 200 ms), so a dead owner's followers are taken over
        before they leave the ISR."""
        self.topics = topics
        self.partitions = partitions
        self.subscriber = subscriber
        self.pod_id = pod_id
        # --redis-wait-replicas: acks, commits and readers wait for Redis WAIT rounds
        durable = None
        if redis_wait_replicas > 0:
            durable = DurableRounds(client, partitions, redis_wait_replicas, acks_timeout_ms)
            partitions.durable = durable
        self.acks = Acks(
            partitions, subscriber, timeout_ms=acks_timeout_ms, durable=durable, linger_s=linger_s
        )
        # Deletions published while the connection was down are missed: forget every topic.
        subscriber.on_reconnect(topics.forget_all)
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
        """Background work of this pod (notifications, replicator) until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.subscriber.run())
            tasks.create_task(
                self.subscriber.subscribe(
                    self.topics.keys.topics_deleted_channel, self._on_topic_deleted
                )
            )
            tasks.create_task(
                self.subscriber.subscribe(
                    self.topics.keys.topics_changed_channel, self._on_topic_changed
                )
            )
            if self.replicator is not None:
                tasks.create_task(self.replicator.run())

    def _on_topic_deleted(self, data: bytes) -> None:
        """A topic was deleted (mapping/admin.py): every cache of it goes, and its acks=all
        waiters get TOPIC_DELETED now rather than a timeout later."""
        name = data.decode(errors="replace")
        self.topics.forget(name)
        if self.replicator is not None:
            self.replicator.forget(name)
        self.acks.forget_topic(name)
        log.info("topic %s was deleted: forgotten", name)

    def _on_topic_changed(self, data: bytes) -> None:
        """A topic got more partitions (mapping/admin.py add_partitions): its settings are
        read again (acks=all waits on its existing partitions go on)."""
        name = data.decode(errors="replace")
        self.topics.forget(name)
        if self.replicator is not None:
            self.replicator.reread(name)
        log.info("topic %s changed: its settings are read again", name)
