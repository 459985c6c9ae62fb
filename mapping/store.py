"""The Redis side of the V1 commands: topics, produce, consume, partition roles, replica fetch.

Every method builds script calls from `keys`, `codec` and `scripts`, sends them through a
`RedisBatcher` (so calls from many requests share one pipeline) and decodes the replies.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from itertools import islice
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mapping import codec, scripts
from mapping.batcher import Pending, RedisBatcher
from mapping.cluster import connect_async
from mapping.errors import TOPIC_LIMIT, UNKNOWN_TOPIC, BadRequest, BrokerError, ConfigurationError
from mapping.keys import Keys
from mapping.scripts import call_sync

if TYPE_CHECKING:
    from mapping.durable import DurableRounds

# Offsets past every log end (exact as a Lua double): "copy everything there is".
LATEST_OFFSET = (1 << 53) - 1
# Entries one REPLICA_FETCH call copies at most: bounds the time one script holds Redis.
DEFAULT_MAX_COPY = 1000
# Topic settings one pod keeps in memory at most (the least recently used go first).
DEFAULT_TOPIC_CACHE_SIZE = 10_000
# The value size marks produce.lua keeps: 'size.<k>' for k in this range (see _partition.lua).
SIZE_MIN_BITS, SIZE_MAX_BITS = 7, 24
# Partitions whose size marks one pod remembers (the oldest learnt are forgotten first).
MAX_REMEMBERED_MARKS = 10_000
# Fewer records than this per native read: consume.lua may read instead (see SizeMarks).
NATIVE_MIN_COUNT = 32


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
    # Random at each creation, stored in the topic hash (see ensure_topic.lua): a topic
    # deleted and made again is another topic to Kafka clients. "" only where a caller
    # builds a config without reading Redis.
    topic_id: str = ""


@dataclass(frozen=True, slots=True)
class EnsuredTopic:
    """What ensure_topic.lua answered: the settings, whether this call created the topic,
    and whether it gave a topic made by older code its id (both need announcing)."""

    config: TopicConfig
    created: bool
    id_assigned: bool


def ensure_topic_call(
    keys: Keys,
    name: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    *,
    create: bool = True,
) -> tuple:
    """The ensure_topic.lua call that creates topic ``name`` with these settings (or only
    looks it up: ``create`` False), carrying the fresh id it gets if it is created now."""
    return scripts.load("ensure_topic").command(
        [keys.topic(name)],
        [partitions, replication_factor, min_insync_replicas, int(create), new_topic_id()],
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def ensured_topic(name: str, reply: list[Any]) -> EnsuredTopic | None:
    """ensure_topic.lua's reply; None when the topic does not exist (and was not created)."""
    if not reply:
        return None
    config = TopicConfig(name, int(reply[0]), int(reply[1]), int(reply[2]), _text(reply[4]))
    return EnsuredTopic(config, bool(reply[3]), bool(reply[5]))


@dataclass(frozen=True, slots=True)
class ProduceResult:
    offsets: list[int]
    high_watermark: int
    isr_size: int  # right after the append


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    records: list[tuple[int, bytes]]
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    acked_offset: int  # what the replica holds now (<= the offset asked for)
    high_watermark: int
    isr: list[int]
    log_end: int
    complete: bool  # False: the copy bound stopped short, call again

    def under_replicated(self, config: TopicConfig) -> bool:
        return len(self.isr) < config.replication_factor


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    high_watermark: int
    isr_size: int
    next_change_ms: int  # ms until a lagging ISR member drops out; -1: none lags
    log_end: int
    isr: list[int]
    role: str


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True, slots=True)
class SizeMarks:
    """What a partition's state said about its values when a CONSUME last read it (offsets
    up to ``log_end`` are known, from ``marked_from`` on; -1: never marked), and the
    smallest value that CONSUME returned if it returned only a few (0: many, or none)."""

    log_end: int
    marked_from: int
    # From k = SIZE_MIN_BITS up: the last offset with a value over 2**k bytes (-1: none).
    last_over: tuple[int, ...]
    few_smallest: int = 0

    @classmethod
    def of(cls, marks: list[Any], few_smallest: int = 0) -> SizeMarks:
        """From consume.lua's ``{log_end, size.from, size.<k>...}``."""
        return cls(int(marks[0]), int(marks[1]), tuple(int(m) for m in marks[2:]), few_smallest)

    def covers(self, start: int) -> bool:
        """Whether these marks bound the values from ``start`` up to ``log_end``."""
        return 0 <= self.marked_from <= start <= self.log_end

    def value_bound(self, start: int) -> int:
        """Bytes no value from ``start`` to ``log_end`` exceeds (0: the marks do not say);
        2**(SIZE_MAX_BITS + 1) stands for "any size"."""
        if not self.covers(start):
            return 0
        for bits, last in enumerate(self.last_over, SIZE_MIN_BITS):
            if last < start:  # every value from start to log_end is at most 2**bits bytes
                return 1 << bits
        return 1 << (SIZE_MAX_BITS + 1)

    def native_count(self, start: int, max_records: int, max_bytes: int) -> int:
        """How many records a native XRANGE from ``start`` to ``log_end`` may count with
        their values within ``max_bytes`` (at least 1: the first record always comes);
        0 when the marks do not say (past ``log_end``, or unmarked records)."""
        bound = self.value_bound(start)
        return max(1, min(max_records, max_bytes // bound)) if bound else 0

    def native_read(self, start: int, max_records: int, max_bytes: int) -> int:
        """The COUNT of a native XRANGE to read from ``start``, or 0 when consume.lua should
        read. Fewer than ``NATIVE_MIN_COUNT`` records under the byte limit means large
        values in the range: if the last read returned values about that large (at least
        half the bound), they are all alike and the count is about exact; otherwise small
        values may come before a large one, and a native read would hold them to a page
        of a few, so consume.lua reads exactly up to the limit (copying large values
        through Lua costs Redis about 30x XRANGE's own copy: it is not the default)."""
        count = self.native_count(start, max_records, max_bytes)
        if count >= min(NATIVE_MIN_COUNT, max_records):
            return count
        if count and self.few_smallest * 2 > self.value_bound(start):
            return count
        return 0


def _records(
    reply: list[Any], first: int, high_watermark: int, bits: int
) -> list[tuple[int, bytes]]:
    """(offset, value) of the XRANGE entries ``reply[first:]`` up to the high watermark.
    Entries are raw ``[id, [field, value, ...]]`` (see ``connect``) or redis-py's
    ``(id, {field: value})``."""
    records: list[tuple[int, bytes]] = []
    for entry_id, fields in islice(reply, first, None):
        offset = codec.entry_offset(entry_id, bits)
        if offset > high_watermark:
            break
        if isinstance(fields, dict):  # redis-py's shape, where its callback applies
            value = fields.get(b"value", b"")
        elif len(fields) > 3 and fields[2] == b"value":  # as produce.lua writes them
            value = fields[3]
        else:
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            value = named.get(b"value", b"")
        records.append((offset, value))
    return records


def _joined(page: ConsumeResult, rest: ConsumeResult, max_bytes: int) -> ConsumeResult:
    """``page`` and the records read on after it, with the later hw, the values of all but
    the first record within ``max_bytes`` (a page cut there is full)."""
    records = list(page.records)
    used = sum(len(value) for _, value in records[1:])
    for offset, value in rest.records:
        used += len(value) if records else 0
        if used > max_bytes:
            break
        records.append((offset, value))
    return ConsumeResult(records, rest.high_watermark)


def revive_commands(keys: Keys, name: str, topic_id: str, partitions: range) -> list[tuple]:
    """The first step after the creation of topic ``name`` (or the growth of its partition
    count): these partitions lose the tombstone an earlier topic of that name left (see
    mapping/admin.py and partition_revive.lua). A reply of -1 means the topic itself was
    deleted meanwhile: it must not be announced."""
    script = scripts.load("partition_revive")
    return [script.command([keys.partition(name, p).state], [topic_id]) for p in partitions]


def listing_commands(keys: Keys, config: TopicConfig) -> list[tuple]:
    """The second step: the topic joins the topics set and the id index, and its name is
    published (the replicators listen)."""
    return [
        ("SADD", keys.topics, config.name),
        ("HSET", keys.topic_ids, config.topic_id, config.name),
        ("PUBLISH", keys.topics_channel, config.name),
    ]


def deleted_meanwhile(revived: list[Any]) -> bool:
    """Whether revive_commands' replies say the topic was deleted since its creation."""
    return any(int(reply) < 0 for reply in revived)


def announce_sync(client: Any, keys: Keys, ensured: EnsuredTopic) -> None:
    """What follows ensure_topic.lua, on a synchronous client (the command line, Spark):
    a created topic is revived and listed, an older topic given its id now is indexed."""
    config = ensured.config
    if ensured.created:
        revive = revive_commands(keys, config.name, config.topic_id, range(config.partitions))
        if deleted_meanwhile([call_sync(client, command) for command in revive]):
            return
        for command in listing_commands(keys, config):
            client.execute_command(*command)
    elif ensured.id_assigned:
        client.hset(keys.topic_ids, config.topic_id, config.name)


def _then(
    step: asyncio.Future[Any], outcome: asyncio.Future[Any], use: Callable[[Any], Any]
) -> None:
    """When ``step`` is done, ``use`` its reply: ``use`` settles ``outcome`` itself when it
    returns None, else its value is the outcome. An error of either settles ``outcome``."""

    def settle(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            if not outcome.done():
                outcome.cancel()
            return
        error = done.exception()  # retrieved here, whatever becomes of outcome
        if outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
            return
        try:
            value = use(done.result())
        except Exception as exc:
            if not outcome.done():
                outcome.set_exception(exc)
            return
        if value is not None and not outcome.done():
            outcome.set_result(value)

    step.add_done_callback(settle)


def connect(url: str, timeout_s: float = 5.0, **options: object) -> Redis:
    """A client for the adapter: bytes replies, bounded waits, and no automatic retries
    (a retried pipeline could append a produce twice). A ``redis+cluster://`` URL gives a
    cluster client (see mapping.cluster). ``options``: credentials and TLS files beyond
    what the URL carries (``rediss://USER:PASSWORD@HOST:PORT/DB``)."""
    client = connect_async(url, timeout_s, **options)
    # CONSUME pages stay hiredis' lists: redis-py's dict per entry costs more than the rest
    # of a CONSUME (``_records`` reads both shapes).
    client.set_response_callback("XRANGE", _raw)
    client.set_response_callback("XREVRANGE", _raw)
    return client  # type: ignore[return-value]


def _raw(response: Any, **options: Any) -> Any:
    return response


def make_batcher(client: Redis) -> RedisBatcher:
    """The batcher for this client: one pipeline per turn, or concurrent calls on a cluster."""
    if isinstance(client, RedisCluster):
        from mapping.cluster_batcher import ClusterBatcher

        return ClusterBatcher(client)  # type: ignore[return-value]
    return RedisBatcher(client)


async def pin_sequence_bits(client: Redis, keys: Keys, bits: int) -> None:
    """Store the deployment's sequence bits on first start; refuse a pod that disagrees."""
    codec.check_sequence_bits(bits)
    await client.hsetnx(keys.meta, "sequence_bits", bits)
    stored = int(await client.hget(keys.meta, "sequence_bits"))
    if stored != bits:
        raise ConfigurationError(
            f"this deployment uses {stored} sequence bits (stored in Redis at {keys.meta}); "
            f"this pod is configured with {bits}: start it with --sequence-bits {stored}"
        )


class Store:
    def __init__(
        self,
        batcher: RedisBatcher,
        keys: Keys,
        *,
        sequence_bits: int = codec.DEFAULT_SEQUENCE_BITS,
        replica_lag_max_ms: int = 10_000,
        topic_defaults: TopicDefaults = TopicDefaults(),
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
        self.sequence_bits = sequence_bits
        self.replica_lag_max_ms = replica_lag_max_ms
        self.topic_defaults = topic_defaults
        self.auto_create_topics = auto_create_topics
        self.max_topics = max_topics
        self.topic_cache_size = max(1, topic_cache_size)
        # A topic's settings never change while it exists, so they are cached until the
        # topic is deleted (every pod hears it on Keys.topics_deleted_channel) or evicted.
        self._pending: dict[str, asyncio.Future[TopicConfig]] = {}  # lookups in flight
        self._known: OrderedDict[str, TopicConfig] = OrderedDict()  # LRU: no await needed
        self._produce_builders: dict[tuple[str, int], Callable[[list[Any]], tuple]] = {}
        # (topic, partition) -> its size marks as the last CONSUME saw them.
        self._size_marks: dict[tuple[str, int], SizeMarks] = {}
        # --redis-wait-replicas (mapping/durable.py, set by Replication): readers see hw only
        # up to what the Redis replicas have, and appends and reads ask for WAIT rounds.
        self.durable: DurableRounds | None = None

    @property
    def read_flag(self) -> list[str]:
        """The reader scripts' last argument: hw at most durable_hw (readable_hw)."""
        return ["1"] if self.durable is not None else []

    async def topic(self, name: str) -> TopicConfig:
        """The topic's settings, creating it with the defaults on first use (when allowed)."""
        known = self.known_topic(name)
        if known is not None:
            return known
        future = self._pending.get(name)
        if future is None:
            future = asyncio.ensure_future(self._ensure_topic(name))
            self._pending[name] = future
            future.add_done_callback(partial(self._resolved, name))
        return await asyncio.shield(future)

    async def lookup(self, name: str) -> TopicConfig | None:
        """The topic's settings, or None when it does not exist (never creates it)."""
        known = self.known_topic(name)
        if known is not None:
            return known
        config = await self._read_topic(name, create=False)
        if config is not None and name not in self._pending:
            self._remember(config)
        return config

    def _resolved(self, name: str, future: asyncio.Future[TopicConfig]) -> None:
        if self._pending.get(name) is not future:
            return  # forgotten meanwhile (deleted): the answer may be stale, not cached
        del self._pending[name]
        if not future.cancelled() and future.exception() is None:
            self._remember(future.result())

    def _remember(self, config: TopicConfig) -> None:
        self._known[config.name] = config
        self._known.move_to_end(config.name)
        while len(self._known) > self.topic_cache_size:
            _, evicted = self._known.popitem(last=False)
            self._drop_builders(evicted)

    def _drop_builders(self, config: TopicConfig) -> None:
        """Forget what was derived from the topic's settings: produce builders, size marks."""
        for p in range(config.partitions):
            self._produce_builders.pop((config.name, p), None)
            self._size_marks.pop((config.name, p), None)

    def forget(self, name: str) -> None:
        """Drop what this pod knows of topic ``name`` (it was deleted): the next command
        naming it looks it up (or creates it) afresh."""
        self._pending.pop(name, None)
        config = self._known.pop(name, None)
        if config is not None:
            self._drop_builders(config)

    def forget_all(self) -> None:
        """Drop every cached topic (deletions may have been missed)."""
        self._pending.clear()
        self._known.clear()
        self._produce_builders.clear()
        self._size_marks.clear()

    def cached_topics(self) -> list[str]:
        """Names whose settings this pod holds, least recently used first."""
        return list(self._known)

    async def read_topic(self, name: str) -> TopicConfig | None:
        """The topic's settings as Redis has them now (never cached, never creates it;
        a topic made by older code gets its id)."""
        return await self._read_topic(name, create=False)

    async def _read_topic(self, name: str, *, create: bool) -> TopicConfig | None:
        d = self.topic_defaults
        # min ISR above RF could never be met (acks=all would always time out): cap it.
        min_isr = min(d.min_insync_replicas, d.replication_factor)
        call = ensure_topic_call(
            self.keys, name, d.partitions, d.replication_factor, min_isr, create=create
        )
        ensured = ensured_topic(name, await self.batcher.call(*call))
        if ensured is None:
            return None
        await self._announce_topic(ensured)
        return ensured.config

    async def _ensure_topic(self, name: str) -> TopicConfig:
        if is_internal_topic(name):  # served if it exists (made by older code), never made
            config = await self._read_topic(name, create=False)
            if config is None:
                raise BrokerError(
                    UNKNOWN_TOPIC,
                    f"unknown topic {name} (reserved by Kafka: never created automatically)",
                )
            return config
        if self.auto_create_topics and not self.max_topics:
            config = await self._read_topic(name, create=True)
            assert config is not None
            return config
        config = await self._read_topic(name, create=False)
        if config is not None:
            return config
        if not self.auto_create_topics:
            raise BrokerError(UNKNOWN_TOPIC, f"unknown topic {name} (auto-creation is off)")
        await self.check_topic_limit(name)
        config = await self._read_topic(name, create=True)
        assert config is not None
        return config

    async def check_topic_limit(self, name: str) -> None:
        """TOPIC_LIMIT unless one more topic (``name``) fits under ``max_topics``. The count
        and the creation are two slots (Redis Cluster): pods creating topics at the same
        moment may together pass the limit by a few."""
        if not self.max_topics:
            return
        count = int(await self.batcher.call("SCARD", self.keys.topics))
        if count >= self.max_topics:
            raise BrokerError(
                TOPIC_LIMIT,
                f"cannot create topic {name}: {count} topics exist, the limit is {self.max_topics}",
            )

    async def _announce_topic(self, ensured: EnsuredTopic) -> None:
        """What follows ensure_topic.lua (see announce_sync): revive, then list and publish
        unless the topic was deleted meanwhile (its own tombstones stay; listing it would
        leave a name in the topics set with no topic)."""
        config, call = ensured.config, self.batcher.call
        if ensured.created:
            partitions = range(config.partitions)
            revive = revive_commands(self.keys, config.name, config.topic_id, partitions)
            if deleted_meanwhile(await asyncio.gather(*(call(*c) for c in revive))):
                return
            await asyncio.gather(*(call(*c) for c in listing_commands(self.keys, config)))
        elif ensured.id_assigned:
            await call("HSET", self.keys.topic_ids, config.topic_id, config.name)

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, min_insync_replicas: int
    ) -> tuple[TopicConfig, bool]:
        """Create a topic with these settings; returns (its settings, created). An existing
        topic keeps its own settings (compare them to see whether they differ)."""
        call = ensure_topic_call(
            self.keys, name, partitions, replication_factor, min_insync_replicas
        )
        ensured = ensured_topic(name, await self.batcher.call(*call))
        assert ensured is not None  # created, or there
        await self._announce_topic(ensured)
        return ensured.config, ensured.created

    async def topic_by_id(self, topic_id: str) -> TopicConfig | None:
        """The topic whose id is ``topic_id``; None when no topic has it (a deleted one's).
        The id index (``Keys.topic_ids``, written beside the topics set, another slot) names
        the topic; the topic hash's own id has the last word."""
        name = await self.batcher.call("HGET", self.keys.topic_ids, topic_id)
        if name is None:
            return None
        config = await self.lookup(_text(name))
        if config is not None and config.topic_id != topic_id:
            # cached settings of an earlier topic of that name (its deletion not heard yet)
            config = await self.read_topic(config.name)
        return config if config is not None and config.topic_id == topic_id else None

    async def topic_names(self) -> list[str]:
        return sorted(n.decode() for n in await self.batcher.call("SMEMBERS", self.keys.topics))

    async def partition_of(self, topic: str, partition: int) -> TopicConfig:
        config = await self.topic(topic)
        if not 0 <= partition < config.partitions:
            raise BadRequest("invalid partition")
        return config

    def _partition_call(
        self, name: str, config: TopicConfig, partition: int, args: list, extra_keys: tuple = ()
    ) -> tuple:
        pk = self.keys.partition(config.name, partition)
        return scripts.load(name).command(
            [pk.log, pk.state, pk.hw_channel, pk.appended_channel, *extra_keys],
            [self.sequence_bits, config.replication_factor, self.replica_lag_max_ms, *args],
        )

    async def _partition_reply(self, config: TopicConfig, call: tuple) -> Any:
        """A partition script's reply; when it refuses the partition as deleted, the topic
        is forgotten (the deletion notice not heard yet) before the error goes on."""
        try:
            return await self.batcher.call(*call)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC and self._known.get(config.name) is config:
                self.forget(config.name)
            raise

    # for the Kafka store (mapping/kafka.py): the same partition script calls
    partition_call = _partition_call

    def known_topic(self, name: str) -> TopicConfig | None:
        """The topic's settings if this pod has them already (no Redis call needed)."""
        config = self._known.get(name)
        if config is not None:
            self._known.move_to_end(name)
        return config

    def start_produce(
        self, config: TopicConfig, partition: int, records: list[tuple[bytes, bytes]]
    ) -> Pending[ProduceResult]:
        """Queue an append; concurrent appends to one partition share one script call."""
        group = (config.name, partition)
        build = self._produce_builders.get(group)
        if build is None or build.args[1] is not config:  # new, or a topic made anew
            build = self._produce_builders[group] = partial(
                self._partition_call, "produce", config, partition
            )
        future, first = self.batcher.append(group, build, [p for r in records for p in r])
        if self.durable is not None:
            self.durable.note(config, partition)
        start = 2 + first // 2  # items are key, value pairs; the reply is hw, |ISR|, offsets...
        end = start + len(records)
        return Pending(
            future,
            lambda reply: ProduceResult(
                [int(o) for o in reply[start:end]], int(reply[0]), int(reply[1])
            ),
        )

    async def produce(
        self, config: TopicConfig, partition: int, records: list[tuple[bytes, bytes]]
    ) -> ProduceResult:
        return await self.start_produce(config, partition, records)

    def start_consume(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int = 0,
    ) -> Pending[ConsumeResult]:
        """Records at or after ``offset`` and at most hw. ``max_bytes``: the values of all
        but the first record stay within it (0: no byte limit), enforced where the data is
        read, so a page of large values never comes into the pod or Redis' output whole.

        Records are read with a native XRANGE (copying entries through Lua costs Redis far
        more) whose COUNT keeps within ``max_bytes`` by the partition's size marks (see
        ``SizeMarks``), unless the marks allow only a few records: then consume.lua reads
        exactly up to the limit. Where the marks this pod remembers from its last CONSUME
        of the partition cover ``offset``, one pipeline does it; elsewhere (the log's tail,
        a partition not read yet) hw and the marks come first, then the read: one more
        round trip instead of a Lua copy of the tail."""
        if self.durable is not None:
            self.durable.note(config, partition)
        if max_bytes <= 0:
            return self._read_with_status(config, partition, offset, max_records, "+")
        known = self._size_marks.get((config.name, partition))
        if known is None or not known.covers(offset):
            return self._read_after_status(config, partition, offset, max_records, max_bytes)
        count = known.native_read(offset, max_records, max_bytes)
        if count:
            return self._read_to_known_end(
                config, partition, offset, count, known.log_end, max_records, max_bytes
            )
        start = codec.entry_id(offset, self.sequence_bits)
        call = self._partition_call(
            "consume", config, partition, [start, max_records, max_bytes, *self.read_flag]
        )
        return Pending(self.batcher.submit(*call), self._script_read_finisher(config, partition))

    def _script_read_finisher(
        self, config: TopicConfig, partition: int
    ) -> Callable[[list[Any]], ConsumeResult]:
        """How consume.lua's ``{hw, marks, entry...}`` becomes the result."""
        key = (config.name, partition)
        bits = self.sequence_bits

        def finish(reply: list[Any]) -> ConsumeResult:
            high_watermark = int(reply[0])
            records = _records(reply, 2, high_watermark, bits)
            self._learn_sizes(key, reply[1], records)
            return ConsumeResult(records, high_watermark)

        return finish

    def _read_to_known_end(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        count: int,
        known_end: int,
        max_records: int,
        max_bytes: int,
    ) -> Pending[ConsumeResult]:
        """A native read up to ``known_end``, the log end of this pod's last read (where its
        size marks stop), in one pipeline with hw. When the partition has grown past it
        meanwhile (hw beyond ``known_end``) and the page is not full, the rest is read on
        from ``known_end + 1`` with the marks just learnt, so that a page that is not full
        always holds every record up to the hw it reports (a reader moving on to hw + 1
        would skip them otherwise)."""
        end = codec.entry_id(known_end, self.sequence_bits)
        first = self._read_with_status(config, partition, offset, count, end)
        consumed: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()

        def read_on(reply: list[Any]) -> ConsumeResult | None:
            page = first.finish(reply)
            used = sum(len(value) for _, value in page.records[1:])
            if len(page.records) >= count or page.high_watermark <= known_end or used >= max_bytes:
                return page
            rest = self.start_consume(
                config, partition, known_end + 1, max_records - len(page.records), max_bytes - used
            )
            _then(
                rest.future,
                consumed,
                lambda more: _joined(page, rest.finish(more), max_bytes),
            )
            return None

        _then(first.future, consumed, read_on)
        return Pending(consumed, lambda result: result)

    def _hw_and_marks(self, config: TopicConfig, partition: int, start: str) -> tuple:
        return self._partition_call("consume", config, partition, [start, 0, 0, *self.read_flag])

    def _read_with_status(
        self, config: TopicConfig, partition: int, offset: int, count: int, end: str
    ) -> Pending[ConsumeResult]:
        """hw and the marks, and an XRANGE from ``offset`` to ``end``, in one pipeline."""
        key = (config.name, partition)
        bits = self.sequence_bits
        start = codec.entry_id(offset, bits)
        status = self.batcher.submit(*self._hw_and_marks(config, partition, start))
        # When both fail, the error answered is the XRANGE's: mark this one seen too.
        status.add_done_callback(_mark_retrieved)
        log = self.keys.partition(config.name, partition).log
        entries = self.batcher.submit("XRANGE", log, start, end, "COUNT", count)

        def finish(reply: list[Any]) -> ConsumeResult:
            hw_and_marks = status.result()
            high_watermark = int(hw_and_marks[0])
            records = _records(reply, 0, high_watermark, bits)
            self._learn_sizes(key, hw_and_marks[1], records)
            return ConsumeResult(records, high_watermark)

        return Pending(entries, finish)

    def _read_after_status(
        self, config: TopicConfig, partition: int, offset: int, max_records: int, max_bytes: int
    ) -> Pending[ConsumeResult]:
        """hw and the marks first; then the XRANGE they allow, or consume.lua."""
        key = (config.name, partition)
        bits = self.sequence_bits
        start = codec.entry_id(offset, bits)
        log = self.keys.partition(config.name, partition).log
        status = self.batcher.submit(*self._hw_and_marks(config, partition, start))
        consumed: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()

        def read(reply: list[Any]) -> None:
            marks = self._learn_sizes(key, reply[1])
            high_watermark = int(reply[0])
            if offset > high_watermark:  # nothing readable at or after offset yet
                consumed.set_result(ConsumeResult([], high_watermark))
                return
            count = marks.native_read(offset, max_records, max_bytes)
            if count:
                end = codec.entry_id(high_watermark, bits)
                entries = self.batcher.submit("XRANGE", log, start, end, "COUNT", count)

                def finish(entries: list[Any]) -> ConsumeResult:
                    records = _records(entries, 0, high_watermark, bits)
                    self._learn_sizes(key, reply[1], records)
                    return ConsumeResult(records, high_watermark)

                _then(entries, consumed, finish)
                return
            call = self._partition_call(
                "consume", config, partition, [start, max_records, max_bytes, *self.read_flag]
            )
            _then(
                self.batcher.submit(*call),
                consumed,
                self._script_read_finisher(config, partition),
            )

        _then(status, consumed, read)
        return Pending(consumed, lambda result: result)

    def _learn_sizes(
        self,
        key: tuple[str, int],
        marks: list[Any],
        records: list[tuple[int, bytes]] | None = None,
    ) -> SizeMarks:
        """Remember a partition's marks, and the smallest value of ``records`` when there
        are only a few (None: no read yet, the last one's stays)."""
        previous = self._size_marks.get(key)
        if records is None:
            few_smallest = previous.few_smallest if previous else 0
        elif len(records) < NATIVE_MIN_COUNT:
            few_smallest = min((len(value) for _, value in records), default=0)
        else:
            few_smallest = 0
        if previous is None and len(self._size_marks) >= MAX_REMEMBERED_MARKS:
            del self._size_marks[next(iter(self._size_marks))]
        learnt = self._size_marks[key] = SizeMarks.of(marks, few_smallest)
        return learnt

    async def consume(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int = 0,
    ) -> ConsumeResult:
        return await self.start_consume(config, partition, offset, max_records, max_bytes)

    async def set_role(self, config: TopicConfig, partition: int, role: str) -> int:
        """Store the partition's role for every pod; returns its high watermark."""
        call = self._partition_call("set_role", config, partition, [role])
        return int(await self._partition_reply(config, call))

    async def replica_fetch(
        self,
        config: TopicConfig,
        partition: int,
        replica_id: int,
        offset: int,
        max_copy: int = DEFAULT_MAX_COPY,
    ) -> ReplicaFetchResult:
        """Replica ``replica_id`` (1..RF-1, checked by the caller) has everything up to
        ``offset``: copy, record, recompute ISR and hw (see replica_fetch.lua)."""
        replica = self.keys.partition(config.name, partition).replica(replica_id)
        call = self._partition_call(
            "replica_fetch",
            config,
            partition,
            [replica_id, min(offset, LATEST_OFFSET), max_copy],
            (replica,),
        )
        reply = await self._partition_reply(config, call)
        return ReplicaFetchResult(
            acked_offset=int(reply[0]),
            high_watermark=int(reply[1]),
            isr=[int(r) for r in reply[2].split()],
            log_end=int(reply[3]),
            complete=bool(reply[4]),
        )

    async def partition_status(
        self, config: TopicConfig, partition: int, *, reader: bool = False
    ) -> PartitionStatus:
        """``reader``: hw as readers see it (at most durable_hw with --redis-wait-replicas)."""
        args = self.read_flag if reader else []
        call = self._partition_call("partition_status", config, partition, args)
        reply = await self._partition_reply(config, call)
        return PartitionStatus(
            high_watermark=int(reply[0]),
            isr_size=int(reply[1]),
            next_change_ms=int(reply[2]),
            log_end=int(reply[3]),
            isr=[int(r) for r in reply[4].split()],
            role=reply[5].decode() if isinstance(reply[5], bytes) else str(reply[5]),
        )
