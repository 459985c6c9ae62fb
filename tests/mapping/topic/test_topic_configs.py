"""The topic config catalogue (mapping/topic/topic_configs.py): Kafka's validation and messages,
typed values with their defaults, and the cluster-wide defaults the BROKER resource sets."""

from __future__ import annotations

import pytest

from mapping.topic.broker_configs import BROKER_CONFIGS, GROUP_CONFIGS
from mapping.topic.config_types import ConfigType, InvalidConfig
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_configs import (
    TOPIC_CONFIGS,
    broker_default_fields,
    check_topic_configs,
    text_of,
    value_of,
)
from mapping.topic.topic_rules import Segments, segments_of


def test_every_config_has_a_type_a_valid_default_and_a_documentation_line() -> None:
    for definition in TOPIC_CONFIGS.values():
        assert definition.doc
        if definition.default is not None and definition.name != "remote.storage.enable":
            definition.check(definition.default)  # the default passes its own validator
    assert TOPIC_CONFIGS["cleanup.policy"].type == ConfigType.LIST
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].type == ConfigType.DOUBLE
    assert {"retention.ms", "cleanup.policy", "max.message.bytes"} <= {
        n for n, d in TOPIC_CONFIGS.items() if d.enforced
    }
    assert (
        "log.retention.hours" in BROKER_CONFIGS and "consumer.session.timeout.ms" in GROUP_CONFIGS
    )


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        ({"colour": "blue"}, "Unknown topic config name: colour"),
        ({"retention.ms": "-2"}, "Invalid value -2 for configuration retention.ms: "
                                 "Value must be at least -1"),
        ({"segment.bytes": "x"}, "Invalid value x for configuration segment.bytes: "
                                 "Not a number of type INT"),
        ({"segment.bytes": str(2**31)}, "Not a number of type INT"),
        ({"segment.bytes": "13"}, "Invalid value 13 for configuration segment.bytes: "
                                  "Value must be at least 14"),
        ({"segment.ms": "0"}, "Invalid value 0 for configuration segment.ms: "
                              "Value must be at least 1"),
        ({"segment.jitter.ms": "-1"}, "Invalid value -1 for configuration segment.jitter.ms: "
                                      "Value must be at least 0"),
        ({"cleanup.policy": "compact,shred"}, "String must be one of: compact, delete"),
        ({"compression.type": "brotli"}, "String must be one of: uncompressed, zstd, lz4"),
        ({"compression.gzip.level": "0"}, "Value must be between 1 and 9 or equal to -1"),
        ({"compression.zstd.level": "23"}, "Value must be no more than 22"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "Value must be no more than 1"),
        ({"preallocate": "yes"}, "Expected value to be either true or false"),
        ({"leader.replication.throttled.replicas": "0:a"}, "must be the literal '*'"),
        ({"min.insync.replicas": "0"}, "Value must be at least 1"),
        ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
         "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ],
)  # fmt: skip
def test_kafka_refuses_these_and_says_why(configs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig) as caught:
        check_topic_configs(configs)
    assert message in str(caught.value)


def test_valid_values_parse_to_their_types() -> None:
    values = check_topic_configs(
        {"cleanup.policy": "compact, delete", "preallocate": "TRUE", "retention.bytes": "-7",
         "min.cleanable.dirty.ratio": "0.25", "compression.gzip.level": "-1",
         "follower.replication.throttled.replicas": "*", "message.timestamp.type": "CreateTime"}
    )  # fmt: skip
    assert values["cleanup.policy"] == ["compact", "delete"]
    assert values["preallocate"] is True
    assert (values["retention.bytes"], values["min.cleanable.dirty.ratio"]) == (-7, 0.25)


def test_value_of_reads_the_topic_then_the_cluster_default_then_the_catalogue() -> None:
    plain = TopicConfig("t", 3, 3, 2)
    assert value_of(plain, "retention.ms") == -1  # the pods keep records by default
    assert value_of(plain, "cleanup.policy") == ["delete"]
    assert value_of(plain, "max.message.bytes") == 1048588
    assert value_of(plain, "min.insync.replicas") == 2
    assert value_of(plain, "retention.ignore.groups") is False
    cluster = broker_default_fields({"log.retention.hours": "2", "log.cleanup.policy": "compact"})
    assert dict(cluster) == {"retention_ms": "7200000", "cleanup_policy": "compact"}
    defaulted = TopicConfig("t", 3, 3, 2, broker_defaults=cluster)
    assert value_of(defaulted, "retention.ms") == 7_200_000
    # log.retention.ms comes before log.retention.hours, as in Kafka
    first = broker_default_fields({"log.retention.hours": "2", "log.retention.ms": "5"})
    assert dict(first) == {"retention_ms": "5"}
    own = TopicConfig(
        "t", 3, 3, 2,
        overrides=(("retention_ms", "1000"), ("retention_ignore_groups", "1")),
        broker_defaults=cluster,
    )  # fmt: skip
    assert value_of(own, "retention.ms") == 1000
    assert value_of(own, "cleanup.policy") == ["compact"]
    assert value_of(own, "retention.ignore.groups") is True  # the command line's 0/1
    with pytest.raises(InvalidConfig):
        value_of(plain, "colour")


def test_segments_from_the_topic_the_cluster_default_and_kafkas() -> None:
    """segment.ms / segment.bytes / segment.jitter.ms are enforced (docs/compaction.md,
    "Segments"): the topic's own, else log.roll.ms, then log.roll.hours (and the others'
    broker synonyms), else Kafka's defaults; a compacted topic rolls by a smaller
    max.compaction.lag.ms too (LogConfig.maxSegmentMs)."""
    enforced = {n for n, d in TOPIC_CONFIGS.items() if d.enforced}
    assert {"segment.ms", "segment.bytes", "segment.jitter.ms"} <= enforced
    plain = TopicConfig("t", 3, 3, 2)
    assert segments_of(plain) == Segments(604_800_000, 1_073_741_824, 0, 604_800_000)
    assert text_of(plain, "segment.ms") == ("604800000", False)  # DEFAULT_CONFIG
    cluster = broker_default_fields(
        {"log.roll.hours": "2", "log.segment.bytes": "5000", "log.roll.jitter.hours": "1"}
    )
    defaulted = TopicConfig("t", 3, 3, 2, broker_defaults=cluster)
    assert segments_of(defaulted) == Segments(7_200_000, 5000, 3_600_000, 7_200_000)
    assert text_of(defaulted, "segment.ms") == ("7200000", False)  # DYNAMIC_DEFAULT_BROKER
    # log.roll.ms comes before log.roll.hours, as in Kafka
    assert dict(broker_default_fields({"log.roll.hours": "2", "log.roll.ms": "5"})) == {
        "segment_ms": "5"
    }
    own = TopicConfig(
        "t", 3, 3, 2,
        overrides=(("segment_ms", "60000"), ("cleanup_policy", "compact"),
                   ("max_compaction_lag_ms", "1000")),
        broker_defaults=cluster,
    )  # fmt: skip
    assert text_of(own, "segment.ms") == ("60000", True)  # TOPIC_CONFIG
    assert segments_of(own) == Segments(60_000, 5000, 3_600_000, 1000)
