"""Topics: their settings, read through the pod's cache of them (mapping/topic/topic_cache.py), and
every write to the topic hash and the topic index keys (the topics set, the id index).

Nothing else writes those keys (tests/test_layout.py checks it): the pods' first use,
the command line and the Spark sink create topics here (the command line and Spark through
the synchronous ``*_sync`` functions, which share the scripts and the field encoding), Kafka
CreateTopics and IncrementalAlterConfigs and ``adapter topic alter`` change configs here, and
mapping/operations/topic_lifecycle.py deletes and grows topics through ``Topics``' methods.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.connection.scripts import call_sync
from mapping.core.codec import to_str
from mapping.core.errors import TOPIC_LIMIT, UNKNOWN_TOPIC, BadRequest, BrokerError
from mapping.core.keys import Keys
from mapping.topic.topic_cache import TopicCache
from mapping.topic.topic_config import (
    ALTERABLE_CONFIGS,
    ASSIGNED_REPLICAS_PREFIX,
    DEFAULT_TOPIC_CACHE_SIZE,
    KAFKA_INTERNAL_TOPICS,
    RETENTION_BYTES,
    RETENTION_MS,
    STRUCTURAL_FIELDS,
    EnsuredTopic,
    TopicConfig,
    TopicDefaults,
    config_field,
    is_internal_topic,
    new_topic_id,
)
from mapping.topic.topic_configs import MIN_INSYNC_REPLICAS, TOPIC_CONFIGS

MIN_ISR_FIELD = config_field(MIN_INSYNC_REPLICAS)
# The topic hash fields a config change may write: every config of the catalogue (the
# retention ones of mapping.topic.topic_config among them).
ALTERABLE_FIELDS = ALTERABLE_CONFIGS | {config_field(name) for name in TOPIC_CONFIGS}

TOPIC_ENSURE = scripts.load("topic/ensure")
TOPIC_GROW = scripts.load("topic/grow")
TOPIC_DELETE = scripts.load("topic/delete")
PARTITION_REVIVE = scripts.load("partition/revive")


# A config's new value: Kafka's text form, an integer (the command line's retention), or
# None (back to the default).
ConfigValue = str | int | None


def _config_commands(keys: Keys, name: str, changes: Mapping[str, ConfigValue]) -> list[tuple]:
    """The commands that apply ``changes`` (config field -> value; None: back to the
    default) to topic ``name``'s hash: any config of the catalogue (mapping/topic/topic_configs.py;
    validated by the caller), ``min_insync_replicas`` included. An int retention limit below
    -1 (the command line's) is stored as -1 (none)."""
    unknown = set(changes) - ALTERABLE_FIELDS
    if unknown:
        raise ValueError(f"not an alterable topic config: {', '.join(sorted(unknown))}")
    if changes.get(MIN_ISR_FIELD, 0) is None:
        raise ValueError("min_insync_replicas always has a value")
    key = keys.topic(name)
    stored: list[str | int] = []
    for field, value in changes.items():
        if value is not None:
            limit = field in (RETENTION_MS, RETENTION_BYTES) and isinstance(value, int)
            stored += (field, max(value, -1) if limit else value)
    removed = [field for field, value in changes.items() if value is None]
    return ([("HSET", key, *stored)] if stored else []) + (
        [("HDEL", key, *removed)] if removed else []
    )


def topic_ensure_call(
    keys: Keys, name: str, partitions: int, replication_factor: int, min_insync_replicas: int,
    create: bool,
) -> tuple:  # fmt: skip
    """The topic/ensure.lua call that creates topic ``name`` with these settings (or only
    looks it up: ``create`` False), carrying the fresh id it gets if it is created now."""
    return TOPIC_ENSURE.command(
        [keys.topic(name)],
        [partitions, replication_factor, min_insync_replicas, int(create), new_topic_id()],
    )


def topic_grow_call(keys: Keys, name: str, count: int) -> tuple:
    """topic/grow.lua: topic ``name``'s partition count up to ``count``."""
    return TOPIC_GROW.command([keys.topic(name)], [count])


def topic_delete_call(keys: Keys, name: str, topic_id: str) -> tuple:
    """topic/delete.lua: topic ``name``'s hash goes unless it holds another id by now."""
    return TOPIC_DELETE.command([keys.topic(name)], [topic_id])


def partition_revive_call(keys: Keys, name: str, partition: int, topic_id: str) -> tuple:
    """partition/revive.lua: the partition loses another topic's tombstone."""
    return PARTITION_REVIVE.command([keys.partition(name, partition).state], [topic_id])


def _ensured(name: str, reply: list[Any]) -> EnsuredTopic | None:
    """topic/ensure.lua's reply; None when the topic does not exist (and was not created)."""
    if not reply:
        return None
    fields = reply[6] if len(reply) > 6 else []
    overrides = tuple(
        (to_str(fields[i]), to_str(fields[i + 1]))
        for i in range(0, len(fields), 2)
        if to_str(fields[i]) not in STRUCTURAL_FIELDS
    )
    config = TopicConfig(
        name, int(reply[0]), int(reply[1]), int(reply[2]), to_str(reply[4]), overrides
    )
    return EnsuredTopic(config, bool(reply[3]), bool(reply[5]))


def _revive_commands(keys: Keys, name: str, topic_id: str, partitions: range) -> list[tuple]:
    """The first step after the creation of topic ``name`` (or the growth of its partition
    count): these partitions lose the tombstone an earlier topic of that name left (see
    mapping/operations/topic_lifecycle.py and partition/revive.lua). A reply of -1 means the topic
    itself was
    deleted meanwhile: it must not be announced."""
    return [partition_revive_call(keys, name, p, topic_id) for p in partitions]


def _listing_commands(keys: Keys, config: TopicConfig) -> list[tuple]:
    """The second step: the topic joins the topics set and the id index, and its name is
    published (the replicators listen)."""
    return [
        ("SADD", keys.topics, config.name),
        ("HSET", keys.topic_ids, config.topic_id, config.name),
        ("PUBLISH", keys.topics_channel, config.name),
    ]


def _deleted_meanwhile(revived: list[Any]) -> bool:
    """Whether the revive commands' replies say the topic was deleted since its creation."""
    return any(int(reply) < 0 for reply in revived)


def ensure_topic_sync(
    client: Any, keys: Keys, name: str, partitions: int, replication_factor: int,
    min_insync_replicas: int, *, create: bool = True,
) -> EnsuredTopic | None:  # fmt: skip
    """``Topics.create`` on a synchronous client (the command line, Spark): topic ``name``
    with these settings unless it exists (or only looked up: ``create`` False), announced
    as a pod announces it; None when it does not exist and was not created."""
    call = topic_ensure_call(
        keys, name, partitions, replication_factor, min_insync_replicas, create
    )
    ensured = _ensured(name, call_sync(client, call))
    if ensured is None:
        return None
    config = ensured.config
    if ensured.created:
        revive = _revive_commands(keys, config.name, config.topic_id, range(config.partitions))
        if not _deleted_meanwhile([call_sync(client, command) for command in revive]):
            for command in _listing_commands(keys, config):
                client.execute_command(*command)
    elif ensured.id_assigned:
        client.hset(keys.topic_ids, config.topic_id, config.name)
    return ensured


def read_settings_sync(client: Any, keys: Keys, name: str) -> dict[str, str]:
    """Topic ``name``'s hash as text, on a synchronous client (empty: no such topic)."""
    return {to_str(k): to_str(v) for k, v in client.hgetall(keys.topic(name)).items()}


def alter_configs_sync(
    client: Any, keys: Keys, name: str, changes: Mapping[str, ConfigValue]
) -> None:
    """``Topics.alter_configs`` on a synchronous client (the command line)."""
    for command in _config_commands(keys, name, changes):
        client.execute_command(*command)
    client.publish(keys.topics_changed_channel, name)


class Topics:
    def __init__(
        self,
        batcher: RedisBatcher,
        keys: Keys,
        *,
        topic_defaults: TopicDefaults | None = None,
        auto_create_topics: bool = True,
        max_topics: int = 0,
        topic_cache_size: int = DEFAULT_TOPIC_CACHE_SIZE,
    ) -> None:
        """``auto_create_topics``: a command naming an unknown topic creates it with
        ``topic_defaults`` (else UNKNOWN_TOPIC); ``max_topics``: no auto-creation beyond
        this many topics (TOPIC_LIMIT; 0: no limit); ``topic_cache_size``: topic settings
        kept in memory at most (least recently used dropped first)."""
        self.batcher = batcher
        self.keys = keys
        self.topic_defaults = topic_defaults or TopicDefaults()
        self.auto_create_topics = auto_create_topics
        self.max_topics = max_topics
        self.cache = TopicCache(topic_cache_size)  # ``topics.cache.known(name)``: no await
        # The cluster-wide topic defaults (mapping/topic/broker_configs.py), given to every
        # TopicConfig this pod reads (see TopicConfig.broker_defaults).
        self.broker_defaults: tuple[tuple[str, str], ...] = ()

    def set_broker_defaults(self, fields: tuple[tuple[str, str], ...]) -> None:
        """The cluster-wide topic defaults changed (or were read at start): every cached
        topic goes, so the next use reads it with them."""
        if fields != self.broker_defaults:
            self.broker_defaults = fields
            self.cache.forget_all()

    def _with_defaults(self, config: TopicConfig) -> TopicConfig:
        if not self.broker_defaults:
            return config
        return dataclasses.replace(config, broker_defaults=self.broker_defaults)

    def default_min_isr(self) -> int:
        """min ISR of a topic created without one: the cluster-wide ``min.insync.replicas``
        when set, else the pod's ``--default-min-insync-replicas``."""
        for field, text in self.broker_defaults:
            if field == MIN_ISR_FIELD:
                return int(text)
        return self.topic_defaults.min_insync_replicas

    async def topic(self, name: str) -> TopicConfig:
        """The topic's settings, creating it with the defaults on first use (when allowed)."""
        known = self.cache.known(name)
        if known is not None:
            return known
        return await self.cache.shared(name, partial(self._ensure, name))

    async def lookup(self, name: str) -> TopicConfig | None:
        """The topic's settings, or None when it does not exist (never creates it)."""
        known = self.cache.known(name)
        if known is not None:
            return known
        generation = self.cache.generation
        config = await self._read(name, create=False)
        if config is not None:
            self.cache.remember_read(config, generation)
        return config

    async def partition_of(self, topic: str, partition: int) -> TopicConfig:
        config = await self.topic(topic)
        if not 0 <= partition < config.partitions:
            raise BadRequest("invalid partition")
        return config

    async def read(self, name: str) -> TopicConfig | None:
        """The topic's settings as Redis has them now (never cached, never creates it;
        a topic made by older code gets its id)."""
        return await self._read(name, create=False)

    async def _read(self, name: str, *, create: bool) -> TopicConfig | None:
        d = self.topic_defaults
        # min ISR above RF could never be met (acks=all would always time out): cap it.
        min_isr = min(self.default_min_isr(), d.replication_factor)
        call = topic_ensure_call(
            self.keys, name, d.partitions, d.replication_factor, min_isr, create
        )
        ensured = _ensured(name, await self.batcher.call(*call))
        if ensured is None:
            return None
        await self._announce(ensured)
        return self._with_defaults(ensured.config)

    async def _ensure(self, name: str) -> TopicConfig:
        if is_internal_topic(name):  # served if it exists (made by older code), never made
            config = await self._read(name, create=False)
            if config is None:
                raise BrokerError(
                    UNKNOWN_TOPIC,
                    f"unknown topic {name} (reserved by Kafka: never created automatically)",
                )
            return config
        if self.auto_create_topics and not self.max_topics:
            config = await self._read(name, create=True)
            assert config is not None
            return config
        config = await self._read(name, create=False)
        if config is not None:
            return config
        if not self.auto_create_topics:
            raise BrokerError(UNKNOWN_TOPIC, f"unknown topic {name} (auto-creation is off)")
        await self.check_limit(name)
        config = await self._read(name, create=True)
        assert config is not None
        return config

    async def check_limit(self, name: str) -> None:
        """TOPIC_LIMIT unless one more topic (``name``) fits under ``max_topics``; Kafka's
        internal topics (the pods' __consumer_offsets) do not count. The count and the
        creation are two slots (Redis Cluster): pods creating topics at the same moment may
        together pass the limit by a few."""
        if not self.max_topics:
            return
        total, internal = await asyncio.gather(
            self.batcher.call("SCARD", self.keys.topics),
            self.batcher.call("SMISMEMBER", self.keys.topics, *sorted(KAFKA_INTERNAL_TOPICS)),
        )
        count = int(total) - sum(map(int, internal))
        if count >= self.max_topics:
            raise BrokerError(
                TOPIC_LIMIT,
                f"cannot create topic {name}: {count} topics exist, the limit is {self.max_topics}",
            )

    async def _announce(self, ensured: EnsuredTopic) -> None:
        """What follows topic/ensure.lua (see ensure_topic_sync): revive, then list and
        publish unless the topic was deleted meanwhile (its own tombstones stay; listing it
        would leave a name in the topics set with no topic)."""
        config, call = ensured.config, self.batcher.call
        if ensured.created:
            if _deleted_meanwhile(
                await self.revive(config.name, config.topic_id, range(config.partitions))
            ):
                return
            await asyncio.gather(*(call(*c) for c in _listing_commands(self.keys, config)))
        elif ensured.id_assigned:
            await call("HSET", self.keys.topic_ids, config.topic_id, config.name)

    async def create(
        self, name: str, partitions: int, replication_factor: int, min_insync_replicas: int
    ) -> tuple[TopicConfig, bool]:
        """Create a topic with these settings; returns (its settings, created). An existing
        topic keeps its own settings (compare them to see whether they differ)."""
        call = topic_ensure_call(
            self.keys, name, partitions, replication_factor, min_insync_replicas, True
        )
        ensured = _ensured(name, await self.batcher.call(*call))
        assert ensured is not None  # created, or there
        await self._announce(ensured)
        return self._with_defaults(ensured.config), ensured.created

    async def by_id(self, topic_id: str) -> TopicConfig | None:
        """The topic whose id is ``topic_id``; None when no topic has it (a deleted one's).
        The id index (``Keys.topic_ids``, written beside the topics set, another slot) names
        the topic; the topic hash's own id has the last word."""
        name = await self.batcher.call("HGET", self.keys.topic_ids, topic_id)
        if name is None:
            return None
        config = await self.lookup(to_str(name))
        if config is not None and config.topic_id != topic_id:
            # cached settings of an earlier topic of that name (its deletion not heard yet)
            config = await self.read(config.name)
        return config if config is not None and config.topic_id == topic_id else None

    async def names(self) -> list[str]:
        return sorted(n.decode() for n in await self.batcher.call("SMEMBERS", self.keys.topics))

    async def listed(self, name: str) -> bool:
        """Whether the topics set names ``name`` (a deletion cut short may leave a name
        listed with no topic hash)."""
        return bool(await self.batcher.call("SISMEMBER", self.keys.topics, name))

    async def read_settings(self, name: str) -> dict[str, str]:
        """Topic ``name``'s hash as text, configs included (empty: no such topic)."""
        fields = await self.batcher.call("HGETALL", self.keys.topic(name))
        return {to_str(k): to_str(v) for k, v in fields.items()}

    async def alter_configs(self, name: str, changes: Mapping[str, ConfigValue]) -> None:
        """Set the configs of ``changes`` (``ALTERABLE_FIELDS`` -> value, Kafka's text form;
        None: back to the default) in topic ``name``'s hash, and tell every pod to read them
        again; ValueError for any other field. The values are validated by the caller
        (mapping.topic.topic_configs.check_topic_configs)."""
        for command in _config_commands(self.keys, name, changes):
            await self.batcher.call(*command)
        await self.announce_changed(name)

    async def assign_replicas(self, name: str, replicas: Mapping[int, Sequence[int]]) -> None:
        """Record explicit replica assignments (partition -> broker ids, checked by the
        caller) of topic ``name`` for Metadata, and tell every pod to read them."""
        fields = [
            item
            for partition, brokers in replicas.items()
            for item in (f"{ASSIGNED_REPLICAS_PREFIX}{partition}", ",".join(map(str, brokers)))
        ]
        if fields:
            await self.batcher.call("HSET", self.keys.topic(name), *fields)
            await self.announce_changed(name)

    async def revive(self, name: str, topic_id: str, partitions: range) -> list[Any]:
        """Remove the tombstones an earlier topic of that name left on these partitions (a
        creation or a growth of topic ``topic_id``); the replies (-1: the topic was deleted
        meanwhile)."""
        commands = _revive_commands(self.keys, name, topic_id, partitions)
        return list(await asyncio.gather(*(self.batcher.call(*c) for c in commands)))

    async def grow(self, name: str, count: int) -> int:
        """Raise topic ``name``'s partition count to ``count`` (only ever up: see
        topic/grow.lua); the count before, -1 when there is no such topic."""
        return int(await self.batcher.call(*topic_grow_call(self.keys, name, count)))

    async def announce_changed(self, name: str) -> None:
        """Every pod forgets topic ``name``'s settings (partition count, configs) and reads
        them again."""
        await self.batcher.call("PUBLISH", self.keys.topics_changed_channel, name)

    async def delete_settings(self, name: str, topic_id: str) -> int:
        """Delete topic ``name``'s hash unless it holds another topic than ``topic_id`` by
        now (see topic/delete.lua): the partition count it had, -1 when there was no hash,
        -2 when it holds another topic."""
        return int(await self.batcher.call(*topic_delete_call(self.keys, name, topic_id)))

    async def unlist(self, name: str, topic_id: str) -> None:
        """Remove a deleted topic from the topics set and its id (if any) from the id index."""
        call = self.batcher.call
        unlisting = [call("SREM", self.keys.topics, name)]
        if topic_id:
            unlisting.append(call("HDEL", self.keys.topic_ids, topic_id))
        await asyncio.gather(*unlisting)

    async def announce_deleted(self, name: str) -> None:
        """Every pod drops topic ``name``'s cached settings."""
        await self.batcher.call("PUBLISH", self.keys.topics_deleted_channel, name)
