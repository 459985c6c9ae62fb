"""One pod's parts, built in one place: what both front doors serve from (as Kafka's
BrokerServer builds the parts its KafkaApis answer with).

``open_pod(settings)`` connects to Redis, runs the startup checks and yields the `Pod`;
``Pod.run()`` is its background work (the batcher, pub/sub notices, the replicator,
retention). The front doors (adapter/v1/, adapter/kafka/) take the `Pod`; so do the command
line, the tests and the benchmarks that need a pod's parts in process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter.authorizer import Authorizer, parse_super_users
from adapter.quotas import QuotaManager
from adapter.settings import Settings
from mapping.connection import resilient
from mapping.connection.append_module import (
    PRODUCE_MANY_COMMAND,
    V1_PRODUCE_COMMAND,
    append_probe,
    copy_probe,
    has_command,
    produce_probe,
)
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect, make_batcher
from mapping.connection.cluster import on_every_connection, redact
from mapping.connection.pubsub import Subscriber
from mapping.connection.startup import check_redis, failover_loss
from mapping.connection.waits import Channel, Waits
from mapping.core.errors import ConfigurationError
from mapping.core.keys import Keys
from mapping.group.groups import Groups
from mapping.group.offsets_mirror import OffsetsMirror
from mapping.kafka_group import KafkaGroups
from mapping.operations.retention import RetentionTask
from mapping.partition.kafka import KafkaStore
from mapping.partition.partition_txns import PartitionTxns
from mapping.partition.partitions import Partitions
from mapping.replication.durable_reads import store_wait_replicas
from mapping.replication.hw_views import HwWaits
from mapping.replication.leader_epochs import LeaderEpochs
from mapping.replication.pod_replication import Replication, new_pod_id
from mapping.security.acl_store import AclStore, decode_all
from mapping.security.quotas import QuotaStore
from mapping.topic.broker_configs import ConfigStore
from mapping.topic.topic_configs import DEFAULT_MAX_MESSAGE_BYTES, broker_default_fields
from mapping.topic.topics import Topics
from mapping.txn.transactions import Transactions
from mapping.txn.txn_completer import TransactionCompleter

log = logging.getLogger(__name__)


@dataclass
class Pod:
    """Everything a pod's requests are served with; one per pod process (or per worker)."""

    settings: Settings
    client: Redis
    keys: Keys
    batcher: RedisBatcher  # one pipeline per event-loop turn, for every request
    pod_id: str
    subscriber: Subscriber  # the pod's one pub/sub connection
    topics: Topics
    partitions: Partitions
    groups: Groups  # V1 groups
    replication: Replication  # acks=all, --redis-wait-replicas, the replicator
    kafka: KafkaStore
    kafka_groups: KafkaGroups
    partition_txns: PartitionTxns  # transactions, the partition side (markers, LSO)
    hw_waits: HwWaits  # Kafka Fetch long-polls on partitions' hw channels, and their views
    retention: RetentionTask
    configs: ConfigStore  # the cluster-wide broker configs, the groups' configs
    transactions: Transactions  # the Kafka transaction coordinator (its participants: this)
    txn_completer: TransactionCompleter  # timeouts, half-ended transactions, expiry
    # __consumer_offsets' writer (--offsets-topic); None: no mirror
    offsets_mirror: OffsetsMirror | None = None
    # Kafka leader epochs: the Redis primaries that served the data (KIP-320)
    leader_epochs: LeaderEpochs = field(default_factory=LeaderEpochs)
    # Kafka's ACLs (--authorizer); off: allows everything at no cost
    authorizer: Authorizer = field(default_factory=Authorizer)
    # Kafka's client quotas (none set: nothing measured)
    quotas: QuotaManager = field(default_factory=QuotaManager)
    _reloads: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self) -> None:
        """The pod's background work, until cancelled."""
        self.subscriber.on_reconnect(self._configs_changed)
        subscriber = self.subscriber
        work = [
            self.batcher.run,
            subscriber.run,
            partial(subscriber.subscribe, self.keys.broker_configs_channel, self._configs_changed),
            self.load_configs,
            partial(subscriber.subscribe, self.keys.topics_deleted_channel, self._topic_deleted),
            partial(subscriber.subscribe, self.keys.topics_changed_channel, self._topic_changed),
            self.replication.run,
            self.retention.run,
            self.txn_completer.run,
        ]
        if self.offsets_mirror is not None:
            work.append(self.offsets_mirror.run)
        if self.authorizer.enabled:
            work.append(partial(self.authorizer.run, subscriber))
        work.append(partial(self.quotas.run, subscriber))
        await resilient.together(*work)

    async def load_configs(self) -> None:
        """Read the cluster-wide broker configs; the topics get them as their defaults."""
        try:
            broker = await self.configs.load()
        except Exception:  # Redis away: the reconnect reads them again
            log.warning("could not read the broker configs", exc_info=True)
            return
        self.topics.set_broker_defaults(
            broker_default_fields({**static_broker_configs(self.settings), **broker})
        )

    def _configs_changed(self, _data: bytes | None = None) -> None:
        """The broker configs changed (or notices may have been missed): read them again."""
        self._spawn(self.load_configs())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    def _topic_deleted(self, data: bytes) -> None:
        """A topic was deleted (mapping/operations/topic_lifecycle.py): every cache of it goes, and
        its
        acks=all waiters get TOPIC_DELETED now rather than a timeout later."""
        name = data.decode(errors="replace")
        self.topics.cache.forget(name)
        self.replication.forget_topic(name)
        log.info("topic %s was deleted: forgotten", name)

    def _topic_changed(self, data: bytes) -> None:
        """A topic got more partitions (mapping/operations/topic_lifecycle.py add_partitions) or
        other configs
        (Topics.alter_configs): its settings are read again (acks=all waits on its existing
        partitions go on)."""
        name = data.decode(errors="replace")
        self.topics.cache.forget(name)
        self.replication.reread_topic(name)
        log.info("topic %s changed: its settings are read again", name)


def static_broker_configs(settings: Settings) -> dict[str, str]:
    """The pod's own settings that are topic defaults (under the cluster-wide ones)."""
    static = {}
    if settings.kafka_max_message_bytes != DEFAULT_MAX_MESSAGE_BYTES:
        static["message.max.bytes"] = str(settings.kafka_max_message_bytes)
    return static


def build_pod(settings: Settings, client: Redis, *, pod_id: str = "") -> Pod:
    """A pod's parts on ``client``, with no Redis call yet; ``pod_id``: a fixed id (tests),
    else a new unique one. The command line and tests that need a pod's parts in process
    build them here too, and run only what they need of ``Pod.run``."""
    keys = Keys(settings.key_prefix)
    batcher = make_batcher(client)
    pod_id = pod_id or new_pod_id()
    subscriber = Subscriber(client, keys.pod_channel(pod_id))
    topics = Topics(
        batcher,
        keys,
        topic_defaults=settings.topic_defaults,
        auto_create_topics=settings.auto_create_topics,
        max_topics=settings.max_topics,
        topic_cache_size=settings.topic_cache_size,
    )
    # in force before the cluster-wide configs are read (Pod.load_configs)
    topics.set_broker_defaults(broker_default_fields(static_broker_configs(settings)))
    # Deletions published while the connection was down are missed: forget every topic.
    subscriber.on_reconnect(topics.cache.forget_all)
    partitions = Partitions(
        batcher,
        keys,
        topics,
        sequence_bits=settings.sequence_bits,
        replica_lag_max_ms=settings.replica_lag_max_ms,
    )
    kafka = KafkaStore(partitions, settings.kafka_producer_id_expiration_ms)
    transactions = Transactions(batcher, keys, topics, kafka.new_producer_id, settings.transactions)
    pod = Pod(
        settings=settings,
        client=client,
        keys=keys,
        batcher=batcher,
        pod_id=pod_id,
        subscriber=subscriber,
        topics=topics,
        partitions=partitions,
        groups=Groups(batcher, keys, session_timeout_ms=settings.session_timeout_ms),
        replication=Replication(
            client,
            topics,
            partitions,
            subscriber,
            pod_id=pod_id,
            acks_timeout_ms=settings.acks_timeout_ms,
            run_replicator=settings.replicator,
            redis_wait_replicas=settings.redis_wait_replicas,
        ),
        kafka=kafka,
        kafka_groups=KafkaGroups(
            batcher,
            Waits(subscriber, Channel),
            keys,
            # one transactional.id expiration for the coordinator and the groups' fencing
            dataclasses.replace(
                settings.kafka_groups,
                transactional_id_expiration_ms=settings.transactional_id_expiration_ms,
            ),
            v1_session_timeout_ms=settings.session_timeout_ms,
        ),
        partition_txns=PartitionTxns(partitions),
        hw_waits=HwWaits(subscriber),
        retention=RetentionTask(
            partitions,
            client,
            pod_id=pod_id,
            interval_ms=settings.retention_interval_ms,
            offsets_retention_ms=settings.offsets_retention_ms,
            session_timeout_ms=settings.session_timeout_ms,
        ),
        configs=ConfigStore(batcher, keys),
        transactions=transactions,
        txn_completer=TransactionCompleter(
            transactions, client, pod_id=pod_id, interval_ms=settings.transaction_check_interval_ms
        ),
    )
    # markers go to the partitions (pod.partition_txns), offsets to the groups (kafka_groups)
    transactions.participants = pod
    pod.quotas = QuotaManager(QuotaStore(batcher, keys))
    pod.authorizer = Authorizer(
        AclStore(batcher, keys),
        enabled=settings.authorizer,
        super_users=parse_super_users(settings.super_users),
        allow_if_no_acl=settings.allow_everyone_if_no_acl_found,
    )
    if settings.offsets_topic:
        # (it makes the topic only in Pod.run: the command line writes into an existing one)
        mirror = pod.offsets_mirror = OffsetsMirror(partitions, client)
        pod.groups.mirror = pod.kafka_groups.mirror = pod.retention.mirror = mirror
    return pod


@asynccontextmanager
async def open_pod(settings: Settings) -> AsyncIterator[Pod]:
    """Connect to ``settings.redis_url``, check the deployment (mapping/connection/startup.py;
    retried
    while Redis is still coming up) and yield the pod's parts; the client closes on exit."""
    assert settings.redis_url is not None
    keys = Keys(settings.key_prefix)
    # each connection registers the primary it reached as a leader epoch before its first
    # command (mapping/replication/leader_epochs.py)
    epochs = LeaderEpochs(keys.kafka_leader_epochs)
    client = connect(
        settings.redis_url, settings.redis_timeout_ms / 1000, **settings.redis_options()
    )
    on_every_connection(client, epochs.on_connect)
    if isinstance(client, RedisCluster):
        epochs.cluster = client  # nodes without the registry register through it
    try:
        await wait_for_redis(settings, keys, client)
        pod = build_pod(settings, client)
        if settings.append_module:
            pod.partitions.append_module = await has_command(
                client, append_probe(keys.module_probe)
            )
            pod.partitions.produce_module = (
                pod.partitions.append_module
                and await has_command(client, produce_probe(keys.module_probe))
                and await has_command(
                    client, produce_probe(keys.module_probe, PRODUCE_MANY_COMMAND)
                )
                and await has_command(client, produce_probe(keys.module_probe, V1_PRODUCE_COMMAND))
            )
            pod.partitions.copy_module = await has_command(
                client, copy_probe(keys.module_probe, keys.module_probe_replica)
            )
        pod.leader_epochs = epochs
        if pod.authorizer.enabled:  # the bindings in force from the first request on
            # (read on the client: the batcher runs only in Pod.run)
            pod.authorizer.set_bindings(decode_all(await client.smembers(keys.acls)))
        # what readers outside pods (command lines, Spark) wait for
        # (mapping/replication/durable_reads.py)
        await store_wait_replicas(
            client, keys, settings.redis_wait_replicas, settings.acks_timeout_ms
        )
        yield pod
    finally:
        await client.aclose()


async def wait_for_redis(settings: Settings, keys: Keys, client: Redis) -> None:
    """Run the startup checks (mapping/connection/startup.py), retrying while Redis is
    still coming up."""
    deadline = anyio.current_time() + settings.redis_startup_timeout_s
    redis_at = redact(settings.redis_url or "")  # never log a password
    while True:
        try:
            await check_redis(
                client,
                keys,
                sequence_bits=settings.sequence_bits,
                require_aof=settings.require_aof,
                url=redis_at,
                allow_evicting=settings.allow_evicting_redis,
            )
            loss = await failover_loss(client, redis_at, settings.redis_wait_replicas)
            if loss is not None:
                log.warning(loss)
            return
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            error = exc
        if anyio.current_time() > deadline:
            raise ConfigurationError(
                f"cannot reach Redis at {redis_at} within "
                f"{settings.redis_startup_timeout_s:g}s: {error}"
            )
        log.warning("waiting for Redis at %s: %s", redis_at, error)
        await anyio.sleep(0.5)
