"""Admin APIs: CreateTopics (any topic config of the catalogue, validated as Kafka does;
explicit replica assignments over live brokers), DeleteRecords, DescribeCluster, DeleteTopics
and CreatePartitions (grow only). The config APIs are in adapter/kafka/configs.py.

Topics are created with the same script as V1's first use and ``adapter topic create``
(mapping/topic/topics.py); retention lives in the topic hash as the CLI writes it, so
the pod's retention task, ``inspect`` and ``topic describe`` see Kafka-made topics like any
other. DeleteTopics and CreatePartitions use mapping/operations/topic_lifecycle.py's
``delete_topic`` and
``add_partitions``, as ``adapter topic delete`` and ``adapter topic alter --partitions`` do:
every pod hears of the change (pub/sub) and forgets the topic's cached settings.

Each created topic gets a new random id, stored with it (CreateTopics v7+ answers it);
DeleteTopics by id deletes the topic only while it still has that id. Names Kafka reserves
for its internal topics (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``, ``__cluster_metadata``) are refused with INVALID_REQUEST, as Kafka
refuses ``__cluster_metadata``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.config_views import static_broker_configs, topic_view
from adapter.kafka.context import KafkaContext, topic_id_of
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
)
from mapping.core.errors import BrokerError
from mapping.core.keys import is_valid_name
from mapping.group.offsets_topic import OFFSETS_TOPIC
from mapping.operations.topic_lifecycle import InvalidPartitions, add_partitions, delete_topic
from mapping.security.acls import CLUSTER_NAME, Operation, ResourceType
from mapping.topic.config_types import InvalidConfig
from mapping.topic.topic_config import (
    MAX_PARTITIONS,
    MAX_REPLICATION_FACTOR,
    TopicConfig,
    config_field,
    is_internal_topic,
)
from mapping.topic.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS, check_topic_configs

# Kafka's AclOperation codes: with no ACLs every operation a resource type supports is
# allowed, and Kafka's bitfields of authorized operations say so (1 << code each).
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12
# (kafka-python's schemas carry the bitfields as sets of bit positions)
CLUSTER_OPERATIONS = frozenset(
    {CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE}
)
# Why DeleteTopics and CreatePartitions leave Kafka's internal topics alone, as a Kafka
# cluster answers a client without the rights (TOPIC_AUTHORIZATION_FAILED).
MIRROR_OWNED = (
    f"internal topic: {OFFSETS_TOPIC} is the pods' mirror of the committed offsets "
    "(see --offsets-topic)"
)
TOPIC_OPERATIONS = frozenset(
    {READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS}
)
NOT_ASKED = frozenset({31})  # -2147483648: Kafka's "authorized operations not requested"


def authorized_operations(
    context: KafkaContext,
    request: Request,
    resource_type: ResourceType,
    name: str,
    everything: frozenset[int],
) -> set[int]:
    """The bit positions of the operations the request's principal may do on the resource:
    ``everything`` (all the type supports) with the authorizer off, else its ACLs' answer."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return set(everything)
    allowed = authorizer.operations(request.principal, request.client_host, resource_type, name)
    return {int(operation) for operation in allowed}


def operations_bitfield(operations: Iterable[int]) -> int:
    """Kafka's int32 of authorized operations, for the schemas that carry the number itself
    (ShareGroupDescribe, DescribeTopicPartitions) rather than kafka-python's set of bits."""
    value = sum(1 << op for op in set(operations))
    return value - (1 << 32) if value >= 1 << 31 else value


class _Invalid(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class _NewTopic:
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    configs: dict[str, str]  # Kafka name -> text, validated (min.insync.replicas apart)
    assignment: dict[int, list[int]]  # explicit replicas by partition (none: {})


async def create_topics(context: KafkaContext, request: Request) -> Any:
    response = CREATE_TOPICS.response
    results = []
    refused, unseen = await _creation_refusals(context, request)
    for topic in request.body.topics or ():  # an array sent as null: none
        # a null message on success, as Kafka's controller sets it (the schema's default: "")
        result = response.CreatableTopicResult(
            name=topic.name, error_code=errors.NONE, error_message=None
        )
        try:
            if topic.name in refused and not is_internal_topic(topic.name):
                raise _Invalid(errors.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            wanted = await _settings(context, topic)
            if await context.find_topic(topic.name) is not None:
                raise _Invalid(errors.TOPIC_ALREADY_EXISTS, f"Topic '{topic.name}' already exists.")
            config = TopicConfig(
                topic.name, wanted.partitions, wanted.replication_factor,
                wanted.min_insync_replicas,
                overrides=tuple((config_field(n), v) for n, v in wanted.configs.items()),
                broker_defaults=context.pod.topics.broker_defaults,
            )  # fmt: skip
            if not request.body.validate_only:
                config = await _create(context, topic.name, wanted)
                result.topic_id = topic_id_of(config)  # (v7+)
            result.num_partitions = wanted.partitions
            result.replication_factor = wanted.replication_factor
            if topic.name in unseen:  # configs only with DESCRIBE_CONFIGS (as Kafka)
                result.topic_config_error_code = errors.TOPIC_AUTHORIZATION_FAILED
            else:
                result.configs = await _created_configs(context, config, response)
        except _Invalid as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, topics=results)


async def _creation_refusals(context: KafkaContext, request: Request) -> tuple[set[str], set[str]]:
    """The topics the principal may not create (CREATE on neither the cluster nor the
    topic) and those whose configs it may not see (DESCRIBE_CONFIGS); none when off."""
    if not context.authorizer.enabled:
        return set(), set()
    names = {t.name for t in request.body.topics or () if t.name is not None}
    creatable = await authorization.may_create_topics(context, request, names)
    unseen = await authorization.denied(
        context, request, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names
    )
    return names - creatable, unseen


async def _create(context: KafkaContext, name: str, wanted: _NewTopic) -> TopicConfig:
    topics = context.pod.topics
    config, created = await topics.create(
        name, wanted.partitions, wanted.replication_factor, wanted.min_insync_replicas
    )
    if not created:
        raise _Invalid(errors.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    if wanted.configs:
        await topics.alter_configs(name, {config_field(n): v for n, v in wanted.configs.items()})
    await topics.assign_replicas(name, wanted.assignment)
    if wanted.configs or wanted.assignment:
        config = await topics.read(name) or config
    return config


async def _created_configs(context: KafkaContext, config: TopicConfig, response: Any) -> list:
    """CreateTopics v5+: every config of the new topic, with its source."""
    dynamic = await context.pod.configs.load()
    static = static_broker_configs(
        context.pod.settings, context.registry.node_id or 0,
        context.advertised_host, context.advertised_port,
    )  # fmt: skip
    Entry = response.CreatableTopicResult.CreatableTopicConfigs
    entries = []
    for name in TOPIC_CONFIGS:
        view = topic_view(config, name, dynamic, static)
        entries.append(Entry(name=name, value=view.value, read_only=False,
                             config_source=int(view.source), is_sensitive=False))  # fmt: skip
    return entries


async def _settings(context: KafkaContext, topic: Any) -> _NewTopic:
    if not is_valid_name(topic.name or ""):
        raise _Invalid(errors.INVALID_TOPIC_EXCEPTION, "names are 1-249 of [A-Za-z0-9._-]")
    if is_internal_topic(topic.name):  # Kafka's words for __cluster_metadata
        raise _Invalid(
            errors.INVALID_REQUEST, f"Creation of internal topic {topic.name} is prohibited."
        )
    defaults = context.pod.settings.topic_defaults
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Invalid(
                errors.INVALID_REQUEST,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        assignment = await _from_assignments(context, topic.assignments)
        partitions, factor = len(assignment), len(assignment[0])
    else:
        assignment = {}
        partitions = defaults.partitions if topic.num_partitions == -1 else topic.num_partitions
        factor = (
            defaults.replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise _Invalid(errors.INVALID_PARTITIONS, f"partitions must be 1..{MAX_PARTITIONS}")
    if not 1 <= factor <= MAX_REPLICATION_FACTOR:
        raise _Invalid(
            errors.INVALID_REPLICATION_FACTOR,
            f"replication factor must be 1..{MAX_REPLICATION_FACTOR}",
        )
    given = [(config.name, config.value) for config in topic.configs or ()]
    nulls = [name for name, value in given if value is None]
    if nulls:
        raise _Invalid(
            errors.INVALID_CONFIG, f"Null value not supported for topic configs: {','.join(nulls)}"
        )
    configs = {name: value for name, value in given if value is not None}
    try:
        values = check_topic_configs(configs)
    except InvalidConfig as exc:
        raise _Invalid(errors.INVALID_CONFIG, str(exc)) from None
    # min ISR above RF is allowed, as Kafka allows it (acks=all then gets NOT_ENOUGH_REPLICAS)
    min_isr = values.pop(MIN_INSYNC_REPLICAS, None)
    if min_isr is None:
        min_isr = min(context.pod.topics.default_min_isr(), factor)
    configs.pop(MIN_INSYNC_REPLICAS, None)
    return _NewTopic(partitions, factor, min_isr, configs, assignment)


async def _from_assignments(context: KafkaContext, assignments: Any) -> dict[int, list[int]]:
    """Explicit replica assignments by partition, checked: every
    broker id must name a live broker (the pods' registry), partitions 0..n-1, one
    replication factor, no broker twice in a partition (else INVALID_REPLICA_ASSIGNMENT)."""
    indexes = sorted(a.partition_index for a in assignments)
    if indexes != list(range(len(indexes))):
        raise _Invalid(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "partitions should be a consecutive 0-based integer sequence",
        )
    factors = {len(a.broker_ids or ()) for a in assignments}
    await _check_brokers(context, [a.broker_ids or [] for a in assignments])
    if len(factors) != 1:
        raise _Invalid(
            errors.INVALID_REPLICA_ASSIGNMENT,
            "All partitions should have the same number of replicas",
        )
    return {a.partition_index: list(a.broker_ids) for a in assignments}


async def _check_brokers(context: KafkaContext, replicas: list[list[int]]) -> None:
    live = {node for node, _, _ in await context.brokers()}
    for brokers in replicas:
        if not brokers:
            raise _Invalid(errors.INVALID_REPLICA_ASSIGNMENT, "Replica assignment is empty")
        if len(set(brokers)) != len(brokers):
            raise _Invalid(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"Duplicate brokers not allowed in replica assignment: {brokers}",
            )
        dead = sorted(set(brokers) - live)
        if dead:
            raise _Invalid(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker(s) {dead} that are not "
                f"registered (live brokers: {sorted(live)})",
            )


async def describe_cluster(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_CLUSTER.response
    brokers = await context.brokers()
    return response[request.version](
        throttle_time_ms=0,
        error_code=errors.NONE,
        error_message=None,
        cluster_id=context.cluster_id,
        controller_id=context.controller(brokers),
        authorized_operations=(
            authorized_operations(
                context, request, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS
            )
            if getattr(request.body, "include_cluster_authorized_operations", False)
            else set(NOT_ASKED)
        ),
        brokers=[
            response.DescribeClusterBroker(broker_id=n, host=h, port=p, rack=None)
            for n, h, p in brokers
        ],
    )


async def delete_records(context: KafkaContext, request: Request) -> Any:
    """Remove records below an offset (-1: below the high watermark); fetches below the new
    log start are then OFFSET_OUT_OF_RANGE, as after retention."""
    response = DELETE_RECORDS.response
    TopicResult = response.DeleteRecordsTopicResult
    PartitionResult = TopicResult.DeleteRecordsPartitionResult
    refused = await authorization.denied(
        context, request, Operation.DELETE, ResourceType.TOPIC,
        (t.name for t in request.body.topics or ()),
    )  # fmt: skip
    topics = []
    for topic in request.body.topics or ():
        parts = []
        for p in topic.partitions or ():
            code, low = errors.NONE, -1
            try:
                config = await context.find_topic(topic.name)
                if topic.name in refused:  # DELETE on the topic, before it is looked at
                    code = errors.TOPIC_AUTHORIZATION_FAILED
                elif is_internal_topic(topic.name):  # Kafka's answer (ReplicaManager)
                    code = errors.INVALID_TOPIC_EXCEPTION
                elif config is None or not 0 <= p.partition_index < config.partitions:
                    code = errors.UNKNOWN_TOPIC_OR_PARTITION
                elif p.offset < -1:  # -1: up to the high watermark; below: no offset
                    code = errors.OFFSET_OUT_OF_RANGE
                else:
                    start = await context.pod.kafka.delete_records(
                        config, p.partition_index, p.offset
                    )
                    if start is None:
                        code = errors.OFFSET_OUT_OF_RANGE
                    else:
                        low = start
            except BrokerError as exc:
                code = error_of(exc)
            parts.append(PartitionResult(partition_index=p.partition_index, low_watermark=low,
                                         error_code=code))  # fmt: skip
        topics.append(TopicResult(name=topic.name, partitions=parts))
    return response[request.version](throttle_time_ms=0, topics=topics)


async def delete_topics(context: KafkaContext, request: Request) -> Any:
    """By name (v1-5: topic_names; v6: topics with a name or an id: an id is looked up
    among the topics' ids, UNKNOWN_TOPIC_ID when none has it, also when the topic of that
    name is another one by the time it would be deleted)."""
    response = DELETE_TOPICS.response
    if request.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.body.topics or ()]
    else:
        wanted = [(name, None) for name in request.body.topic_names or ()]
    results = []
    checked = context.authorizer.enabled
    for name, topic_id in wanted:
        result = response.DeletableTopicResult(name=name, topic_id=topic_id, error_code=errors.NONE)
        by_id = name is None and topic_id is not None and bool(topic_id.int)
        if by_id:
            try:
                name = result.name = await context.topic_name(topic_id)
            except BrokerError as exc:
                result.error_code, result.error_message = error_of(exc), exc.message
                results.append(result)
                continue
        refusal = None
        if checked and name is not None:
            refusal = await _deletion_refusal(context, request, name, by_id)
        if name is None:
            result.error_code = errors.UNKNOWN_TOPIC_ID
            result.error_message = f"no topic has the id {topic_id}"
        elif refusal is not None:
            result.error_code = errors.TOPIC_AUTHORIZATION_FAILED
            if refusal:  # by id without DESCRIBE: the name stays unsaid
                result.name = None
        elif not is_valid_name(name):
            result.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = "names are 1-249 of [A-Za-z0-9._-]"
        elif name == OFFSETS_TOPIC and context.pod.offsets_mirror is not None:
            result.error_code = errors.TOPIC_AUTHORIZATION_FAILED
            result.error_message = MIRROR_OWNED
        else:
            try:
                expected = str(topic_id) if by_id else ""
                deletion = await delete_topic(context.pod.topics, name, expected)
                if deletion is not None and deletion.topic_id:
                    result.topic_id = uuid.UUID(deletion.topic_id)  # (v6: by name too)
                if deletion is None:
                    if by_id:
                        result.error_code = errors.UNKNOWN_TOPIC_ID
                        result.error_message = f"no topic has the id {topic_id}"
                    else:
                        result.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
                        result.error_message = f"no topic {name}"
            except BrokerError as exc:
                result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, responses=results)


async def _deletion_refusal(
    context: KafkaContext, request: Request, name: str, by_id: bool
) -> bool | None:
    """DeleteTopics' checks (Kafka's ControllerApis): DELETE on the cluster allows all;
    by id, DELETE on the topic (else refused, its name said only with DESCRIBE); by name,
    DESCRIBE (else refused), then a missing topic is UNKNOWN_TOPIC_OR_PARTITION, then
    DELETE. None: not refused; else whether the name is to be hidden."""
    if await authorization.allowed(
        context, request, Operation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return None
    describable = await authorization.allowed(
        context, request, Operation.DESCRIBE, ResourceType.TOPIC, name
    )
    deletable = await authorization.allowed(
        context, request, Operation.DELETE, ResourceType.TOPIC, name
    )
    if by_id:
        return None if deletable else not describable
    if not describable:
        return False
    if deletable or not is_valid_name(name) or await context.find_topic(name) is None:
        return None  # (a missing topic: UNKNOWN_TOPIC_OR_PARTITION, as without ACLs)
    return False


async def create_partitions(context: KafkaContext, request: Request) -> Any:
    """Grow topics' partition counts (never shrink: INVALID_PARTITIONS, as Kafka)."""
    response = CREATE_PARTITIONS.response
    results = []
    refused = await authorization.denied(
        context, request, Operation.ALTER, ResourceType.TOPIC,
        (t.name for t in request.body.topics or ()),
    )  # fmt: skip
    for topic in request.body.topics or ():
        result = response.CreatePartitionsTopicResult(name=topic.name, error_code=errors.NONE)
        try:
            if topic.name in refused:
                raise _Invalid(
                    errors.TOPIC_AUTHORIZATION_FAILED, "The topic authorization is failed."
                )
            if not is_valid_name(topic.name or ""):
                raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
            if is_internal_topic(topic.name):
                raise _Invalid(errors.TOPIC_AUTHORIZATION_FAILED, MIRROR_OWNED)
            if not 1 <= topic.count <= MAX_PARTITIONS:
                raise _Invalid(errors.INVALID_PARTITIONS, f"count must be 1..{MAX_PARTITIONS}")
            if topic.assignments:
                await _check_new_assignments(context, topic)
            growth = await add_partitions(
                context.pod.topics,
                topic.name,
                topic.count,
                validate_only=request.body.validate_only,
            )
            if growth is None:
                raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
            if topic.assignments and not request.body.validate_only:
                added = zip(range(growth.before, growth.after), topic.assignments, strict=True)
                await context.pod.topics.assign_replicas(
                    topic.name, {p: list(a.broker_ids) for p, a in added}
                )
        except InvalidPartitions as exc:
            result.error_code, result.error_message = errors.INVALID_PARTITIONS, str(exc)
        except _Invalid as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, results=results)


async def _check_new_assignments(context: KafkaContext, topic: Any) -> None:
    """CreatePartitions' explicit assignments: one per new partition, each of the topic's
    replication factor, over live brokers (else INVALID_REPLICA_ASSIGNMENT, as Kafka)."""
    config = await context.find_topic(topic.name)
    if config is None:
        raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
    added = topic.count - config.partitions
    if len(topic.assignments) != added:
        raise _Invalid(
            errors.INVALID_REPLICA_ASSIGNMENT,
            f"Attempted to add {added} additional partition(s), but only "
            f"{len(topic.assignments)} assignment(s) were specified.",
        )
    replicas = [a.broker_ids or [] for a in topic.assignments]
    await _check_brokers(context, replicas)
    for brokers in replicas:
        if len(brokers) != config.replication_factor:
            raise _Invalid(
                errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes a partition with {len(brokers)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{config.replication_factor} replica(s).",
            )
