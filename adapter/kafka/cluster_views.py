"""What operators' tools read about topics and brokers: DescribeTopicPartitions (KIP-966:
the Java admin's ``describeTopics`` from Kafka 3.8, page by page), DescribeLogDirs
(``kafka-log-dirs.sh``, the web UIs' topic sizes) and DescribeProducers
(``kafka-transactions.sh describe-producers`` and ``find-hanging``), answered as Kafka's
KafkaApis answers them.

- DescribeTopicPartitions: the partitions Metadata reports (leaders, replicas, ISR, epochs,
  ids), in name order, at most ``response_partition_limit`` (2000 at most, Kafka's
  ``max.request.partition.size.limit``) a response, the next cursor where it stopped. No
  topic is created. A topic the principal may not DESCRIBE is left out of a listing, and
  answered TOPIC_AUTHORIZATION_FAILED (with no id) when named; a cursor whose topic is not
  in the list, or with a negative partition: INVALID_REQUEST on every topic.
- DescribeLogDirs: one log directory per broker, ``/redis/<key prefix>`` (a name, not a
  path: the deployment's keys in Redis). A broker holds the replicas Metadata places on it;
  each is its stream in Redis (replica 0 the leader log), sized by ``MEMORY USAGE``
  (mapping/operations/log_dirs.py). Where a broker holds more than one replica of a
  partition (fewer pods than the replication factor) their sizes are added and the larger
  lag kept, so the sizes summed over the brokers are the bytes the topics take. v4's
  total and usable bytes are Redis' memory (``maxmemory``, else the machine's) and what of
  it is free. Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED, v3+, and no
  directory); Redis unreachable: KAFKA_STORAGE_ERROR on the directory.
- DescribeProducers: each partition's idempotent and transactional producers
  (mapping/operations/producer_states.py): epoch, last sequence, the time of its last
  append (Kafka's last batch timestamp), the first offset of its open transaction;
  coordinator epoch -1 (the pods keep none). Any pod answers for any partition. Needs READ
  on the topic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import RedisError

from adapter.kafka import authorization, errors
from adapter.kafka.admin import TOPIC_OPERATIONS, authorized_operations, operations_bitfield
from adapter.kafka.context import NO_TOPIC_ID, KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.metadata import reported_replicas, topic_entry
from adapter.kafka.protocol import Request
from adapter.kafka.versions import DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, DESCRIBE_TOPIC_PARTITIONS
from mapping.core.errors import BrokerError
from mapping.core.keys import is_valid_name
from mapping.operations.log_dirs import memory_room, replica_sizes
from mapping.operations.producer_states import active_producers
from mapping.security.acls import CLUSTER_NAME, ResourceType
from mapping.topic.topic_config import TopicConfig

# Kafka's max.request.partition.size.limit (its default): partitions a response carries at most
MAX_RESPONSE_PARTITIONS = 2000

TopicPartitions = DESCRIBE_TOPIC_PARTITIONS.response
Described = TopicPartitions.DescribeTopicPartitionsResponseTopic
DescribedPartition = Described.DescribeTopicPartitionsResponsePartition


async def describe_topic_partitions(context: KafkaContext, request: Request) -> Any:
    body = request.body
    every_topic = not body.topics
    cursor = body.cursor
    first_name = cursor.topic_name if cursor is not None else ""
    if every_topic:
        try:
            names = await context.pod.topics.names()
        except BrokerError:
            names = []  # Redis unreachable: nothing to list (clients ask again)
    else:
        names = [t.name for t in body.topics if t.name is not None]
    asked = sorted({n for n in names if n >= first_name})
    if cursor is not None and (
        cursor.partition_index < 0 or (not every_topic and cursor.topic_name not in asked)
    ):
        return TopicPartitions[request.version](
            throttle_time_ms=0,
            topics=[_topic_error(t.name, errors.INVALID_REQUEST) for t in body.topics],
            next_cursor=None,
        )
    denied = await authorization.denied(
        context, request, authorization.DESCRIBE, authorization.TOPIC, asked,
        audited=not every_topic,
    )  # fmt: skip
    brokers = await context.brokers()
    remaining = max(min(MAX_RESPONSE_PARTITIONS, body.response_partition_limit), 1)
    topics, next_cursor = [], None
    for name in (n for n in asked if n not in denied):
        if remaining == 0:  # the next response starts with this topic
            next_cursor = TopicPartitions.Cursor(topic_name=name, partition_index=0)
            break
        entry = await topic_entry(context, brokers, name, create=False)
        if entry.error_code != errors.NONE:
            if not every_topic:  # (a listed topic deleted meanwhile is left out)
                topics.append(_topic_error(name, entry.error_code, entry.is_internal))
            continue
        start = cursor.partition_index if cursor is not None and name == first_name else 0
        end = min(len(entry.partitions), start + remaining)
        topics.append(
            Described(
                error_code=errors.NONE,
                name=name,
                topic_id=entry.topic_id,
                is_internal=entry.is_internal,
                partitions=[_partition(p) for p in entry.partitions[start:end]],
                topic_authorized_operations=operations_bitfield(
                    authorized_operations(
                        context, request, ResourceType.TOPIC, name, TOPIC_OPERATIONS
                    )
                ),
            )
        )
        if end < len(entry.partitions):
            next_cursor = TopicPartitions.Cursor(topic_name=name, partition_index=end)
            break
        remaining -= max(end - start, 0)
    if not every_topic:  # named and refused: answered last, without their ids
        topics += [_topic_error(n, errors.TOPIC_AUTHORIZATION_FAILED) for n in sorted(denied)]
    return TopicPartitions[request.version](
        throttle_time_ms=0, topics=topics, next_cursor=next_cursor
    )


def _topic_error(name: str | None, code: int, internal: bool = False) -> Any:
    return Described(
        error_code=code, name=name, topic_id=NO_TOPIC_ID, is_internal=internal, partitions=[]
    )


def _partition(p: Any) -> Any:
    """A Metadata partition entry as DescribeTopicPartitions carries it (no ELR: Kafka 3.9's
    eligible leader replicas are off by default, and the pods have none)."""
    return DescribedPartition(
        error_code=p.error_code,
        partition_index=p.partition_index,
        leader_id=p.leader_id,
        leader_epoch=p.leader_epoch,
        replica_nodes=p.replica_nodes,
        isr_nodes=p.isr_nodes,
        eligible_leader_replicas=None,
        last_known_elr=None,
        offline_replicas=p.offline_replicas,
    )


LogDirs = DESCRIBE_LOG_DIRS.response
LogDir = LogDirs.DescribeLogDirsResult
LogDirTopic = LogDir.DescribeLogDirsTopic
LogDirPartition = LogDirTopic.DescribeLogDirsPartition


async def describe_log_dirs(context: KafkaContext, request: Request) -> Any:
    version = request.version
    answer = LogDirs[version](throttle_time_ms=0, results=[])
    if version >= 3:
        answer.error_code = errors.NONE
    if not await authorization.allowed(
        context, request, authorization.DESCRIBE, authorization.CLUSTER, CLUSTER_NAME
    ):
        if version >= 3:
            answer.error_code = errors.CLUSTER_AUTHORIZATION_FAILED
        return answer
    log_dir = f"/redis/{context.pod.keys.prefix}"
    try:
        topics = await _hosted_here(context, request.body.topics)
        total, usable = await memory_room(context.pod.client)
    except (BrokerError, RedisError, OSError):
        result = LogDir(error_code=errors.KAFKA_STORAGE_ERROR, log_dir=log_dir, topics=[])
    else:
        result = LogDir(error_code=errors.NONE, log_dir=log_dir, topics=topics)
        if version >= 4:
            result.total_bytes, result.usable_bytes = total, usable
    answer.results = [result]
    return answer


async def _hosted_here(context: KafkaContext, asked: list[Any] | None) -> list[Any]:
    """The DescribeLogDirs topics of the replicas this broker holds among ``asked`` (None:
    every topic's every partition); partitions of no topic are left out, as a Kafka broker
    leaves out what it does not host."""
    wanted: list[tuple[TopicConfig, list[int]]] = []
    if asked is None:
        for name in await context.pod.topics.names():
            config = await context.find_topic(name)
            if config is not None:
                wanted.append((config, list(range(config.partitions))))
    else:
        named: dict[str, set[int]] = {}  # (a topic named twice is one topic, as in Kafka)
        for topic in asked:
            named.setdefault(topic.topic, set()).update(topic.partitions or ())
        for name, indexes in named.items():
            config = await context.find_topic(name)
            if config is not None:
                wanted.append((config, sorted(p for p in indexes if 0 <= p < config.partitions)))
    brokers = await context.brokers()
    here = _this_broker(context, brokers)
    every: list[tuple[TopicConfig, int, list[int] | None]] = []
    for config, indexes in wanted:
        assigned = config.replica_assignment()  # (parsed once a topic)
        every += [(config, p, assigned.get(p)) for p in indexes]
    found = await asyncio.gather(
        *(_replicas_here(context, brokers, here, c, p, named) for c, p, named in every)
    )
    by_topic: dict[str, list[Any]] = {}
    for (config, _, _), partition in zip(every, found, strict=True):
        if partition is not None:
            by_topic.setdefault(config.name, []).append(partition)
    return [LogDirTopic(name=n, partitions=ps) for n, ps in sorted(by_topic.items())]


def _this_broker(context: KafkaContext, brokers: list[tuple[int, str, int]]) -> int | None:
    """This pod's broker id: the broker at its advertised address (pods behind one address
    are one broker), else its own registration's."""
    here = (context.advertised_host, context.advertised_port)
    return next((n for n, h, p in brokers if (h, p) == here), context.registry.node_id)


async def _replicas_here(
    context: KafkaContext,
    brokers: list[tuple[int, str, int]],
    here: int | None,
    config: TopicConfig,
    partition: int,
    named: list[int] | None,
) -> Any | None:
    """The partition's entry when this broker holds a replica of it (``named``: the replicas
    CreateTopics assigned it, if any), else None."""
    every = list(range(config.replication_factor))
    replicas, _ = reported_replicas(
        brokers, config.name, partition, config.replication_factor, every, named
    )
    mine = [r for r, node in enumerate(replicas) if node == here]
    if not mine:
        return None
    pod = context.pod
    sizes = await replica_sizes(pod.batcher, pod.keys, config.name, partition, mine)
    return LogDirPartition(
        partition_index=partition,
        partition_size=sum(s.bytes for s in sizes.values()),
        offset_lag=max(s.offset_lag for s in sizes.values()),
        is_future_key=False,
    )


Producers = DESCRIBE_PRODUCERS.response
ProducersTopic = Producers.TopicResponse
ProducersPartition = ProducersTopic.PartitionResponse
ActiveProducer = ProducersPartition.ProducerState


async def describe_producers(context: KafkaContext, request: Request) -> Any:
    asked = request.body.topics or ()
    refused = await authorization.denied(
        context, request, authorization.READ, authorization.TOPIC, (t.name for t in asked)
    )
    topics = []
    for topic in asked:
        indexes = list(topic.partition_indexes or ())
        code = errors.NONE
        config = None
        try:
            if topic.name is None or not is_valid_name(topic.name):
                code = errors.INVALID_TOPIC_EXCEPTION
            elif topic.name in refused:
                code = errors.TOPIC_AUTHORIZATION_FAILED
            else:
                config = await context.find_topic(topic.name)
                if config is None:
                    code = errors.UNKNOWN_TOPIC_OR_PARTITION
        except BrokerError as exc:
            code = error_of(exc)
        if config is None:
            partitions = [ProducersPartition(partition_index=p, error_code=code) for p in indexes]
        else:
            partitions = list(
                await asyncio.gather(*(_producers_of(context, config, p) for p in indexes))
            )
        topics.append(ProducersTopic(name=topic.name, partitions=partitions))
    return Producers[request.version](throttle_time_ms=0, topics=topics)


async def _producers_of(context: KafkaContext, config: TopicConfig, partition: int) -> Any:
    if not 0 <= partition < config.partitions:
        return ProducersPartition(
            partition_index=partition, error_code=errors.UNKNOWN_TOPIC_OR_PARTITION
        )
    pod = context.pod
    try:
        found = await active_producers(
            pod.batcher, pod.keys, config.name, partition,
            pod.settings.kafka_producer_id_expiration_ms,
        )  # fmt: skip
    except BrokerError as exc:
        return ProducersPartition(partition_index=partition, error_code=error_of(exc))
    return ProducersPartition(
        partition_index=partition,
        error_code=errors.NONE,
        active_producers=[
            ActiveProducer(
                producer_id=s.producer_id,
                producer_epoch=s.epoch,
                last_sequence=s.last_sequence,
                last_timestamp=s.last_timestamp,
                coordinator_epoch=-1,
                current_txn_start_offset=s.txn_start_offset,
            )
            for s in found
        ],
    )
