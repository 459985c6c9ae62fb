"""Admin APIs: CreateTopics (partitions, replication factor, ``retention.ms``,
``retention.bytes``, ``min.insync.replicas``), DescribeConfigs for those,
IncrementalAlterConfigs (retention), DeleteRecords, DescribeCluster, DeleteTopics and
CreatePartitions (grow only).

Topics are created with the same script as V1's first use and ``adapter topic create``
(mapping/topics.py); retention lives in the topic hash as the CLI writes it, so
the pod's retention task, ``inspect`` and ``topic describe`` see Kafka-made topics like any
other. DeleteTopics and CreatePartitions use mapping/admin.py's ``delete_topic`` and
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
from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext, topic_id_of
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from mapping.admin import InvalidPartitions, add_partitions, delete_topic
from mapping.errors import BrokerError
from mapping.inspection import retention_of
from mapping.keys import is_valid_name
from mapping.topic_config import (
    MAX_PARTITIONS,
    MAX_REPLICATION_FACTOR,
    RETENTION_BYTES,
    RETENTION_MS,
    is_internal_topic,
)

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
CONFIG_TYPE_INT, CONFIG_TYPE_LONG, CONFIG_TYPE_STRING = 3, 5, 2
# Kafka config name -> its config type
TOPIC_CONFIGS = {
    "retention.ms": CONFIG_TYPE_LONG,
    "retention.bytes": CONFIG_TYPE_LONG,
    "min.insync.replicas": CONFIG_TYPE_INT,
}
# The Kafka configs that change after creation -> their topic config (mapping/topics.py);
# -1 means "no limit"
RETENTION_CONFIGS = {"retention.ms": RETENTION_MS, "retention.bytes": RETENTION_BYTES}


class _Invalid(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _integer(name: str, value: str | None) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise _Invalid(errors.INVALID_CONFIG, f"{name} must be an integer") from None


async def create_topics(context: KafkaContext, request: Request) -> Any:
    response = CREATE_TOPICS.response
    results = []
    for topic in request.body.topics or ():  # an array sent as null: none
        result = response.CreatableTopicResult(name=topic.name, error_code=errors.NONE)
        try:
            partitions, factor, min_isr, retention = _settings(context, topic)
            if await context.find_topic(topic.name) is not None:
                raise _Invalid(errors.TOPIC_ALREADY_EXISTS, f"topic {topic.name} exists")
            if not request.body.validate_only:
                config, created = await context.pod.topics.create(
                    topic.name, partitions, factor, min_isr
                )
                if not created:
                    raise _Invalid(errors.TOPIC_ALREADY_EXISTS, f"topic {topic.name} exists")
                result.topic_id = topic_id_of(config)  # (v7+)
                if retention:
                    await context.pod.topics.alter_configs(topic.name, retention)
            result.num_partitions, result.replication_factor = partitions, factor
            result.configs = []
        except _Invalid as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, topics=results)


def _settings(context: KafkaContext, topic: Any) -> tuple[int, int, int, dict[str, int | None]]:
    if not is_valid_name(topic.name or ""):
        raise _Invalid(errors.INVALID_TOPIC_EXCEPTION, "names are 1-249 of [A-Za-z0-9._-]")
    if is_internal_topic(topic.name):  # Kafka's words for __cluster_metadata
        raise _Invalid(
            errors.INVALID_REQUEST, f"Creation of internal topic {topic.name} is prohibited."
        )
    if topic.assignments:
        raise _Invalid(errors.INVALID_REPLICA_ASSIGNMENT, "replica assignments are not supported")
    defaults = context.pod.settings.topic_defaults
    partitions = defaults.partitions if topic.num_partitions == -1 else topic.num_partitions
    factor = (
        defaults.replication_factor if topic.replication_factor == -1 else topic.replication_factor
    )
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise _Invalid(errors.INVALID_PARTITIONS, f"partitions must be 1..{MAX_PARTITIONS}")
    if not 1 <= factor <= MAX_REPLICATION_FACTOR:
        raise _Invalid(
            errors.INVALID_REPLICATION_FACTOR,
            f"replication factor must be 1..{MAX_REPLICATION_FACTOR}",
        )
    min_isr = min(defaults.min_insync_replicas, factor)
    retention: dict[str, int | None] = {}
    for config in topic.configs or []:
        if config.name not in TOPIC_CONFIGS:
            raise _Invalid(errors.INVALID_CONFIG, f"config {config.name} is not supported")
        value = _integer(config.name, config.value)
        if config.name == "min.insync.replicas":
            if not 1 <= value <= factor:
                raise _Invalid(errors.INVALID_CONFIG, "min.insync.replicas must be 1..RF")
            min_isr = value
        else:
            retention[RETENTION_CONFIGS[config.name]] = value
    return partitions, factor, min_isr, retention


async def describe_configs(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_CONFIGS.response
    Result = response.DescribeConfigsResult
    Entry = Result.DescribeConfigsResourceResult
    results = []
    for resource in request.body.resources or ():
        result = Result(
            error_code=errors.NONE, error_message=None, resource_type=resource.resource_type,
            resource_name=resource.resource_name, configs=[],
        )  # fmt: skip
        wanted = resource.configuration_keys
        if resource.resource_type == BROKER_RESOURCE:
            results.append(result)  # no broker configs are exposed
            continue
        if resource.resource_type != TOPIC_RESOURCE:
            result.error_code = errors.INVALID_REQUEST
            result.error_message = "only topic and broker resources are described"
            results.append(result)
            continue
        try:
            config = await context.find_topic(resource.resource_name)
            if config is None:
                result.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
                result.error_message = f"topic {resource.resource_name} does not exist"
                results.append(result)
                continue
            fields = await context.pod.topics.read_settings(resource.resource_name)
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
            results.append(result)
            continue
        retention = retention_of(fields)
        values = {
            "retention.ms": (retention.ms, RETENTION_MS in fields),
            "retention.bytes": (retention.bytes, RETENTION_BYTES in fields),
            "min.insync.replicas": (config.min_insync_replicas, True),
        }
        for name, (value, is_set) in values.items():
            if wanted is not None and name not in wanted:
                continue
            result.configs.append(
                Entry(
                    name=name, value=str(value), read_only=False,
                    config_source=DYNAMIC_TOPIC_CONFIG if is_set else DEFAULT_CONFIG,
                    is_default=not is_set, is_sensitive=False, synonyms=[],
                    config_type=TOPIC_CONFIGS[name], documentation=None,
                )
            )  # fmt: skip
        results.append(result)
    return response[request.version](throttle_time_ms=0, results=results)


async def describe_cluster(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_CLUSTER.response
    brokers = await context.brokers()
    return response[request.version](
        throttle_time_ms=0,
        error_code=errors.NONE,
        error_message=None,
        cluster_id=context.cluster_id,
        controller_id=brokers[0][0],
        brokers=[
            response.DescribeClusterBroker(broker_id=n, host=h, port=p, rack=None)
            for n, h, p in brokers
        ],
    )


SET, DELETE = 0, 1


async def incremental_alter_configs(context: KafkaContext, request: Request) -> Any:
    """SET or DELETE ``retention.ms`` / ``retention.bytes`` of topics (the retention task
    reads them from the topic hash on each run). ``min.insync.replicas`` is fixed at
    creation (pods cache it)."""
    response = INCREMENTAL_ALTER_CONFIGS.response
    results = []
    for resource in request.body.resources or ():
        result = response.AlterConfigsResourceResponse(
            error_code=errors.NONE, error_message=None,
            resource_type=resource.resource_type, resource_name=resource.resource_name,
        )  # fmt: skip
        try:
            if resource.resource_type != TOPIC_RESOURCE:
                raise _Invalid(errors.INVALID_REQUEST, "only topic configs can be altered")
            # topic config -> its new value (None: back to the default); a later change of
            # one config replaces an earlier one, as applying them in order would
            changes: dict[str, int | None] = {}
            for config in resource.configs or ():
                if config.name not in RETENTION_CONFIGS:
                    raise _Invalid(errors.INVALID_CONFIG, f"{config.name} cannot be altered")
                field = RETENTION_CONFIGS[config.name]
                if config.config_operation == SET:
                    changes[field] = _integer(config.name, config.value)
                elif config.config_operation == DELETE:
                    changes[field] = None
                else:
                    raise _Invalid(errors.INVALID_CONFIG, f"{config.name} is not a list")
            if await context.find_topic(resource.resource_name) is None:
                raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, "no such topic")
            if not request.body.validate_only:
                await context.pod.topics.alter_configs(resource.resource_name, changes)
        except _Invalid as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, responses=results)


async def delete_records(context: KafkaContext, request: Request) -> Any:
    """Remove records below an offset (-1: below the high watermark); fetches below the new
    log start are then OFFSET_OUT_OF_RANGE, as after retention."""
    response = DELETE_RECORDS.response
    TopicResult = response.DeleteRecordsTopicResult
    PartitionResult = TopicResult.DeleteRecordsPartitionResult
    topics = []
    for topic in request.body.topics or ():
        parts = []
        for p in topic.partitions or ():
            code, low = errors.NONE, -1
            try:
                config = await context.find_topic(topic.name)
                if config is None or not 0 <= p.partition_index < config.partitions:
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
        if name is None:
            result.error_code = errors.UNKNOWN_TOPIC_ID
            result.error_message = f"no topic has the id {topic_id}"
        elif not is_valid_name(name):
            result.error_code = errors.UNKNOWN_TOPIC_OR_PARTITION
            result.error_message = "names are 1-249 of [A-Za-z0-9._-]"
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


async def create_partitions(context: KafkaContext, request: Request) -> Any:
    """Grow topics' partition counts (never shrink: INVALID_PARTITIONS, as Kafka)."""
    response = CREATE_PARTITIONS.response
    results = []
    for topic in request.body.topics or ():
        result = response.CreatePartitionsTopicResult(name=topic.name, error_code=errors.NONE)
        try:
            if topic.assignments:
                raise _Invalid(
                    errors.INVALID_REPLICA_ASSIGNMENT, "replica assignments are not supported"
                )
            if not is_valid_name(topic.name or ""):
                raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
            if not 1 <= topic.count <= MAX_PARTITIONS:
                raise _Invalid(errors.INVALID_PARTITIONS, f"count must be 1..{MAX_PARTITIONS}")
            growth = await add_partitions(
                context.pod.topics,
                topic.name,
                topic.count,
                validate_only=request.body.validate_only,
            )
            if growth is None:
                raise _Invalid(errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic.name}")
        except InvalidPartitions as exc:
            result.error_code, result.error_message = errors.INVALID_PARTITIONS, str(exc)
        except _Invalid as exc:
            result.error_code, result.error_message = exc.code, exc.message
        except BrokerError as exc:
            result.error_code, result.error_message = error_of(exc), exc.message
        results.append(result)
    return response[request.version](throttle_time_ms=0, results=results)
