"""A topic's settings as the pods hold them: defaults, limits, Kafka's reserved names and
ids, and the configs that change after creation. Pure definitions: mapping/topics.py reads
and writes them in Redis."""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass

# Topic settings one pod keeps in memory at most (the least recently used go first).
DEFAULT_TOPIC_CACHE_SIZE = 10_000
# The most partitions a topic may have (CreateTopics, CreatePartitions, the CLI).
MAX_PARTITIONS = 10_000
# The highest replication factor a topic may have (CreateTopics, the CLI).
MAX_REPLICATION_FACTOR = 16


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2


# Names Kafka reserves for its own topics (Topic.isInternal: group offsets, transactions,
# share groups; and KRaft's metadata log). The pods keep offsets and transactions in their own
# keys, so a topic of one of these names would only mislead Kafka tools: none is ever created
# automatically, and CreateTopics and ``adapter topic create`` refuse them.
KAFKA_INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)


def is_internal_topic(name: str) -> bool:
    """Whether ``name`` is reserved by Kafka (see ``KAFKA_INTERNAL_TOPICS``)."""
    return name in KAFKA_INTERNAL_TOPICS


# Ids Kafka reserves (Uuid.RESERVED): the zero id means "none", the one id is KRaft's
# metadata topic.
_RESERVED_TOPIC_IDS = frozenset({0, 1})


def new_topic_id() -> str:
    """A fresh topic id, as Kafka's Uuid.randomUuid makes them: random, never a reserved
    id, and never one whose base64 form (how Kafka tools print ids) starts with ``-``, which
    command lines would read as an option."""
    while True:
        candidate = uuid.uuid4()
        text = base64.urlsafe_b64encode(candidate.bytes).decode()
        if candidate.int not in _RESERVED_TOPIC_IDS and not text.startswith("-"):
            return str(candidate)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    # Random at each creation, stored in the topic hash (see topic/ensure.lua): a topic
    # deleted and made again is another topic to Kafka clients. "" only where a caller
    # builds a config without reading Redis.
    topic_id: str = ""
    # The topic hash's other fields: the configs set on this topic (field name: the Kafka
    # config name with '_' for '.', as ``retention_ms``), as (field, text) pairs. A config
    # not here has its default. Pods cache them with the topic and read them again when a
    # config changes (Topics.alter_configs announces it).
    overrides: tuple[tuple[str, str], ...] = ()
    # The cluster-wide topic defaults set on Kafka's BROKER resource (``log.retention.ms``
    # ...: mapping/broker_configs.py) as (field, text) pairs in the topic config's unit, as
    # they were when the pod read the topic; pods read every topic again when they change.
    # mapping.topic_configs.value_of reads a config from overrides, then these.
    broker_defaults: tuple[tuple[str, str], ...] = ()

    def config(self, field: str) -> str | None:
        """The text of config ``field`` set on this topic, None when it has its default."""
        for name, value in self.overrides:
            if name == field:
                return value
        return None


# The topic hash's fields that are not configs: its shape and identity (topic/ensure.lua).
STRUCTURAL_FIELDS = frozenset(
    {"partitions", "replication_factor", "min_insync_replicas", "created_ms", "topic_id"}
)


def config_field(kafka_name: str) -> str:
    """The topic hash field that stores Kafka config ``kafka_name`` (``cleanup.policy`` ->
    ``cleanup_policy``)."""
    return kafka_name.replace(".", "_")


@dataclass(frozen=True, slots=True)
class EnsuredTopic:
    """What topic/ensure.lua answered: the settings, whether this call created the topic,
    and whether it gave a topic made by older code its id (both need announcing)."""

    config: TopicConfig
    created: bool
    id_assigned: bool


# The topic hash's configs that change after creation (retention: the retention task reads
# them on each run, mapping.inspection.retention_of decodes them; the configs enforced where
# records are written and read: see the readers below); absent: the default.
RETENTION_MS = "retention_ms"
RETENTION_BYTES = "retention_bytes"
RETENTION_IGNORE_GROUPS = "retention_ignore_groups"
MIN_INSYNC_REPLICAS = "min_insync_replicas"
MAX_MESSAGE_BYTES = config_field("max.message.bytes")
TIMESTAMP_TYPE = config_field("message.timestamp.type")
TIMESTAMP_BEFORE_MAX_MS = config_field("message.timestamp.before.max.ms")
TIMESTAMP_AFTER_MAX_MS = config_field("message.timestamp.after.max.ms")
TIMESTAMP_DIFFERENCE_MAX_MS = config_field("message.timestamp.difference.max.ms")
COMPRESSION_TYPE = config_field("compression.type")
ENFORCED_CONFIGS = frozenset(
    {
        MIN_INSYNC_REPLICAS,
        MAX_MESSAGE_BYTES,
        TIMESTAMP_TYPE,
        TIMESTAMP_BEFORE_MAX_MS,
        TIMESTAMP_AFTER_MAX_MS,
        TIMESTAMP_DIFFERENCE_MAX_MS,
        COMPRESSION_TYPE,
    }
)
ALTERABLE_CONFIGS = (
    frozenset({RETENTION_MS, RETENTION_BYTES, RETENTION_IGNORE_GROUPS}) | ENFORCED_CONFIGS
)

# Kafka's defaults of the enforced configs (LogConfig, ServerLogConfigs). The readers below
# are the one place that parses them: the configs catalogue's typed ``value_of`` (with the
# cluster's broker defaults) replaces their bodies.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # 1 MiB + Records.LOG_OVERHEAD
NO_TIMESTAMP_LIMIT = 9_223_372_036_854_775_807  # Long.MAX_VALUE: no bound
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"
# compression.type's values (BrokerCompressionType): "producer" keeps the producer's codec,
# "uncompressed" none; the codecs are aiokafka's codec numbers (RecordBatch attributes).
COMPRESSION_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
DEFAULT_COMPRESSION_TYPE = "producer"


def _integer(config: TopicConfig, field: str, default: int) -> int:
    """Config ``field`` as an integer; its default when unset or not a number (the admin
    APIs validate what they store: a bad value here was written around them)."""
    text = config.config(field)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        return default


def max_message_bytes(config: TopicConfig, broker_default: int = DEFAULT_MAX_MESSAGE_BYTES) -> int:
    """The largest RecordBatch topic ``config`` takes (max.message.bytes; unset: the broker's
    message.max.bytes, ``broker_default``, the pod's ``--kafka-max-message-bytes``)."""
    return _integer(config, MAX_MESSAGE_BYTES, broker_default)


def log_append_time(config: TopicConfig) -> bool:
    """Whether topic ``config`` stamps records with their append time (message.timestamp.type
    LogAppendTime) rather than keeping the producer's (CreateTime, the default)."""
    return config.config(TIMESTAMP_TYPE) == LOG_APPEND_TIME


def timestamp_bounds(config: TopicConfig) -> tuple[int, int]:
    """(before, after): how far a CreateTime record's timestamp may lie before / after the
    broker's clock (message.timestamp.before.max.ms / after.max.ms; where one is unset, the
    deprecated message.timestamp.difference.max.ms stands in, as LogConfig does)."""
    difference = _integer(config, TIMESTAMP_DIFFERENCE_MAX_MS, NO_TIMESTAMP_LIMIT)
    before = _integer(config, TIMESTAMP_BEFORE_MAX_MS, NO_TIMESTAMP_LIMIT)
    after = _integer(config, TIMESTAMP_AFTER_MAX_MS, NO_TIMESTAMP_LIMIT)
    return (
        difference if before == NO_TIMESTAMP_LIMIT else before,
        difference if after == NO_TIMESTAMP_LIMIT else after,
    )


def compression_codec(config: TopicConfig) -> int:
    """The codec Fetch compresses topic ``config``'s batches with (0: none). "producer" (the
    default) is none too: records are stored one stream entry each, decompressed, so the
    producer's codec is not kept."""
    text = config.config(COMPRESSION_TYPE) or DEFAULT_COMPRESSION_TYPE
    return COMPRESSION_CODECS.get(text, 0)


def retention_fields(
    ms: int | None = None, size: int | None = None, ignore_groups: bool | None = None
) -> dict[str, int | None]:
    """The config changes that store these retention settings (None: left as it is)."""
    fields: dict[str, int | None] = {}
    if ms is not None:
        fields[RETENTION_MS] = ms
    if size is not None:
        fields[RETENTION_BYTES] = size
    if ignore_groups is not None:
        fields[RETENTION_IGNORE_GROUPS] = int(ignore_groups)
    return fields
