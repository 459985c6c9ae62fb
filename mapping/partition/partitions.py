"""A topic's partitions on Redis: the append and read scripts, V1 produce and consume, partition
roles, replica fetch and partition status.

Every method builds script calls (mapping/partition/partition_scripts.py's builders), sends them
through a `RedisBatcher` (so calls from many requests share one pipeline) and decodes the
replies. The topics' settings come from `Topics`; what is derived from them here (produce
builders, size marks) is dropped with them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol, TypeVar

from mapping.connection.batcher import Pending, RedisBatcher, mark_retrieved
from mapping.core import codec
from mapping.core.errors import UNKNOWN_TOPIC, BrokerError
from mapping.core.keys import Keys
from mapping.core.records import entry_values
from mapping.core.size_marks import MAX_REMEMBERED_MARKS, NATIVE_MIN_COUNT, SizeMarks
from mapping.partition.formatted_records import (
    FormatValues,
    formatted_or_values,
    smallest_value,
    value_bytes_after_first,
)
from mapping.partition.partition_scripts import (
    DEFAULT_MAX_COPY,
    LATEST_OFFSET,
    ConsumeResult,
    PartitionHead,
    PartitionStatus,
    ProduceResult,
    ReplicaFetchResult,
    compaction_keys,
    partition_consume_call,
    partition_produce_call,
    partition_replica_fetch_call,
    partition_set_role_call,
    partition_status_call,
)
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics

T = TypeVar("T")


class DurabilityRounds(Protocol):
    """What the partitions ask of --redis-wait-replicas' rounds (``DurableRounds`` of the
    replication layer above, which sets ``Partitions.durable``)."""

    def note(self, config: TopicConfig, partition: int) -> None:
        """The partition may have records past its durable_hw: a round brings it up soon."""


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
    return ConsumeResult(records, rest.high_watermark, [*page.transactional, *rest.transactional])


class Partitions:
    def __init__(
        self,
        batcher: RedisBatcher,
        keys: Keys,
        topics: Topics,
        *,
        sequence_bits: int = codec.DEFAULT_SEQUENCE_BITS,
        replica_lag_max_ms: int = 10_000,
    ) -> None:
        """``topics``: where the settings come from, and who forgets a topic that a script
        refuses as deleted."""
        self.batcher = batcher
        self.keys = keys
        self.topics = topics
        self.sequence_bits = sequence_bits
        self.replica_lag_max_ms = replica_lag_max_ms
        # (topic, partition) -> the settings its produce builder was made from, and it
        self._produce_builders: dict[
            tuple[str, int], tuple[TopicConfig, Callable[[list[Any]], tuple]]
        ] = {}
        # (topic, partition) -> its size marks as the last CONSUME saw them.
        self._size_marks: dict[tuple[str, int], SizeMarks] = {}
        # (topic, partition) -> its scripts' head: twelve key names built once, not per call
        self._heads: dict[tuple[str, int], PartitionHead] = {}
        topics.cache.on_drop(self._drop_derived)
        # --redis-wait-replicas (mapping/replication/durable.py, set by Replication): readers see
        # hw only
        # up to what the Redis replicas have, and appends and reads ask for WAIT rounds.
        self.durable: DurabilityRounds | None = None
        # Redis has STREAMADAPTER.APPEND (mapping/connection/append_module.c; set by the pod at
        # start): the produce scripts write a call's records with it (read when a partition's
        # produce builder is made)
        self.append_module = False
        # ... and STREAMADAPTER.PRODUCE, PRODUCEMANY and V1PRODUCE: a Kafka batch that is
        # neither transactional nor on a compacted topic (small ones of a partition together),
        # and a V1 PRODUCE on a partition that is not compacted, are appended by them, not by
        # kafka/produce.lua and partition/produce.lua
        self.produce_module = False
        # ... and STREAMADAPTER.COPY: REPLICA_FETCH copies a follower's entries with it
        self.copy_module = False

    @property
    def durable_reads(self) -> bool:
        """Whether readers see hw only up to durable_hw (readable_hw)."""
        return self.durable is not None

    def _drop_derived(self, config: TopicConfig | None) -> None:
        """Forget what was derived from the topic's settings (None: every topic's)."""
        if config is None:
            self._produce_builders.clear()
            self._size_marks.clear()
            self._heads.clear()
            return
        for p in range(config.partitions):
            self._produce_builders.pop((config.name, p), None)
            self._size_marks.pop((config.name, p), None)
            self._heads.pop((config.name, p), None)

    def head(self, config: TopicConfig, partition: int) -> PartitionHead:
        """What the partition scripts on ``partition`` of ``config`` take first."""
        head = self._heads.get((config.name, partition))
        if head is None or head.replication_factor != config.replication_factor:
            head = self._heads[(config.name, partition)] = PartitionHead(
                self.keys.partition(config.name, partition),
                self.sequence_bits,
                config.replication_factor,
                self.replica_lag_max_ms,
            )
        return head

    async def script_reply(self, config: TopicConfig, call: tuple) -> Any:
        """A partition script's reply; when it refuses the partition as deleted, the topic
        is forgotten (the deletion notice not heard yet) before the error goes on."""
        try:
            return await self.batcher.call(*call)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC:
                self.topics.cache.forget_deleted(config)
            raise

    def start_produce(
        self, config: TopicConfig, partition: int, records: list[tuple[bytes, bytes]]
    ) -> Pending[ProduceResult]:
        """Queue an append; concurrent appends to one partition share one script call."""
        future, place = self._queue_append(config, partition, [p for r in records for p in r])
        count = len(records)
        return Pending(
            future,
            lambda reply: ProduceResult(
                list(range(int(reply[2]) + place, int(reply[2]) + place + count)),
                int(reply[0]),
                int(reply[1]),
            ),
        )

    def start_produce_one(
        self,
        config: TopicConfig,
        partition: int,
        key: bytes,
        value: bytes,
        answer: Callable[[int, int], T],
    ) -> Pending[T]:
        """Queue one record's append, its reply made into ``answer(offset, hw)`` straight
        away: V1 PRODUCE's path, a request a record, with no ProduceResult between."""
        future, place = self._queue_append(config, partition, [key, value])
        return Pending(future, lambda reply: answer(int(reply[2]) + place, int(reply[0])))

    def _queue_append(
        self, config: TopicConfig, partition: int, items: list[bytes]
    ) -> tuple[asyncio.Future, int]:
        """The append of ``items`` (key, value, key, value...) queued: its call's future and
        the place of its first record in the call's records."""
        group = (config.name, partition)
        known = self._produce_builders.get(group)
        if known is None or known[0] is not config:  # new, or a topic made anew
            known = self._produce_builders[group] = (
                config,
                partial(
                    partition_produce_call,
                    self.head(config, partition),
                    compaction=compaction_keys(config, self.keys.partition(config.name, partition)),
                    append_module=self.append_module,
                    produce_module=self.produce_module,
                ),
            )
        future, first = self.batcher.append(group, known[1], items)
        if self.durable is not None:
            self.durable.note(config, partition)
        # items are key, value pairs; the reply is hw, |ISR|, the call's first and last
        # offsets (consecutive: these records' are from the first's + first // 2)
        return future, first // 2

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
        format_values: FormatValues | None = None,
    ) -> Pending[ConsumeResult]:
        """Records at or after ``offset`` and at most hw. ``max_bytes``: the values of all
        but the first record stay within it (0: no byte limit), enforced where the data is
        read, so a page of large values never comes into the pod or Redis' output whole.
        ``format_values``: the XRANGE pages are read as their RESP bytes and a page it
        takes comes back as ``FormattedRecords`` (mapping/partition/formatted_records.py).

        Records are read with a native XRANGE (copying entries through Lua costs Redis far
        more) whose COUNT keeps within ``max_bytes`` by the partition's size marks (see
        ``SizeMarks``), unless the marks allow only a few records: then partition/consume.lua reads
        exactly up to the limit. Where the marks this pod remembers from its last CONSUME
        of the partition cover ``offset``, one pipeline does it; elsewhere (the log's tail,
        a partition not read yet) hw and the marks come first, then the read: one more
        round trip instead of a Lua copy of the tail."""
        if self.durable is not None:
            self.durable.note(config, partition)
        if max_bytes <= 0:
            return self._read_with_status(
                config, partition, offset, max_records, "+", format_values
            )
        known = self._size_marks.get((config.name, partition))
        if known is None or not known.covers(offset):
            return self._read_after_status(
                config, partition, offset, max_records, max_bytes, format_values
            )
        count = known.native_read(offset, max_records, max_bytes)
        if count:
            return self._read_to_known_end(
                config, partition, offset, count, known.log_end, max_records, max_bytes,
                format_values,
            )  # fmt: skip
        start = codec.entry_id(offset, self.sequence_bits)
        head = self.head(config, partition)
        call = partition_consume_call(head, start, max_records, max_bytes, self.durable_reads)
        return Pending(self.batcher.submit(*call), self._script_read_finisher(config, partition))

    def _script_read_finisher(
        self, config: TopicConfig, partition: int
    ) -> Callable[[list[Any]], ConsumeResult]:
        """How partition/consume.lua's ``{hw, marks, entry...}`` becomes the result."""
        key = (config.name, partition)
        bits = self.sequence_bits

        def finish(reply: list[Any]) -> ConsumeResult:
            high_watermark = int(reply[0])
            transactional: list[tuple[int, int]] = []
            records = entry_values(reply, 2, high_watermark, bits, transactional)
            self._learn_sizes(key, reply[1], records)
            return ConsumeResult(records, high_watermark, transactional)

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
        format_values: FormatValues | None,
    ) -> Pending[ConsumeResult]:
        """A native read up to ``known_end``, the log end of this pod's last read (where its
        size marks stop), in one pipeline with hw. When the partition has grown past it
        meanwhile (hw beyond ``known_end``) and the page is not full, the rest is read on
        from ``known_end + 1`` with the marks just learnt, so that a page that is not full
        always holds every record up to the hw it reports (a reader moving on to hw + 1
        would skip them otherwise)."""
        end = codec.entry_id(known_end, self.sequence_bits)
        first = self._read_with_status(config, partition, offset, count, end, format_values)
        consumed: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()

        def read_on(reply: list[Any]) -> ConsumeResult | None:
            page = first.finish(reply)
            used = value_bytes_after_first(page.records)
            if len(page.records) >= count or page.high_watermark <= known_end or used >= max_bytes:
                return page
            rest = self.start_consume(
                config, partition, known_end + 1, max_records - len(page.records), max_bytes - used
            )  # (parsed: _joined walks both pages)
            _then(
                rest.future,
                consumed,
                lambda more: _joined(page, rest.finish(more), max_bytes),
            )
            return None

        _then(first.future, consumed, read_on)
        return Pending(consumed, lambda result: result)

    def _hw_and_marks(self, config: TopicConfig, partition: int, start: str) -> tuple:
        return partition_consume_call(self.head(config, partition), start, 0, 0, self.durable_reads)

    def _read_with_status(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        count: int,
        end: str,
        format_values: FormatValues | None,
    ) -> Pending[ConsumeResult]:
        """hw and the marks, and an XRANGE from ``offset`` to ``end``, in one pipeline."""
        key = (config.name, partition)
        bits = self.sequence_bits
        start = codec.entry_id(offset, bits)
        status = self.batcher.submit(*self._hw_and_marks(config, partition, start))
        # When both fail, the error answered is the XRANGE's: mark this one seen too.
        status.add_done_callback(mark_retrieved)
        log = self.keys.partition(config.name, partition).log
        submit = self.batcher.submit if format_values is None else self.batcher.submit_raw
        entries = submit("XRANGE", log, start, end, "COUNT", count)

        def finish(reply: Any) -> ConsumeResult:
            hw_and_marks = status.result()
            high_watermark = int(hw_and_marks[0])
            transactional: list[tuple[int, int]] = []
            records = formatted_or_values(reply, format_values, high_watermark, bits, transactional)
            self._learn_sizes(key, hw_and_marks[1], records)
            return ConsumeResult(records, high_watermark, transactional)

        return Pending(entries, finish)

    def _read_after_status(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int,
        format_values: FormatValues | None,
    ) -> Pending[ConsumeResult]:
        """hw and the marks first; then the XRANGE they allow, or partition/consume.lua."""
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
                submit = self.batcher.submit if format_values is None else self.batcher.submit_raw
                entries = submit("XRANGE", log, start, end, "COUNT", count)

                def finish(entries: Any) -> ConsumeResult:
                    transactional: list[tuple[int, int]] = []
                    records = formatted_or_values(
                        entries, format_values, high_watermark, bits, transactional
                    )
                    self._learn_sizes(key, reply[1], records)
                    return ConsumeResult(records, high_watermark, transactional)

                _then(entries, consumed, finish)
                return
            head = self.head(config, partition)
            call = partition_consume_call(head, start, max_records, max_bytes, self.durable_reads)
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
        records: Sequence[tuple[int, bytes]] | None = None,
    ) -> SizeMarks:
        """Remember a partition's marks, and the smallest value of ``records`` when there
        are only a few (None: no read yet, the last one's stays)."""
        previous = self._size_marks.get(key)
        if records is None:
            few_smallest = previous.few_smallest if previous else 0
        elif len(records) < NATIVE_MIN_COUNT:
            few_smallest = smallest_value(records)
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
        call = partition_set_role_call(self.head(config, partition), role)
        return int(await self.script_reply(config, call))

    async def replica_fetch(
        self,
        config: TopicConfig,
        partition: int,
        replica_id: int,
        offset: int,
        max_copy: int = DEFAULT_MAX_COPY,
    ) -> ReplicaFetchResult:
        """Replica ``replica_id`` (1..RF-1, checked by the caller) has everything up to
        ``offset``: copy, record, recompute ISR and hw (see partition/replica_fetch.lua)."""
        head = self.head(config, partition)
        call = partition_replica_fetch_call(
            head, replica_id, min(offset, LATEST_OFFSET), max_copy, self.copy_module
        )
        reply = await self.script_reply(config, call)
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
        call = partition_status_call(self.head(config, partition), reader and self.durable_reads)
        reply = await self.script_reply(config, call)
        return PartitionStatus(
            high_watermark=int(reply[0]),
            isr_size=int(reply[1]),
            next_change_ms=int(reply[2]),
            log_end=int(reply[3]),
            isr=[int(r) for r in reply[4].split()],
            role=reply[5].decode() if isinstance(reply[5], bytes) else str(reply[5]),
            stable_end=int(reply[6]),
        )
