"""A topic's settings as the pods hold them: defaults, limits, Kafka's reserved names and
ids, and the configs that change after creation. Pure definitions: mapping/topic/topics.py reads
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
    # ...: mapping/topic/broker_configs.py) as (field, text) pairs in the topic config's unit, as
    # they were when the pod read the topic; pods read every topic again when they change.
    # mapping.topic.topic_configs.value_of reads a config from overrides, then these.
    broker_defaults: tuple[tuple[str, str], ...] = ()

    def config(self, field: str) -> str | None:
        """The text of config ``field`` set on this topic, None when it has its default."""
        for name, value in self.overrides:
            if name == field:
                return value
        return None

    def replica_assignment(self) -> dict[int, list[int]]:
        """The replicas (broker node ids, the preferred leader first) that CreateTopics or
        CreatePartitions named for some partitions, by partition (Metadata reports them)."""
        return {
            int(name[len(ASSIGNED_REPLICAS_PREFIX) :]): [int(b) for b in value.split(",")]
            for name, value in self.overrides
            if name.startswith(ASSIGNED_REPLICAS_PREFIX)
        }


# The topic hash field of a partition's explicit replica assignment (TopicConfig
# .replica_assignment): "<prefix><partition>" -> "<broker id>,<broker id>...". Never a
# config's field (those are Kafka config names with '_' for '.').
ASSIGNED_REPLICAS_PREFIX = "assigned_replicas_"


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


# The topic hash's retention fields (the retention task reads them on each run,
# mapping.operations.inspection.retention_of decodes them; the command line writes them as
# integers);
# every other config is read through mapping/topic/topic_configs.py. Absent: the default.
RETENTION_MS = "retention_ms"
RETENTION_BYTES = "retention_bytes"
RETENTION_IGNORE_GROUPS = "retention_ignore_groups"
ALTERABLE_CONFIGS = frozenset({RETENTION_MS, RETENTION_BYTES, RETENTION_IGNORE_GROUPS})


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
