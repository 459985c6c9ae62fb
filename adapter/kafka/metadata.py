"""Metadata: the live pods as brokers, every partition led by one of them (a stable hash),
topics auto-created when the client allows it and the pod's ``--auto-create-topics`` does.
A topic may be asked for by id (v10+, the Java admin's ``describeTopics`` by ids, which sends
an empty name beside the id): a non-zero id wins over the name, as in Kafka, and is answered
with the topic's name, or UNKNOWN_TOPIC_ID with the id echoed. Ids are the ones stored with
the topics (random at each creation: a topic made again is another topic to the clients).
Names Kafka reserves for its internal topics (``__consumer_offsets``, ...) are never
auto-created: UNKNOWN_TOPIC_OR_PARTITION, flagged internal as Kafka does.
``__consumer_offsets`` is listed, internal, while the pod mirrors the committed offsets
there (``--offsets-topic``, mapping/group/offsets_mirror.py), else never. Asked for
(v8+ ``include_topic_authorized_operations``: librdkafka's ``describe_topics(
include_authorized_operations=True)``), each topic's authorized operations are every
operation a topic supports (no ACLs: adapter/kafka/admin.py TOPIC_OPERATIONS); likewise the
cluster's (v8-10 ``include_cluster_authorized_operations``: librdkafka's ``describe_cluster``
asks Metadata, not DescribeCluster)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from adapter.kafka import errors
from adapter.kafka.admin import (
    CLUSTER_OPERATIONS,
    NOT_ASKED,
    TOPIC_OPERATIONS,
    authorized_operations,
)
from adapter.kafka.authorization import MetadataGate
from adapter.kafka.context import KafkaContext, topic_id_of
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import METADATA
from mapping.core import codec
from mapping.core.errors import BrokerError
from mapping.core.keys import is_valid_name
from mapping.group.offsets_topic import OFFSETS_TOPIC
from mapping.security.acls import CLUSTER_NAME, ResourceType
from mapping.topic.brokers import partition_replicas
from mapping.topic.topic_config import TopicConfig, is_internal_topic

Response = METADATA.response
Broker = Response.MetadataResponseBroker
Topic = Response.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
TOPIC_DENIED = errors.TOPIC_AUTHORIZATION_FAILED


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    brokers = await context.brokers()
    every_topic = body.topics is None or (request.version == 0 and not body.topics)
    if every_topic:
        try:
            names = await context.pod.topics.names()
        except BrokerError:
            names = []  # Redis unreachable: no topics to list (clients ask again)
        asked = [(name, None) for name in names]
    else:
        asked = [(t.name, _asked_id(t)) for t in body.topics]
    allow_create = request.version < 4 or bool(body.allow_auto_topic_creation)
    # Listing every topic creates none (a name left in the topics set by a creation that
    # raced a deletion is no topic, and is left out).
    create = allow_create and context.pod.settings.auto_create_topics and not every_topic
    operations = TOPIC_OPERATIONS if _operations_asked(request) else NOT_ASKED
    topics = []
    gate = await MetadataGate.of(
        context, request, [n for n, i in asked if i is None], create, listing=every_topic
    )
    for name, topic_id in asked:
        if topic_id is not None:
            topics.append(await _topic_by_id(context, brokers, topic_id, operations, gate))
            continue
        if gate is not None and name in gate.hidden:  # DESCRIBE denied: left out, or refused
            if not every_topic:
                topics.append(Topic(error_code=TOPIC_DENIED, name=name, partitions=[]))
            continue
        creatable = create and (gate is None or name in gate.creatable)
        topic = await topic_entry(context, brokers, name, creatable, operations)
        if creatable != create and topic.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION:
            topic.error_code = TOPIC_DENIED  # its auto-creation needs CREATE
        if not (every_topic and topic.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION):
            topics.append(topic)
    if operations is TOPIC_OPERATIONS and context.authorizer.enabled:  # the principal's own
        for topic in topics:
            if topic.error_code == errors.NONE:
                topic.authorized_operations = authorized_operations(
                    context, request, ResourceType.TOPIC, topic.name, TOPIC_OPERATIONS
                )
    answer = Response[request.version](
        throttle_time_ms=0,
        brokers=[Broker(node_id=n, host=h, port=p, rack=None) for n, h, p in brokers],
        cluster_id=context.cluster_id,
        controller_id=context.controller(brokers),
        topics=topics,
    )
    if 8 <= request.version <= 10:  # the cluster's operations (librdkafka's describe_cluster)
        asked = bool(getattr(body, "include_cluster_authorized_operations", 0))
        answer.authorized_operations = (
            authorized_operations(
                context, request, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS
            )
            if asked
            else set(NOT_ASKED)
        )
    return answer


def _operations_asked(request: Request) -> bool:
    body = request.body
    return request.version >= 8 and bool(getattr(body, "include_topic_authorized_operations", 0))


def _asked_id(topic: Any) -> uuid.UUID | None:
    """The topic id a request's entry names (v10+), None for none (the zero id)."""
    topic_id = getattr(topic, "topic_id", None)
    return topic_id if isinstance(topic_id, uuid.UUID) and topic_id.int else None


async def _topic_by_id(
    context: KafkaContext,
    brokers: list[tuple[int, str, int]],
    topic_id: uuid.UUID,
    operations: frozenset[int],
    gate: MetadataGate | None = None,
) -> Any:
    try:
        name = await context.topic_name(topic_id)
    except BrokerError as exc:
        return Topic(error_code=error_of(exc), name=None, topic_id=topic_id, partitions=[])
    if name is None:
        return Topic(
            error_code=errors.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=[]
        )
    if gate is not None and await gate.hides(name):  # the id, not the name (as Kafka)
        return Topic(error_code=TOPIC_DENIED, name=None, topic_id=topic_id, partitions=[])
    return await topic_entry(context, brokers, name, False, operations)


async def topic_entry(
    context: KafkaContext,
    brokers: list[tuple[int, str, int]],
    name: str,
    create: bool,
    operations: frozenset[int] = NOT_ASKED,
) -> Any:
    """A found topic's entry carries ``operations`` (its authorized operations' bit
    positions), an error entry Kafka's "not asked"."""
    if name is None or not is_valid_name(name):
        return Topic(error_code=errors.INVALID_TOPIC_EXCEPTION, name=name, partitions=[])
    internal = is_internal_topic(name)
    # __consumer_offsets is served while the pod mirrors the commits there (--offsets-topic)
    hidden = name == OFFSETS_TOPIC and context.pod.offsets_mirror is None
    try:  # (a reserved name is never created: see Topics.topic)
        config = None if hidden else await context.find_topic(name, create=create)
    except BrokerError as exc:
        return Topic(error_code=error_of(exc), name=name, is_internal=internal, partitions=[])
    if config is None:
        return Topic(
            error_code=errors.UNKNOWN_TOPIC_OR_PARTITION,
            name=name,
            is_internal=internal,
            partitions=[],
        )
    partitions = []
    assigned = config.replica_assignment()
    in_sync = await _in_sync_replicas(context, config)
    for p in range(config.partitions):
        replicas, isr = reported_replicas(
            brokers, name, p, config.replication_factor, in_sync[p], assigned.get(p)
        )
        partitions.append(
            Partition(
                error_code=errors.NONE,
                partition_index=p,
                leader_id=isr[0],
                leader_epoch=context.pod.leader_epochs.current,  # (KIP-320)
                replica_nodes=replicas,
                isr_nodes=isr,
                offline_replicas=[node for node in replicas if node not in isr],
            )
        )
    return Topic(
        error_code=errors.NONE,
        name=name,
        topic_id=topic_id_of(config),
        is_internal=internal,
        partitions=partitions,
        authorized_operations=set(operations),
    )


async def _in_sync_replicas(context: KafkaContext, config: TopicConfig) -> list[list[int]]:
    """Each partition's ISR as replica numbers (0: the leader log), as its state hash last
    recorded it (what ``inspect topic`` shows); every replica while the hash has none (no
    record yet) or Redis cannot be read (Metadata still answers, as during an outage)."""
    every = list(range(config.replication_factor))
    batcher, keys = context.pod.partitions.batcher, context.pod.keys
    try:
        stored = await asyncio.gather(
            *(
                batcher.submit("HGET", keys.partition(config.name, p).state, "isr")
                for p in range(config.partitions)
            )
        )
    except BrokerError:
        return [every] * config.partitions
    return [every if raw is None else [int(r) for r in codec.to_str(raw).split()] for raw in stored]


def reported_replicas(
    brokers: list[tuple[int, str, int]],
    topic: str,
    partition: int,
    replication_factor: int,
    in_sync: list[int],
    named: list[int] | None = None,
) -> tuple[list[int], list[int]]:
    """(replicas, ISR) by broker id: one replica per replica of the topic (its replication
    factor, as ``inspect`` shows it), replica 0 (the leader log) on the leader
    partition_replicas names, replica r on the r-th live broker after it around the ring
    (pods are stateless: any of them serves any replica's stream, so a broker id repeats
    when the topic has more replicas than there are live pods). The ISR is the brokers of
    the replicas in ``in_sync`` (the partition's ISR, replica numbers), the leader first.
    Replicas CreateTopics assigned (``named``) are reported as assigned while one is live,
    led by the first live one; the ISR then holds the live ones whose replica is in sync."""
    ring, leaders = partition_replicas(brokers, topic, partition, len(brokers), named)
    leader = leaders[0]
    if named and leader in named:
        live = set(leaders)
        isr = [leader] + [
            node for r, node in enumerate(named) if node in live and node != leader and r in in_sync
        ]
        return named, isr
    replicas = [ring[r % len(ring)] for r in range(replication_factor)]
    return replicas, [leader] + [replicas[r] for r in in_sync if 0 < r < replication_factor]
