"""The topic configs the pods enforce where records are written and read, typed once per
set of values: the produce paths (Kafka Produce, V1 PRODUCE, the Spark sink), Fetch, the
retention task and compaction read them here, never the topic hash's text.

A topic's rules follow from its own configs and the cluster-wide defaults
(``TopicConfig.overrides`` and ``broker_defaults``, read through the catalogue's
``value_of``); they are computed once per distinct pair and cached, since V1 PRODUCE asks
for them on every record."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mapping.topic.config_types import LONG_MAX
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_configs import value_of

# compression.type's values (BrokerCompressionType) -> the codec Fetch compresses with
# (aiokafka's codec numbers, RecordBatch attributes): "producer" and "uncompressed" are none,
# since records are stored one stream entry each, decompressed (the producer's codec is not
# kept).
COMPRESSION_CODECS = {"uncompressed": 0, "producer": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True, slots=True)
class Compaction:
    """A topic's cleanup settings (docs/compaction.md)."""

    compact: bool = False  # cleanup.policy holds "compact"
    delete: bool = True  # cleanup.policy holds "delete": time and size retention apply
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5


@dataclass(frozen=True, slots=True)
class Segments:
    """Where a topic's partitions roll their segments (docs/compaction.md, "Segments")."""

    segment_ms: int = 604_800_000
    segment_bytes: int = 1024**3
    jitter_ms: int = 0
    # Kafka's LogConfig.maxSegmentMs: a compacted topic rolls by max.compaction.lag.ms too,
    # so that no record waits longer than that in the active segment, out of the cleaner's
    # reach
    roll_ms: int = 604_800_000


@dataclass(frozen=True, slots=True)
class TopicRules:
    max_message_bytes: int  # the largest RecordBatch a producer may send
    log_append_time: bool  # message.timestamp.type LogAppendTime: records carry append time
    # How far a CreateTime record's timestamp may lie before / after the broker's clock
    # (LONG_MAX: no bound)
    timestamp_before_ms: int
    timestamp_after_ms: int
    compression_codec: int  # what Fetch compresses this topic's batches with (0: none)
    compaction: Compaction
    segments: Segments
    down_conversion: bool = True  # message.downconversion.enable: Fetch v0-3 answered


def rules_of(config: TopicConfig) -> TopicRules:
    """The enforced configs of topic ``config``."""
    return _rules(config.overrides, config.broker_defaults)


@lru_cache(maxsize=1024)
def _rules(
    overrides: tuple[tuple[str, str], ...], broker_defaults: tuple[tuple[str, str], ...]
) -> TopicRules:
    config = TopicConfig("", 1, 1, 1, "", overrides, broker_defaults)
    # LogConfig: where before/after.max.ms is unset (Long.MAX_VALUE), the deprecated
    # message.timestamp.difference.max.ms stands in
    difference = value_of(config, "message.timestamp.difference.max.ms")
    before = value_of(config, "message.timestamp.before.max.ms")
    after = value_of(config, "message.timestamp.after.max.ms")
    policy = {word.strip().lower() for word in value_of(config, "cleanup.policy")}
    segment_ms = value_of(config, "segment.ms")
    max_lag = value_of(config, "max.compaction.lag.ms")
    return TopicRules(
        max_message_bytes=value_of(config, "max.message.bytes"),
        log_append_time=value_of(config, "message.timestamp.type") == "LogAppendTime",
        timestamp_before_ms=difference if before == LONG_MAX else before,
        timestamp_after_ms=difference if after == LONG_MAX else after,
        compression_codec=COMPRESSION_CODECS.get(value_of(config, "compression.type"), 0),
        compaction=Compaction(
            compact="compact" in policy,
            delete="delete" in policy,
            delete_retention_ms=value_of(config, "delete.retention.ms"),
            min_compaction_lag_ms=value_of(config, "min.compaction.lag.ms"),
            max_compaction_lag_ms=value_of(config, "max.compaction.lag.ms"),
            min_cleanable_dirty_ratio=value_of(config, "min.cleanable.dirty.ratio"),
        ),
        segments=Segments(
            segment_ms=segment_ms,
            segment_bytes=value_of(config, "segment.bytes"),
            jitter_ms=value_of(config, "segment.jitter.ms"),
            roll_ms=min(segment_ms, max_lag) if "compact" in policy and max_lag > 0 else segment_ms,
        ),
        down_conversion=value_of(config, "message.downconversion.enable"),
    )


def compaction_of(config: TopicConfig) -> Compaction:
    return rules_of(config).compaction


def segments_of(config: TopicConfig) -> Segments:
    return rules_of(config).segments


def is_compacted(config: TopicConfig) -> bool:
    """Whether appends to ``config``'s partitions keep the compaction index and refuse
    records without a key."""
    return rules_of(config).compaction.compact
