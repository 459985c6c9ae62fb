"""What the Kafka API modules answer with: the pod's parts (adapter/pod.py) and what only the
Kafka front door has: its broker registration, advertised address and a few caches. One per
pod, shared by its Kafka connections."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapter.authorizer import Authorizer
from adapter.kafka.fetch_ahead import ReadAhead
from adapter.kafka.fetch_sessions import FetchSessions
from adapter.pod import Pod
from mapping.core.errors import UNKNOWN_TOPIC, BrokerError
from mapping.core.keys import is_valid_name
from mapping.share_group.share_groups import ShareGroups
from mapping.topic import partitioner
from mapping.topic.brokers import BrokerRegistry
from mapping.topic.topic_config import TopicConfig

# Kafka's "no topic id" (the zero UUID)
NO_TOPIC_ID = uuid.UUID(int=0)
# Topic ids whose names a pod remembers at most (all forgotten at once beyond: cheap, rare).
MAX_REMEMBERED_IDS = 10_000


@dataclass
class KafkaContext:
    pod: Pod
    registry: BrokerRegistry
    advertised_host: str
    advertised_port: int
    # per partition: the learned average entry size, so a Fetch's first XRANGE page is
    # sized to its byte limit
    entry_sizes: dict[tuple[str, int], float] = field(default_factory=dict)
    # incremental fetch sessions (KIP-227), kept in the pod's memory
    fetch_sessions: FetchSessions = field(default_factory=lambda: FetchSessions(0))
    # Fetch's reads ahead (adapter/kafka/fetch_ahead.py), within their byte bound
    read_ahead: ReadAhead = field(default_factory=lambda: ReadAhead(0))

    # share groups (KIP-932): their state in Redis; the share sessions, in the pod's memory
    # (adapter/kafka/share_fetch.py), by (group, member id)
    share_sessions: dict[tuple[str, str], Any] = field(default_factory=dict)
    _share_groups: ShareGroups | None = None

    # topic id -> name, of the ids asked for lately (checked against the cached settings)
    topic_names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)

    async def topic_id(self, name: str) -> uuid.UUID | None:
        """The id of topic ``name`` (Metadata v10+, KIP-848), None when there is no such
        topic: random at each creation and stored with the topic (see ``topic_id_of``)."""
        config = await self.pod.topics.lookup(name)
        return topic_id_of(config) if config is not None else None

    async def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with ``topic_id``; None when no topic has it (a deleted
        topic's id stays unknown, also once a topic of its name exists again). Ids seen
        before cost no Redis call while the pod holds their topic's settings (KIP-848
        members send theirs with every heartbeat)."""
        if not topic_id.int:
            return None
        wanted = str(topic_id)
        name = self.topic_names_by_id.get(topic_id)
        if name is not None:
            known = self.pod.topics.cache.known(name)
            if known is not None and known.topic_id == wanted:
                return name
        config = await self.pod.topics.by_id(wanted)
        if config is None:
            self.topic_names_by_id.pop(topic_id, None)
            return None
        if len(self.topic_names_by_id) >= MAX_REMEMBERED_IDS:
            self.topic_names_by_id.clear()
        self.topic_names_by_id[topic_id] = config.name
        return config.name

    @property
    def share_groups(self) -> ShareGroups:
        """The share groups' store, built on first use from the pod's parts."""
        if self._share_groups is None:
            pod = self.pod
            self._share_groups = ShareGroups(pod.batcher, pod.keys, pod.kafka.bits)
        return self._share_groups

    @property
    def authorizer(self) -> Authorizer:
        """The pod's ACL checks (off: every check allows, at no cost)."""
        return self.pod.authorizer

    @property
    def cluster_id(self) -> str:
        return f"redis-streams-adapter-{self.pod.topics.keys.prefix}"

    async def find_topic(self, name: str | None, create: bool = False) -> TopicConfig | None:
        """The topic's settings; None when it does not exist (created when ``create``) or
        the name is not a valid topic name (a null string included)."""
        if not isinstance(name, str):
            return None
        if not is_valid_name(name):
            return None
        if not create:
            return await self.pod.topics.lookup(name)
        try:  # creates it unless the pod's --no-auto-create-topics / --max-topics say no
            return await self.pod.topics.topic(name)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC:
                return None
            raise

    async def brokers(self) -> list[tuple[int, str, int]]:
        """The live brokers (this pod alone until its registration is visible). While Redis
        cannot be read: the ones last read (never fewer: clients would drop the others and
        the coordinators they found there), this pod among them."""
        try:
            live = await self.registry.live()
        except BrokerError:
            live = list(self.registry.last_live)
            here = (self.advertised_host, self.advertised_port)
            node_id = self.registry.node_id
            if live and node_id is not None and all((h, p) != here for _, h, p in live):
                live = sorted([*live, (node_id, *here)])
        if not live:
            live = [self.this_broker()]
        return live

    def this_broker(self) -> tuple[int, str, int]:
        """(node id, host, port) of this pod's broker: alive for certain, it is answering."""
        return self.registry.node_id or 0, self.advertised_host, self.advertised_port

    def controller(self, brokers: list[tuple[int, str, int]]) -> int:
        """The controller Metadata and DescribeCluster name: this pod's broker when listed
        (any pod does a controller's work, and this one is alive: it answers), else the
        first. Naming the first broker named a pod killed a moment ago, whose registration
        lives on for a TTL, and librdkafka's admin requests wait on the controller it was
        told of without reading Metadata again."""
        here = self.registry.node_id
        return here if any(node == here for node, _, _ in brokers) else brokers[0][0]

    async def coordinator(self, key: str) -> tuple[int, str, int]:
        """The broker clients are told coordinates group ``key``: a stable spread over the
        live brokers (any pod can do a group's work: its state is in Redis)."""
        return coordinator_of(await self.brokers(), key)

    async def coordinated_here(self) -> Callable[[str], bool]:
        """Whether this pod's broker is the one FindCoordinator names for a group, over the
        live brokers as they are now: ListGroups lists those groups, as a Kafka broker lists
        the groups it coordinates, so a client that asks every broker (librdkafka, the admin
        clients) sees each group once. Pods behind one advertised address are one broker:
        each of them answers for all of its groups."""
        brokers = await self.brokers()
        here = (self.advertised_host, self.advertised_port)
        return lambda group: coordinator_of(brokers, group)[1:] == here


def topic_id_of(config: TopicConfig) -> uuid.UUID:
    """The topic's id as Kafka carries it. Every config read from Redis has one; the zero id
    ("none") only stands in for a config built without reading Redis."""
    return uuid.UUID(config.topic_id) if config.topic_id else NO_TOPIC_ID


def coordinator_of(brokers: list[tuple[int, str, int]], group: str) -> tuple[int, str, int]:
    """The broker of ``brokers`` (the live ones, by node id) that coordinates ``group``: FNV-1a
    of the group id's UTF-8 bytes, modulo their number."""
    return brokers[partitioner.fnv1a_32(group.encode("utf-8", "surrogatepass")) % len(brokers)]
