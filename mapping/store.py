"""The Redis side of the V1 commands: topics, produce, consume, partition roles, replica fetch.

Every method builds script calls from `keys`, `codec` and `scripts`, sends them through a
`RedisBatcher` (so calls from many requests share one pipeline) and decodes the replies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mapping import codec, scripts
from mapping.batcher import Pending, RedisBatcher
from mapping.cluster import connect_async
from mapping.errors import BadRequest, ConfigurationError
from mapping.keys import Keys

# Offsets past every log end (exact as a Lua double): "copy everything there is".
LATEST_OFFSET = (1 << 53) - 1
# Entries one REPLICA_FETCH call copies at most: bounds the time one script holds Redis.
DEFAULT_MAX_COPY = 1000


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int


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


def _records_upto(
    entries: list[Any], high_watermark: int, bits: int, max_bytes: int = 0
) -> list[tuple[int, bytes]]:
    """(offset, value) of XRANGE entries up to the high watermark and, past the first,
    within ``max_bytes`` of values (0: no limit). Entries are raw ``[id, [field, value,
    ...]]`` (see ``connect``) or redis-py's ``(id, {field: value})``."""
    records: list[tuple[int, bytes]] = []
    total = 0
    for entry_id, fields in entries:
        offset = codec.entry_offset(entry_id, bits)
        if offset > high_watermark:
            break
        if isinstance(fields, dict):
            value = fields.get(b"value", b"")
        elif len(fields) > 3 and fields[2] == b"value":  # as produce.lua writes them
            value = fields[3]
        else:
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            value = named.get(b"value", b"")
        total += len(value)
        if max_bytes and total > max_bytes and records:
            break
        records.append((offset, value))
    return records


def connect(url: str, timeout_s: float = 5.0, **options: object) -> Redis:
    """A client for the adapter: bytes replies, bounded waits, and no automatic retries
    (a retried pipeline could append a produce twice). A ``redis+cluster://`` URL gives a
    cluster client (see mapping.cluster). ``options``: credentials and TLS files beyond
    what the URL carries (``rediss://USER:PASSWORD@HOST:PORT/DB``)."""
    client = connect_async(url, timeout_s, **options)
    # CONSUME pages stay hiredis' lists: redis-py's dict per entry costs more than the rest
    # of a CONSUME (``_records_upto`` reads both shapes).
    client.set_response_callback("XRANGE", _raw)
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
    ) -> None:
        self.batcher = batcher
        self.keys = keys
        self.sequence_bits = sequence_bits
        self.replica_lag_max_ms = replica_lag_max_ms
        self.topic_defaults = topic_defaults
        # Partition counts never change, so a topic's settings are cached for the pod's life.
        self._topics: dict[str, asyncio.Future[TopicConfig]] = {}
        self._known: dict[str, TopicConfig] = {}  # the resolved ones: no await needed
        self._produce_builders: dict[tuple[str, int], Callable[[list[Any]], tuple]] = {}

    async def topic(self, name: str) -> TopicConfig:
        """The topic's settings, creating it with the defaults on first use."""
        known = self._known.get(name)
        if known is not None:
            return known
        future = self._topics.get(name)
        if future is None:
            future = asyncio.ensure_future(self._ensure_topic(name))
            self._topics[name] = future
            future.add_done_callback(lambda f: self._forget_failed(name, f))
        return await asyncio.shield(future)

    def _forget_failed(self, name: str, future: asyncio.Future[TopicConfig]) -> None:
        if future.cancelled() or future.exception() is not None:
            self._topics.pop(name, None)
        else:
            self._known[name] = future.result()

    async def _ensure_topic(self, name: str) -> TopicConfig:
        d = self.topic_defaults
        # min ISR above RF could never be met (acks=all would always time out): cap it.
        min_isr = min(d.min_insync_replicas, d.replication_factor)
        reply = await self.batcher.call(
            *scripts.load("ensure_topic").command(
                [self.keys.topic(name)], [d.partitions, d.replication_factor, min_isr]
            )
        )
        if reply[3]:
            await self._announce_topic(name)
        return TopicConfig(name, int(reply[0]), int(reply[1]), int(reply[2]))

    async def _announce_topic(self, name: str) -> None:
        await asyncio.gather(
            self.batcher.call("SADD", self.keys.topics, name),
            self.batcher.call("PUBLISH", self.keys.topics_channel, name),
        )

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, min_insync_replicas: int
    ) -> tuple[TopicConfig, bool]:
        """Create a topic with these settings; returns (its settings, created). An existing
        topic keeps its own settings (compare them to see whether they differ)."""
        reply = await self.batcher.call(
            *scripts.load("ensure_topic").command(
                [self.keys.topic(name)], [partitions, replication_factor, min_insync_replicas]
            )
        )
        if reply[3]:
            await self._announce_topic(name)
        return TopicConfig(name, int(reply[0]), int(reply[1]), int(reply[2])), bool(reply[3])

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

    def known_topic(self, name: str) -> TopicConfig | None:
        """The topic's settings if this pod has them already (no Redis call needed)."""
        return self._known.get(name)

    def start_produce(
        self, config: TopicConfig, partition: int, records: list[tuple[bytes, bytes]]
    ) -> Pending[ProduceResult]:
        """Queue an append; concurrent appends to one partition share one script call."""
        group = (config.name, partition)
        build = self._produce_builders.get(group)
        if build is None:
            build = self._produce_builders[group] = partial(
                self._partition_call, "produce", config, partition
            )
        future, first = self.batcher.append(group, build, [p for r in records for p in r])
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
        """Records at or after ``offset`` and at most hw: the partition's hw (ISR refreshed by
        a script) and a plain XRANGE go in one pipeline, and what lies above hw is dropped
        here. A native XRANGE costs Redis far less than copying entries through Lua.
        ``max_bytes``: stop once the values reach this many bytes (the first record always
        comes, so a consumer makes progress); 0: no byte limit."""
        status = self.batcher.submit(
            *self._partition_call("partition_status", config, partition, [])
        )
        # When both fail, the error answered is the XRANGE's: mark this one seen too.
        status.add_done_callback(_mark_retrieved)
        log = self.keys.partition(config.name, partition).log
        start = codec.entry_id(offset, self.sequence_bits)
        entries = self.batcher.submit("XRANGE", log, start, "+", "COUNT", max_records)
        bits = self.sequence_bits

        def finish(reply: list[Any]) -> ConsumeResult:
            high_watermark = int(status.result()[0])
            return ConsumeResult(
                _records_upto(reply, high_watermark, bits, max_bytes), high_watermark
            )

        return Pending(entries, finish)

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
        return int(await self.batcher.call(*call))

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
        reply = await self.batcher.call(*call)
        return ReplicaFetchResult(
            acked_offset=int(reply[0]),
            high_watermark=int(reply[1]),
            isr=[int(r) for r in reply[2].split()],
            log_end=int(reply[3]),
            complete=bool(reply[4]),
        )

    async def partition_status(self, config: TopicConfig, partition: int) -> PartitionStatus:
        reply = await self.batcher.call(
            *self._partition_call("partition_status", config, partition, [])
        )
        return PartitionStatus(
            high_watermark=int(reply[0]),
            isr_size=int(reply[1]),
            next_change_ms=int(reply[2]),
            log_end=int(reply[3]),
            isr=[int(r) for r in reply[4].split()],
            role=reply[5].decode() if isinstance(reply[5], bytes) else str(reply[5]),
        )
