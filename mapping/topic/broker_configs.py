"""The BROKER and GROUP config resources: their catalogues and their store in Redis.

Broker configs. The pods are one cluster of equal, stateless brokers, so the dynamic broker
configs are cluster-wide only (Kafka's "default cluster level", resource name ""): one Redis
hash (``Keys.broker_configs``, config name -> Kafka text) shared by every pod. They are the
topic defaults Kafka lets a cluster change (``log.retention.ms``, ``log.cleanup.policy``,
``message.max.bytes``, ``min.insync.replicas``, ...: every broker synonym of a topic config);
a topic with no setting of its own takes them (``mapping.topic.topic_configs.value_of``). Pods read
the hash at start and again when ``Keys.broker_configs_channel`` announces a change. The
other broker configs (``broker.id``, ``advertised.listeners``, ``num.partitions``, ...) are
read-only: they show the pod's command-line settings (adapter/kafka/configs.py).

Group configs (KIP-848's ``consumer.session.timeout.ms`` ..., Kafka 4) are per group, in the
group's own slot (``Keys.group_configs``): stored and described.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import to_str
from mapping.core.keys import Keys
from mapping.topic.config_types import (
    ConfigDef,
    InvalidConfig,
    at_least,
    between,
    catalogue,
    one_of,
)
from mapping.topic.config_types import ConfigType as T
from mapping.topic.topic_configs import TOPIC_CONFIGS


def _dynamic_broker_configs() -> list[ConfigDef]:
    """Every broker synonym of a topic config, as a cluster-wide dynamic broker config: the
    first synonym has the topic config's type, validator and default; a synonym in other
    units (``log.retention.hours``) is an INT with no default (Kafka's log.retention.hours
    default, 168, would contradict the pods' keep-forever default)."""
    defs = []
    for topic in TOPIC_CONFIGS.values():
        for index, (name, factor) in enumerate(topic.synonyms):
            if factor == 1:
                default = topic.default if index == 0 else None
                defs.append(
                    ConfigDef(name, topic.type, default, topic.doc, topic.validator,
                              topic.valid_values, enforced=topic.enforced, dynamic=True)
                )  # fmt: skip
            else:
                defs.append(
                    ConfigDef(name, T.INT, None, f"{topic.doc} (in {factor} ms units)",
                              at_least(-1 if "retention" in name else 0), "",
                              enforced=topic.enforced, dynamic=True)
                )  # fmt: skip
    return defs


# Read-only broker configs: shown with the pod's settings (adapter/kafka/configs.py).
_STATIC_BROKER_CONFIGS = [
    ConfigDef("broker.id", T.INT, "-1", "This broker's node id (the pods' registry)."),
    ConfigDef("node.id", T.INT, "-1", "This broker's node id (the pods' registry)."),
    ConfigDef("advertised.listeners", T.STRING, None, "The address clients are told."),
    ConfigDef("process.roles", T.LIST, "broker", "A pod is a broker (Redis is the rest)."),
    ConfigDef("auto.create.topics.enable", T.BOOLEAN, "true",
              "Metadata creates unknown topics (--auto-create-topics)."),
    ConfigDef("num.partitions", T.INT, "3", "Partitions of an auto-created topic."),
    ConfigDef("default.replication.factor", T.INT, "3",
              "Replication factor of an auto-created topic."),
    ConfigDef("offsets.retention.minutes", T.INT, "10080",
              "Idle groups' committed offsets expire after this."),
    ConfigDef("socket.request.max.bytes", T.INT, str(100 << 20), "Largest request frame."),
    ConfigDef("group.min.session.timeout.ms", T.INT, "1000", "Shortest classic session."),
    ConfigDef("group.max.session.timeout.ms", T.INT, "1800000", "Longest classic session."),
    ConfigDef("group.initial.rebalance.delay.ms", T.INT, "300", "First rebalance's wait."),
    ConfigDef("group.consumer.session.timeout.ms", T.INT, "45000", "KIP-848 sessions."),
    ConfigDef("group.consumer.heartbeat.interval.ms", T.INT, "5000", "KIP-848 heartbeats."),
    ConfigDef("group.consumer.migration.policy", T.STRING, "bidirectional",
              "Classic groups of consumers become consumer groups and back, always."),
    ConfigDef("producer.id.expiration.ms", T.INT, "86400000",
              "Idle idempotent producers' state expires after this."),
    ConfigDef("transaction.max.timeout.ms", T.INT, "900000",
              "Longest transaction.timeout.ms a producer may ask for."),
    ConfigDef("transactional.id.expiration.ms", T.INT, "604800000",
              "A transactional id unused for this long is forgotten."),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, "10000",
              "How often timed-out transactions are aborted."),
]  # fmt: skip
# Kafka's bounds of the group configs (group.consumer.min/max.session.timeout.ms ...)
GROUP_CONFIG_BOUNDS: dict[str, tuple[int, int, str, str]] = {
    "consumer.session.timeout.ms": (45000, 60000, "group.consumer.min.session.timeout.ms",
                                    "group.consumer.max.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": (5000, 15000, "group.consumer.min.heartbeat.interval.ms",
                                       "group.consumer.max.heartbeat.interval.ms"),
    "share.session.timeout.ms": (45000, 60000, "group.share.min.session.timeout.ms",
                                 "group.share.max.session.timeout.ms"),
    "share.heartbeat.interval.ms": (5000, 15000, "group.share.min.heartbeat.interval.ms",
                                    "group.share.max.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": (15000, 60000, "group.share.min.record.lock.duration.ms",
                                      "group.share.max.record.lock.duration.ms"),
}  # fmt: skip


def _group_bound_configs() -> list[ConfigDef]:
    """Each group config's bounds as a cluster-wide dynamic broker config (in Kafka they are
    static broker configs; here the cluster is its Redis, so an operator sets them as the
    dynamic ones, e.g. a lower group.share.min.record.lock.duration.ms for tests)."""
    return [
        ConfigDef(name, T.INT, str(default), f"The {side} of {config}.", at_least(1),
                  "[1,...]", enforced=True, dynamic=True)
        for config, (low, high, low_name, high_name) in GROUP_CONFIG_BOUNDS.items()
        for name, default, side in ((low_name, low, "minimum"), (high_name, high, "maximum"))
    ]  # fmt: skip


BROKER_CONFIGS: dict[str, ConfigDef] = catalogue(
    [*_dynamic_broker_configs(), *_group_bound_configs(), *_STATIC_BROKER_CONFIGS]
)

# KIP-848 group configs (Kafka 4's GroupConfig), each with its broker-level synonym.
GROUP_CONFIGS: dict[str, ConfigDef] = catalogue([
    ConfigDef("consumer.session.timeout.ms", T.INT, "45000",
              "A consumer group member's session timeout.", at_least(1), "[1,...]",
              (("group.consumer.session.timeout.ms", 1),)),
    ConfigDef("consumer.heartbeat.interval.ms", T.INT, "5000",
              "How often consumer group members heartbeat.", at_least(1), "[1,...]",
              (("group.consumer.heartbeat.interval.ms", 1),)),
    ConfigDef("share.session.timeout.ms", T.INT, "45000",
              "A share group member's session timeout.",
              at_least(1), "[1,...]", (("group.share.session.timeout.ms", 1),)),
    ConfigDef("share.heartbeat.interval.ms", T.INT, "5000",
              "How often share group members heartbeat.",
              at_least(1), "[1,...]", (("group.share.heartbeat.interval.ms", 1),)),
    ConfigDef("share.record.lock.duration.ms", T.INT, "30000",
              "How long a share group member holds a record it acquired.",
              at_least(1000), "[1000,...]", (("group.share.record.lock.duration.ms", 1),)),
])  # fmt: skip


# Share groups' configs (KIP-932, mapping/share_group) beyond GROUP_CONFIGS' share.*
# timings: Kafka's GroupConfig names, defaults and bounds (group.share.min/max.delivery.count.
# limit).
SHARE_GROUP_CONFIGS: dict[str, ConfigDef] = catalogue([
    ConfigDef("share.delivery.count.limit", T.INT, "5",
              "How often a share group delivers a record before archiving it.",
              between(2, 10), "[2,...,10]", (("group.share.delivery.count.limit", 1),),
              enforced=True),
    ConfigDef("share.auto.offset.reset", T.STRING, "latest",
              "Where a share group starts reading a partition.",
              one_of("latest", "earliest"), "[latest, earliest]", enforced=True),
    ConfigDef("share.isolation.level", T.STRING, "read_uncommitted",
              "Which records a share group reads.",
              one_of("read_uncommitted", "read_committed"),
              "[read_uncommitted, read_committed]"),
])  # fmt: skip
ALL_GROUP_CONFIGS: dict[str, ConfigDef] = {**GROUP_CONFIGS, **SHARE_GROUP_CONFIGS}


def check_dynamic(names: Iterable[str]) -> None:
    """InvalidConfig unless every name is a dynamic broker config (Kafka's message)."""
    not_dynamic = [n for n in names if not getattr(BROKER_CONFIGS.get(n), "dynamic", False)]
    if not_dynamic:
        raise InvalidConfig(
            f"Cannot update these configs dynamically: Set({', '.join(not_dynamic)})"
        )


def _changes(current: Mapping[str, str], updated: Mapping[str, str]) -> dict[str, str | None]:
    changes: dict[str, str | None] = {n: v for n, v in updated.items() if current.get(n) != v}
    changes.update({n: None for n in current if n not in updated})
    return changes


def broker_changes(current: Mapping[str, str], updated: Mapping[str, str]) -> dict[str, str | None]:
    """What turns the cluster-wide broker configs ``current`` into ``updated`` (None:
    removed), every changed value checked (InvalidConfig)."""
    changes = _changes(current, updated)
    for name, text in changes.items():
        if text is not None:
            BROKER_CONFIGS[name].check(text)
    return changes


def group_changes(
    current: Mapping[str, str], updated: Mapping[str, str], dynamic: Mapping[str, str]
) -> dict[str, str | None]:
    """What turns a group's configs ``current`` into ``updated`` (None: removed), every
    value checked against its catalogue and its bounds, the cluster-wide broker configs
    ``dynamic`` where they set them (InvalidConfig, Kafka's message)."""
    for name, text in updated.items():
        value = ALL_GROUP_CONFIGS[name].check(text)
        if name not in GROUP_CONFIG_BOUNDS:
            continue
        low, high, low_name, high_name = GROUP_CONFIG_BOUNDS[name]
        if value < int(dynamic.get(low_name, low)):
            raise InvalidConfig(f"{name} must be greater than or equal to {low_name}")
        if value > int(dynamic.get(high_name, high)):
            raise InvalidConfig(f"{name} must be less than or equal to {high_name}")
    return _changes(current, updated)


def hash_commands(key: str, changes: Mapping[str, str | None]) -> list[tuple]:
    """The Redis commands that apply ``changes`` (None: removed) to the configs hash
    ``key`` (the pods' store and ``adapter config`` run them)."""
    stored = [part for name, text in changes.items() if text is not None for part in (name, text)]
    removed = [name for name, text in changes.items() if text is None]
    return ([("HSET", key, *stored)] if stored else []) + (
        [("HDEL", key, *removed)] if removed else []
    )


class ConfigStore:
    """The cluster-wide broker configs and the groups' configs in Redis; the pod's copy of
    the broker configs (``dynamic``), read at start and on every change notice."""

    def __init__(self, batcher: RedisBatcher, keys: Keys) -> None:
        self.batcher = batcher
        self.keys = keys
        self.dynamic: dict[str, str] = {}

    async def load(self) -> dict[str, str]:
        """Read the cluster-wide broker configs again (and keep them)."""
        fields = await self.batcher.call("HGETALL", self.keys.broker_configs)
        self.dynamic = {to_str(k): to_str(v) for k, v in fields.items()}
        return self.dynamic

    async def alter_broker(self, changes: Mapping[str, str | None]) -> None:
        """Set (text) or remove (None) cluster-wide broker configs, then tell every pod."""
        for command in hash_commands(self.keys.broker_configs, changes):
            await self.batcher.call(*command)
        await self.batcher.call("PUBLISH", self.keys.broker_configs_channel, "changed")

    async def group(self, group: str) -> dict[str, str]:
        """Group ``group``'s configs (name -> text; empty: all default)."""
        fields = await self.batcher.call("HGETALL", self.keys.group_configs(group))
        return {to_str(k): to_str(v) for k, v in fields.items()}

    async def alter_group(self, group: str, changes: Mapping[str, str | None]) -> None:
        for command in hash_commands(self.keys.group_configs(group), changes):
            await self.batcher.call(*command)
