"""What the Kafka API modules answer with: the pod's settings, stores, replication (acks=all
waiting), broker registry and consumer groups. One per pod, shared by its Kafka connections."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from adapter.settings import Settings
from mapping import partitioner
from mapping.brokers import BrokerRegistry
from mapping.errors import UNKNOWN_TOPIC, BrokerError
from mapping.hw_watch import HighWatermarkWatch
from mapping.kafka import KafkaStore
from mapping.kafka_groups import KafkaGroups
from mapping.keys import is_valid_name
from mapping.replication import Replication
from mapping.store import Store, TopicConfig


@dataclass
class KafkaContext:
    settings: Settings
    store: Store
    kafka: KafkaStore
    replication: Replication
    registry: BrokerRegistry
    hw_watch: HighWatermarkWatch
    groups: KafkaGroups
    advertised_host: str
    advertised_port: int
    # per partition: the learned average entry size, so a Fetch's first XRANGE page is
    # sized to its byte limit
    entry_sizes: dict[tuple[str, int], float] = field(default_factory=dict)

    # topic id -> name, of the topic ids answered so far (KIP-848 names topics by id)
    topic_names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)

    def topic_id(self, name: str) -> uuid.UUID:
        """The topic's id (Metadata v10+, KIP-848): a UUID5 of the key prefix and the name,
        so every pod answers the same without storing it. A topic deleted and created again
        keeps its id (Kafka would give it a new one)."""
        topic_id = uuid.uuid5(uuid.uuid5(uuid.NAMESPACE_URL, self.cluster_id), name)
        self.topic_names_by_id[topic_id] = name
        return topic_id

    async def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id``; None when no topic has it."""
        if topic_id not in self.topic_names_by_id:
            for name in await self.store.topic_names():
                self.topic_id(name)
        return self.topic_names_by_id.get(topic_id)

    @property
    def cluster_id(self) -> str:
        return f"redis-streams-adapter-{self.store.keys.prefix}"

    async def find_topic(self, name: str | None, create: bool = False) -> TopicConfig | None:
        """The topic's settings; None when it does not exist (created when ``create``) or
        the name is not a valid topic name (a null string included)."""
        if not isinstance(name, str):
            return None
        if not is_valid_name(name):
            return None
        if not create:
            return await self.store.lookup(name)
        try:  # creates it unless the pod's --no-auto-create-topics / --max-topics say no
            return await self.store.topic(name)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC:
                return None
            raise

    async def brokers(self) -> list[tuple[int, str, int]]:
        """The live brokers (this pod alone until its registration is visible)."""
        try:
            live = await self.registry.live()
        except BrokerError:
            live = []
        if not live:
            live = [(self.registry.node_id or 0, self.advertised_host, self.advertised_port)]
        return live

    async def coordinator(self, key: str) -> tuple[int, str, int]:
        """The broker clients are told coordinates group ``key``: a stable spread over the
        live brokers (any pod can do a group's work: its state is in Redis)."""
        brokers = await self.brokers()
        return brokers[partitioner.fnv1a_32(key.encode()) % len(brokers)]

    def leader_index(self, brokers: list[tuple[int, str, int]], topic: str, partition: int) -> int:
        """The index in ``brokers`` of the partition's leader: a stable spread over the live
        brokers (any pod still serves any partition: this only spreads the clients' load)."""
        return (partitioner.fnv1a_32(topic.encode()) + partition) % len(brokers)
