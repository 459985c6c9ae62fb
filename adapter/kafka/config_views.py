"""What DescribeConfigs and CreateTopics show of a config: its value, source and synonyms,
as Kafka's ConfigHelper computes them, over the pods' layers: the topic's own setting
(DYNAMIC_TOPIC_CONFIG), the cluster-wide dynamic broker configs
(DYNAMIC_DEFAULT_BROKER_CONFIG, mapping/topic/broker_configs.py), the pod's command-line settings
(STATIC_BROKER_CONFIG, where they differ from the catalogue's default) and the catalogue's
default (DEFAULT_CONFIG)."""

from __future__ import annotations

from dataclasses import dataclass

from adapter.settings import Settings
from mapping.topic.broker_configs import BROKER_CONFIGS, GROUP_CONFIGS
from mapping.topic.config_types import ConfigDef
from mapping.topic.config_types import ConfigSource as S
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_configs import TOPIC_CONFIGS, text_of


@dataclass(frozen=True, slots=True)
class ConfigView:
    definition: ConfigDef
    value: str | None
    source: S
    synonyms: list[tuple[str, str | None, S]]  # (name, value, source), highest first
    read_only: bool = False


def static_broker_configs(settings: Settings, node_id: int, host: str, port: int) -> dict[str, str]:
    """The broker configs the pod's command line sets, by Kafka name (only those that
    differ from the catalogue's default count as set, as a server.properties line would)."""
    groups, defaults = settings.kafka_groups, settings.topic_defaults
    protocol = "SSL" if settings.tls_cert else "PLAINTEXT"
    values = {
        "broker.id": str(node_id),
        "node.id": str(node_id),
        "advertised.listeners": f"{protocol}://{host}:{port}",
        "auto.create.topics.enable": "true" if settings.auto_create_topics else "false",
        "num.partitions": str(defaults.partitions),
        "default.replication.factor": str(defaults.replication_factor),
        "min.insync.replicas": str(defaults.min_insync_replicas),
        "message.max.bytes": str(settings.kafka_max_message_bytes),
        "offsets.retention.minutes": f"{settings.offsets_retention_minutes:g}",
        "socket.request.max.bytes": str(settings.kafka_max_request_bytes),
        "group.min.session.timeout.ms": str(groups.min_session_timeout_ms),
        "group.max.session.timeout.ms": str(groups.max_session_timeout_ms),
        "group.initial.rebalance.delay.ms": str(groups.initial_rebalance_delay_ms),
        "group.consumer.session.timeout.ms": str(groups.consumer_session_timeout_ms),
        "group.consumer.heartbeat.interval.ms": str(groups.consumer_heartbeat_interval_ms),
        "producer.id.expiration.ms": str(settings.kafka_producer_id_expiration_ms),
        "transaction.max.timeout.ms": str(settings.transaction_max_timeout_ms),
        "transactional.id.expiration.ms": str(settings.transactional_id_expiration_ms),
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(
            settings.transaction_check_interval_ms
        ),
    }
    return {n: v for n, v in values.items() if v != BROKER_CONFIGS[n].default}


def static_topic_defaults(settings: Settings) -> dict[str, str]:
    """The pod's settings that are topic defaults (broker synonyms of topic configs)."""
    static = static_broker_configs(settings, -1, "", 0)
    synonyms = {s for d in TOPIC_CONFIGS.values() for s, _ in d.synonyms}
    return {n: v for n, v in static.items() if n in synonyms}


def topic_view(
    config: TopicConfig, name: str, dynamic: dict[str, str], static: dict[str, str]
) -> ConfigView:
    """Topic config ``name`` of topic ``config``."""
    definition = TOPIC_CONFIGS[name]
    value, is_set = text_of(config, name)
    synonyms: list[tuple[str, str | None, S]] = []
    if is_set:
        synonyms.append((name, value, S.DYNAMIC_TOPIC_CONFIG))
    names = [s for s, _ in definition.synonyms]
    synonyms += [(s, dynamic[s], S.DYNAMIC_DEFAULT_BROKER_CONFIG) for s in names if s in dynamic]
    synonyms += [(s, static[s], S.STATIC_BROKER_CONFIG) for s in names if s in static]
    if names and definition.default is not None:
        synonyms.append((names[0], definition.default, S.DEFAULT_CONFIG))
    source = synonyms[0][2] if synonyms else S.DEFAULT_CONFIG
    return ConfigView(definition, value, source, synonyms)


def broker_view(name: str, dynamic: dict[str, str], static: dict[str, str]) -> ConfigView:
    """Broker config ``name`` as one broker has it (the cluster-wide dynamic value, else
    the pod's setting, else the default)."""
    definition = BROKER_CONFIGS[name]
    synonyms: list[tuple[str, str | None, S]] = []
    if name in dynamic:
        synonyms.append((name, dynamic[name], S.DYNAMIC_DEFAULT_BROKER_CONFIG))
    if name in static:
        synonyms.append((name, static[name], S.STATIC_BROKER_CONFIG))
    if definition.default is not None:
        synonyms.append((name, definition.default, S.DEFAULT_CONFIG))
    value, source = (synonyms[0][1], synonyms[0][2]) if synonyms else (None, S.DEFAULT_CONFIG)
    return ConfigView(definition, value, source, synonyms, read_only=not definition.dynamic)


def group_view(name: str, stored: dict[str, str], static: dict[str, str]) -> ConfigView:
    """Group config ``name`` of a group whose own configs are ``stored``."""
    definition = GROUP_CONFIGS[name]
    synonyms: list[tuple[str, str | None, S]] = []
    if name in stored:
        synonyms.append((name, stored[name], S.GROUP_CONFIG))
    broker_name = definition.synonyms[0][0]
    if broker_name in static:
        synonyms.append((broker_name, static[broker_name], S.STATIC_BROKER_CONFIG))
    synonyms.append((name, definition.default, S.DEFAULT_CONFIG))
    return ConfigView(definition, synonyms[0][1], synonyms[0][2], synonyms)
