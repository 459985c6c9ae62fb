"""Every topic config Kafka defines (LogConfig / TopicConfig, Kafka 3.9, plus the pods' own
``retention.ignore.groups``): type, default, validator with Kafka's messages, broker synonyms,
documentation line, and whether the pods enforce it. Pure: mapping/topic/topics.py stores the
values (topic hash field ``config_field(name)``, Kafka's text form), the Kafka admin APIs and
the command line validate with ``check_topic_configs``, and the pods read a typed value with
``value_of``.

Defaults are the pods' where the pods behave otherwise than a Kafka broker's defaults
(``retention.ms`` is -1: the pods keep records until retention is set), else Kafka's. A
config that is not set on a topic takes the cluster-wide default set on the BROKER resource
(mapping/topic/broker_configs.py: ``log.retention.ms`` ...), carried in
``TopicConfig.broker_defaults``, then the catalogue's default.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mapping.topic.config_types import (
    LONG_MAX,
    ConfigDef,
    InvalidConfig,
    at_least,
    between,
    catalogue,
    invalid_value,
    list_of,
    one_of,
)
from mapping.topic.config_types import ConfigType as T
from mapping.topic.topic_config import TopicConfig, config_field

MIN_INSYNC_REPLICAS = "min.insync.replicas"
REMOTE_STORAGE_ENABLE = "remote.storage.enable"
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # Kafka's: 1 MiB + the log overhead
WEEK_MS = 7 * 24 * 3600 * 1000
HOUR_MS, MINUTE_MS = 3_600_000, 60_000
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _gzip_level(name: str, value: Any) -> None:
    if value > 9 or (value < 1 and value != -1):
        raise invalid_value(name, value, "Value must be between 1 and 9 or equal to -1")


def _throttled_replicas(name: str, value: Any) -> None:
    """ThrottledReplicaListValidator: ``*`` or ``partition:broker`` pairs."""
    ok = value == ["*"] or all(
        len(pair.split(":")) == 2 and all(p.strip().isdigit() for p in pair.split(":"))
        for pair in value
    )
    if not ok:
        raise invalid_value(
            name, ",".join(value),
            f"{name} must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
        )  # fmt: skip


def _no_remote_storage(name: str, value: Any) -> None:
    if value:  # the pods have no tiered storage (Kafka's words when the broker has none)
        raise InvalidConfig(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage."
        )


def _log(*names: str, factor: int = 1) -> tuple[tuple[str, int], ...]:
    return tuple((f"log.{n}", factor) for n in names)


_THROTTLED = "[partitionId]:[brokerId],[partitionId]:[brokerId],..."
TOPIC_CONFIGS: dict[str, ConfigDef] = catalogue([
    ConfigDef("cleanup.policy", T.LIST, "delete",
              "delete: old records go by retention; compact: the latest record per key stays.",
              list_of("compact", "delete"), "[compact, delete]",
              _log("cleanup.policy"), enforced=True),
    ConfigDef("compression.type", T.STRING, "producer",
              "The final compression of the topic's batches (producer: as sent).",
              one_of(*COMPRESSION_TYPES), f"[{', '.join(COMPRESSION_TYPES)}]",
              (("compression.type", 1),), enforced=True),
    ConfigDef("compression.gzip.level", T.INT, "-1", "gzip level when compression.type=gzip.",
              _gzip_level, "[1,...,9] or -1", (("compression.gzip.level", 1),)),
    ConfigDef("compression.lz4.level", T.INT, "9", "lz4 level when compression.type=lz4.",
              between(1, 17), "[1,...,17]", (("compression.lz4.level", 1),)),
    ConfigDef("compression.zstd.level", T.INT, "3", "zstd level when compression.type=zstd.",
              between(-131072, 22), "[-131072,...,22]", (("compression.zstd.level", 1),)),
    ConfigDef("delete.retention.ms", T.LONG, str(24 * HOUR_MS),
              "How long tombstones stay in a compacted topic.",
              at_least(0), "[0,...]", (("log.cleaner.delete.retention.ms", 1),), enforced=True),
    ConfigDef("file.delete.delay.ms", T.LONG, "60000",
              "Delay before a deleted segment file goes (no files here).",
              at_least(0), "[0,...]", _log("segment.delete.delay.ms")),
    ConfigDef("flush.messages", T.LONG, str(LONG_MAX),
              "Records between forced flushes (Redis AOF decides here).",
              at_least(1), "[1,...]", _log("flush.interval.messages")),
    ConfigDef("flush.ms", T.LONG, str(LONG_MAX),
              "Time between forced flushes (Redis AOF decides here).", at_least(0), "[0,...]",
              _log("flush.interval.ms", "flush.scheduler.interval.ms")),
    ConfigDef("follower.replication.throttled.replicas", T.LIST, "",
              "Replicas whose follower replication is throttled.",
              _throttled_replicas, _THROTTLED),
    ConfigDef("index.interval.bytes", T.INT, "4096", "Bytes between offset index entries.",
              at_least(0), "[0,...]", _log("index.interval.bytes")),
    ConfigDef("leader.replication.throttled.replicas", T.LIST, "",
              "Replicas whose leader replication is throttled.",
              _throttled_replicas, _THROTTLED),
    ConfigDef("local.retention.bytes", T.LONG, "-2",
              "Local bytes kept under tiered storage (-2: retention.bytes).",
              at_least(-2), "[-2,...]", _log("local.retention.bytes")),
    ConfigDef("local.retention.ms", T.LONG, "-2",
              "Local time kept under tiered storage (-2: retention.ms).",
              at_least(-2), "[-2,...]", _log("local.retention.ms")),
    ConfigDef("max.compaction.lag.ms", T.LONG, str(LONG_MAX),
              "The longest a record stays ineligible for compaction.",
              at_least(1), "[1,...]", (("log.cleaner.max.compaction.lag.ms", 1),), enforced=True),
    ConfigDef("max.message.bytes", T.INT, str(DEFAULT_MAX_MESSAGE_BYTES),
              "The largest record batch the topic accepts.",
              at_least(0), "[0,...]", (("message.max.bytes", 1),), enforced=True),
    ConfigDef("message.downconversion.enable", T.BOOLEAN, "true",
              "Whether Fetch v0-3 get old message formats (false: UNSUPPORTED_VERSION).",
              None, "", _log("message.downconversion.enable"), enforced=True),
    ConfigDef("message.format.version", T.STRING, "3.0-IV1",
              "Deprecated message format version (Kafka 3.x; ignored, removed in 4.0).",
              None, "[0.8.0, ..., 3.9-IV0]", _log("message.format.version")),
    ConfigDef("message.timestamp.after.max.ms", T.LONG, str(LONG_MAX),
              "How far in the future a CreateTime timestamp may be.",
              at_least(0), "[0,...]", _log("message.timestamp.after.max.ms"), enforced=True),
    ConfigDef("message.timestamp.before.max.ms", T.LONG, str(LONG_MAX),
              "How far in the past a CreateTime timestamp may be.",
              at_least(0), "[0,...]", _log("message.timestamp.before.max.ms"), enforced=True),
    ConfigDef("message.timestamp.difference.max.ms", T.LONG, str(LONG_MAX),
              "Deprecated: before/after max in one (Kafka 3.x; removed in 4.0).",
              at_least(0), "[0,...]", _log("message.timestamp.difference.max.ms"), enforced=True),
    ConfigDef("message.timestamp.type", T.STRING, "CreateTime",
              "CreateTime: the producer's timestamp; LogAppendTime: the broker's.",
              one_of("CreateTime", "LogAppendTime"), "[CreateTime, LogAppendTime]",
              _log("message.timestamp.type"), enforced=True),
    ConfigDef("min.cleanable.dirty.ratio", T.DOUBLE, "0.5",
              "Dirty share of the log that makes the cleaner compact it.",
              between(0, 1), "[0,...,1]", (("log.cleaner.min.cleanable.ratio", 1),), enforced=True),
    ConfigDef("min.compaction.lag.ms", T.LONG, "0",
              "The least time a record stays uncompacted.", at_least(0), "[0,...]",
              (("log.cleaner.min.compaction.lag.ms", 1),), enforced=True),
    ConfigDef(MIN_INSYNC_REPLICAS, T.INT, "2",
              "Replicas in sync for acks=all to succeed (else NOT_ENOUGH_REPLICAS).",
              at_least(1), "[1,...]", ((MIN_INSYNC_REPLICAS, 1),), enforced=True),
    ConfigDef("preallocate", T.BOOLEAN, "false", "Preallocate segment files (no files here).",
              None, "", _log("preallocate")),
    ConfigDef(REMOTE_STORAGE_ENABLE, T.BOOLEAN, "false",
              "Tiered storage for the topic (the pods have none: false only).",
              _no_remote_storage, ""),
    ConfigDef("remote.log.copy.disable", T.BOOLEAN, "false",
              "Stop copying segments to tiered storage.", None, ""),
    ConfigDef("remote.log.delete.on.disable", T.BOOLEAN, "false",
              "Delete tiered data when tiered storage is turned off.", None, ""),
    ConfigDef("retention.bytes", T.LONG, "-1",
              "Bytes a partition keeps at most (-1: no limit; Redis memory here).",
              None, "", _log("retention.bytes"), enforced=True),
    ConfigDef("retention.ignore.groups", T.BOOLEAN, "false",
              "The pods' own: retention also trims records groups have not committed yet.",
              None, "", enforced=True),
    ConfigDef("retention.ms", T.LONG, "-1",
              "How long records are kept (-1: forever, the pods' default).",
              at_least(-1), "[-1,...]",
              (("log.retention.ms", 1), ("log.retention.minutes", MINUTE_MS),
               ("log.retention.hours", HOUR_MS)), enforced=True),
    ConfigDef("segment.bytes", T.INT, str(1024**3),
              "A segment rolls before a record takes it past this (records' entry bytes).",
              at_least(14), "[14,...]", _log("segment.bytes"), enforced=True),
    ConfigDef("segment.index.bytes", T.INT, str(10 * 1024 * 1024),
              "Offset index size (no index files here).", at_least(4), "[4,...]",
              _log("index.size.max.bytes")),
    ConfigDef("segment.jitter.ms", T.LONG, "0",
              "Most time taken off segment.ms per segment, drawn per segment.",
              at_least(0), "[0,...]",
              (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOUR_MS)), enforced=True),
    ConfigDef("segment.ms", T.LONG, str(WEEK_MS),
              "A segment rolls at the first record this long after its first record.",
              at_least(1), "[1,...]", (("log.roll.ms", 1), ("log.roll.hours", HOUR_MS)),
              enforced=True),
    ConfigDef("unclean.leader.election.enable", T.BOOLEAN, "false",
              "Elect an out-of-sync replica as leader (the leader log never moves here).",
              None, "", (("unclean.leader.election.enable", 1),)),
])  # fmt: skip


def topic_config(name: str) -> ConfigDef:
    """The catalogue's entry of ``name``; InvalidConfig (Kafka's words) for an unknown one."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    return definition


def check_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Validate topic configs as Kafka does (names, then each value, then the values
    together): their parsed values; InvalidConfig with Kafka's message at the first fault."""
    for name in configs:
        topic_config(name)
    values = {name: TOPIC_CONFIGS[name].check(text) for name, text in configs.items()}
    check_together(values)
    return values


def check_together(values: Mapping[str, Any]) -> None:
    """LogConfig.validateValues: the rules across configs (``values``: the effective
    parsed values of those that are set)."""
    low = values.get("min.compaction.lag.ms", 0)
    high = values.get("max.compaction.lag.ms", LONG_MAX)
    if low > high:
        raise InvalidConfig(
            f"conflict topic config setting min.compaction.lag.ms ({low}) > "
            f"max.compaction.lag.ms ({high})"
        )


def broker_default_fields(broker: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The topic defaults the dynamic broker configs ``broker`` (name -> text) set, as
    (topic hash field, text in the topic config's unit): per topic config its first synonym
    that is set, as Kafka picks them."""
    fields = []
    for definition in TOPIC_CONFIGS.values():
        for synonym, factor in definition.synonyms:
            text = broker.get(synonym)
            if text is None:
                continue
            if factor != 1:
                text = str(int(text) * factor)
            fields.append((config_field(definition.name), text))
            break
    return tuple(fields)


def text_of(config: TopicConfig, kafka_name: str) -> tuple[str | None, bool]:
    """Topic config ``kafka_name``'s effective text on this topic and whether the topic sets
    it (else: the cluster-wide default, else the catalogue's)."""
    if kafka_name == MIN_INSYNC_REPLICAS:  # structural: every topic has its own
        return str(config.min_insync_replicas), True
    field = config_field(kafka_name)
    text = config.config(field)
    if text is not None:
        return text, True
    for name, value in config.broker_defaults:
        if name == field:
            return value, False
    return topic_config(kafka_name).default, False


def value_of(config: TopicConfig, kafka_name: str) -> Any:
    """Topic config ``kafka_name``'s typed value on this topic (bool, int, float, str, or a
    list of str for LIST configs): the topic's own setting, else the cluster-wide default
    (the BROKER resource), else the catalogue's default. KeyError-free: an unknown name is
    InvalidConfig."""
    definition = topic_config(kafka_name)
    text, _ = text_of(config, kafka_name)
    if kafka_name == "retention.ignore.groups" and text in ("0", "1"):
        return text == "1"  # stored as 0/1 by older code (mapping.topic.topic_config)
    return definition.value(text)
