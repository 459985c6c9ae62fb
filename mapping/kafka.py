"""The Redis side of the Kafka front door: record fields, batch appends with idempotence,
fetch reads, offsets by time, producer ids.

A Kafka record is one stream entry, like a V1 record, with readable fields:

    key        the key (absent: null key)
    value      the value (absent: null value, a tombstone; V1 CONSUME shows it as empty)
    ts         the append time (ms, Redis' clock), as V1 writes it
    create_ts  the record's own timestamp (CreateTime) as the producer set it
    null       "key", "value" or "key value": which of them the producer sent as null
    h:<name>   one header, in order (a null header value: field "hn:<name>", empty value)

So ``redis-cli XRANGE`` shows everything, V1 and Spark read key/value/ts as before, and a
Kafka consumer reading a V1 record sees its key, its value, its append time, no headers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from mapping import codec
from mapping.batcher import Pending
from mapping.errors import Unavailable
from mapping.kafka_errors import OUT_OF_ORDER_SEQUENCE_NUMBER
from mapping.sequence_fence import SequenceFence
from mapping.store import Store, TopicConfig, _mark_retrieved

Header = tuple[str, bytes | None]


class StoredRecord(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header]


def record_items(
    key: bytes | None, value: bytes | None, timestamp: int | None, headers: list[Header]
) -> tuple[int, list[bytes | str | int]]:
    """(lead, items): one record's stream fields for the scripts that append them
    (kafka_produce.lua, the Spark sink's sink_append.lua), the one definition of the layout
    V1, Spark and Kafka consumers read: key and value first (``lead`` items, each left out
    when null), then the script's ``ts``, then ``create_ts`` (the record's own timestamp,
    when it has one), ``null`` ("key", "value" or "key value": which were null) and one
    ``h:<name>`` field per header in order (``hn:<name>``, empty, for a null header value);
    the script adds ``n`` last (_append.lua)."""
    items: list[bytes | str | int] = []
    if key is not None:
        items += ("key", key)
    if value is not None:
        items += ("value", value)
    lead = len(items)
    if timestamp is not None:
        items += ("create_ts", timestamp)
    if key is None or value is None:
        nulls = [name for name, v in (("key", key), ("value", value)) if v is None]
        items += ("null", " ".join(nulls))
    for name, header_value in headers:
        if header_value is None:
            items += (f"hn:{name}", b"")
        else:
            items += (f"h:{name}", header_value)
    return lead, items


# A record as a Produce request carries it: (key, value, create time, headers).
ProducedRecord = tuple[bytes | None, bytes | None, int, list[Header]]


def append_args(records: list[ProducedRecord]) -> list[bytes | str | int]:
    """The per-record arguments of kafka_produce.lua: ``len(items), lead, *items`` of
    ``record_items``, or for the common records (no headers, a key and a value or a null
    key) a short form the script expands to the same fields (-1, value, create time or
    -2, key, value, create time): Produce's hot loop, and 3-4 arguments a record instead of
    8 for hiredis to pack and Redis to parse."""
    args: list[bytes | str | int] = []
    for key, value, timestamp, headers in records:
        if headers or value is None:
            lead, items = record_items(key, value, timestamp, headers)
            args += (len(items), lead, *items)
        elif key is None:
            args += (-1, value, timestamp)
        else:
            args += (-2, key, value, timestamp)
    return args


def entry_record(entry_id: bytes, fields: list[bytes], bits: int) -> StoredRecord:
    """A raw XRANGE entry as a Kafka record (a V1 record: its append time, no headers)."""
    # the common layouts at fixed places (a Kafka record with key and value and no headers,
    # a V1 record); anything else field by field
    size = len(fields)
    if size >= 2 and fields[size - 2] == b"n":  # every append numbers its entry last
        size -= 2
    if size == 8 and fields[0] == b"key" and fields[2] == b"value" and fields[6] == b"create_ts":
        ms, _, seq = entry_id.partition(b"-")
        return StoredRecord((int(ms) << bits) | int(seq), int(fields[7]), fields[1], fields[3], [])
    if size == 6 and fields[0] == b"key" and fields[2] == b"value" and fields[4] == b"ts":
        ms, _, seq = entry_id.partition(b"-")
        return StoredRecord((int(ms) << bits) | int(seq), int(fields[5]), fields[1], fields[3], [])
    if size == 8 and fields[4] == b"create_ts" and fields[6] == b"null":
        # a null key (value first) or a tombstone (key first), no headers
        ms, _, seq = entry_id.partition(b"-")
        offset = (int(ms) << bits) | int(seq)
        if fields[0] == b"value":
            return StoredRecord(offset, int(fields[5]), None, fields[1], [])
        if fields[0] == b"key":
            return StoredRecord(offset, int(fields[5]), fields[1], None, [])
    key = value = None
    append_ts = create_ts = None
    headers: list[Header] = []
    for i in range(0, len(fields), 2):
        name = fields[i]
        if name == b"key":
            key = fields[i + 1]
        elif name == b"value":
            value = fields[i + 1]
        elif name == b"ts":
            append_ts = fields[i + 1]
        elif name == b"create_ts":
            create_ts = fields[i + 1]
        elif name.startswith(b"h:"):
            headers.append((name[2:].decode("utf-8", "replace"), fields[i + 1]))
        elif name.startswith(b"hn:"):
            headers.append((name[3:].decode("utf-8", "replace"), None))
    ms, _, seq = entry_id.partition(b"-")
    offset = (int(ms) << bits) | int(seq)
    stamp = create_ts if create_ts is not None else append_ts
    timestamp = int(stamp) if stamp is not None else offset >> bits
    return StoredRecord(offset, timestamp, key, value, headers)


# Bytes a record costs in a RecordBatch beyond its key and value (roughly): what a fetch's
# byte budget counts per record.
RECORD_OVERHEAD = 32
MAX_OFFSET_DELTA = (1 << 31) - 1  # the most a RecordBatch's offset delta holds
_NO_HEADERS: list[Header] = []  # shared, never changed: the common records have none


class Walked(NamedTuple):
    end: int  # index of the first entry not taken
    used: int  # bytes taken (RECORD_OVERHEAD included)
    base: int  # the first taken entry's offset (-1: none taken)
    done: bool  # stopped at the high watermark or the budget (False: a new batch must start)


def append_entries(
    entries: list[Any],
    start: int,
    bits: int,
    high_watermark: int,
    budget: int,
    take_first: bool,
    append: Callable[[int, int, bytes | None, bytes | None, list[Header]], Any],
) -> Walked:
    """Feeds ``append(offset delta, timestamp, key, value, headers)`` the raw XRANGE entries
    from ``start`` on, in order, while their offsets are at or below ``high_watermark`` (V1's)
    and their sizes fit in ``budget`` (the first one whatever its size when ``take_first``),
    without a record object each: the fetch's hot loop. The deltas are from the first taken
    entry's offset and stay within one RecordBatch's range (past it: ``done`` False)."""
    used = 0
    base = -1
    limit = 0
    last_ms = b""
    ms_delta = 0
    last_stamp = b""
    timestamp = 0
    for i in range(start, len(entries)):
        entry_id, fields = entries[i]
        ms, _, seq = entry_id.partition(b"-")
        if ms != last_ms:  # entries appended in the same millisecond share it: parse once
            ms_value = int(ms) << bits
            if base < 0:
                base = ms_value + int(seq)
                limit = min(high_watermark - base, MAX_OFFSET_DELTA)
            last_ms = ms
            ms_delta = ms_value - base
        delta = ms_delta + int(seq)
        if delta > limit:
            return Walked(i, used, base, delta + base > high_watermark)
        # the common layouts at fixed places (see entry_record), anything else field by field
        size = len(fields)
        if size >= 2 and fields[size - 2] == b"n":
            size -= 2
        headers = _NO_HEADERS
        first = fields[0] if size else b""
        one_null = size == 8 and fields[4] == b"create_ts" and fields[6] == b"null"
        if one_null and first == b"value":
            key, value, stamp = None, fields[1], fields[5]  # a null key
            length = len(value)
        elif one_null and first == b"key":
            key, value, stamp = fields[1], None, fields[5]  # a tombstone
            length = len(key)
        elif size == 8 and first == b"key" and fields[2] == b"value" and fields[6] == b"create_ts":
            stamp = fields[7]
            key, value = fields[1], fields[3]
            length = len(key) + len(value)
        elif size == 6 and first == b"key" and fields[2] == b"value" and fields[4] == b"ts":
            stamp = fields[5]
            key, value = fields[1], fields[3]
            length = len(key) + len(value)
        else:
            record = entry_record(entry_id, fields, bits)
            key, value, headers = record.key, record.value, record.headers
            stamp = None
            timestamp = record.timestamp
            last_stamp = b""
            length = len(key or b"") + len(value or b"")
        if stamp is not None and stamp != last_stamp:
            # a producer's batch shares its create time: parsed once
            last_stamp = stamp
            timestamp = int(stamp)
        length += RECORD_OVERHEAD
        if used + length > budget and (i > start or not take_first):
            return Walked(i, used, base, True)
        used += length
        append(delta, timestamp, key, value, headers)
    return Walked(len(entries), used, base, False)


@dataclass(frozen=True, slots=True)
class AppendResult:
    status: int  # 0 appended, 1 a retried batch (original offsets), 45/47 Kafka errors
    high_watermark: int
    isr_size: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class FetchRead:
    high_watermark: int  # V1's (inclusive; -1: empty)
    log_start: int  # offsets below it were removed (-1: nothing ever was)
    entries: list[Any]  # raw XRANGE entries at or after the position (may pass the hw)
    page_full: bool  # the XRANGE returned its COUNT: more may follow


# Kafka's producer.id.expiration.ms
PRODUCER_ID_EXPIRATION_MS = 86_400_000


def produce_script_args(
    records: list[ProducedRecord],
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
) -> list[Any]:
    """kafka_produce.lua's arguments after the partition ones, for one RecordBatch."""
    head = [producer_id, producer_epoch, base_sequence, len(records), producer_id_expiration_ms]
    return head + append_args(records)


class KafkaStore:
    def __init__(
        self, store: Store, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.store = store
        self.keys = store.keys
        self.bits = store.sequence_bits
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fence = SequenceFence()  # see mapping/sequence_fence.py

    def append_batch(
        self,
        config: TopicConfig,
        partition: int,
        records: list[ProducedRecord],
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
    ) -> Pending[AppendResult]:
        """One script call appending one RecordBatch."""
        args = produce_script_args(
            records, producer_id, producer_epoch, base_sequence, self.producer_id_expiration_ms
        )
        pk = self.keys.partition(config.name, partition)
        call = self.store.partition_call(
            "kafka_produce", config, partition, args, (pk.producers, pk.producer_times)
        )
        future = self.store.batcher.submit(*call)
        # a caller that goes away (its connection closed) leaves the failure unread
        future.add_done_callback(_mark_retrieved)
        if producer_id < 0:
            return Pending(future, lambda reply: AppendResult(*(int(v) for v in reply[:5])))
        # an idempotent producer's batches keep their order across a failed one
        key = (config.name, partition, producer_id, producer_epoch)
        future.add_done_callback(partial(self._settled, key, base_sequence))
        return Pending(future, partial(self._appended, key, base_sequence))

    def _settled(self, key: tuple, base_sequence: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        failure = future.exception()
        if isinstance(failure, Unavailable):  # not written, or perhaps not (OutcomeUnknown)
            self.fence.failed(key, base_sequence)
        elif failure is None and int(future.result()[0]) in (0, 1):  # stored, or found stored
            self.fence.written(key)

    def _appended(self, key: tuple, base_sequence: int, reply: Any) -> AppendResult:
        result = AppendResult(*(int(v) for v in reply[:5]))
        if result.status == OUT_OF_ORDER_SEQUENCE_NUMBER and self.fence.behind_failure(
            key, base_sequence
        ):
            # The gap is an earlier batch this pod failed: "not written", send that first.
            raise Unavailable("redis unavailable: an earlier batch of this producer failed")
        return result

    def start_read(
        self, config: TopicConfig, partition: int, offset: int, count: int
    ) -> Pending[FetchRead]:
        """The hw (ISR refreshed), the log start and up to ``count`` entries at or after
        ``offset``: one pipeline, native XRANGE (no copying through Lua)."""
        store = self.store
        if store.durable is not None:
            store.durable.note(config, partition)
        pk = self.keys.partition(config.name, partition)
        status = store.batcher.submit(
            *store._partition_call("partition_status", config, partition, self.store.read_flag)
        )
        status.add_done_callback(_mark_retrieved)
        log_start = store.batcher.submit("HGET", pk.state, "log_start")
        log_start.add_done_callback(_mark_retrieved)
        start = codec.entry_id(offset, self.bits)
        entries = store.batcher.submit("XRANGE", pk.log, start, "+", "COUNT", count)

        def finish(reply: list[Any]) -> FetchRead:
            start_value = log_start.result()
            return FetchRead(
                int(status.result()[0]),
                int(start_value) if start_value is not None else -1,
                reply,
                len(reply) >= count,
            )

        return Pending(entries, finish)

    async def first_offset(self, config: TopicConfig, partition: int) -> tuple[int, int]:
        """(Kafka's log start offset, Kafka's high watermark = V1 hw + 1)."""
        pk = self.keys.partition(config.name, partition)
        status, first, log_start = await _gather(
            self.store.batcher.submit(
                *self.store.partition_call(
                    "partition_status", config, partition, self.store.read_flag
                )
            ),
            self.store.batcher.submit("XRANGE", pk.log, "-", "+", "COUNT", 1),
            self.store.batcher.submit("HGET", pk.state, "log_start"),
        )
        end = int(status[0]) + 1
        if first:
            start = codec.entry_offset(first[0][0], self.bits)
        elif log_start is not None:
            start = int(log_start)
        else:
            start = end
        return min(start, end), end

    async def at_or_after_time(
        self, config: TopicConfig, partition: int, timestamp_ms: int
    ) -> StoredRecord | None:
        """The first committed record appended at or after ``timestamp_ms``."""
        pk = self.keys.partition(config.name, partition)
        status, found = await _gather(
            self.store.batcher.submit(
                *self.store.partition_call(
                    "partition_status", config, partition, self.store.read_flag
                )
            ),
            self.store.batcher.submit(
                "XRANGE", pk.log, f"{max(0, timestamp_ms)}-0", "+", "COUNT", 1
            ),
        )
        if not found:
            return None
        record = entry_record(found[0][0], found[0][1], self.bits)
        if record.offset > int(status[0]):
            return None
        return record._replace(timestamp=record.offset >> self.bits)

    async def last_committed(self, config: TopicConfig, partition: int) -> StoredRecord | None:
        """The record at the high watermark (the newest committed one)."""
        status = await self.store.partition_status(config, partition, reader=True)
        if status.high_watermark < 0:
            return None
        pk = self.keys.partition(config.name, partition)
        hw_id = codec.entry_id(status.high_watermark, self.bits)
        found = await self.store.batcher.call("XREVRANGE", pk.log, hw_id, "-", "COUNT", 1)
        if not found:
            return None
        return entry_record(found[0][0], found[0][1], self.bits)

    async def delete_records(self, config: TopicConfig, partition: int, cut: int) -> int | None:
        """Remove the records below ``cut`` (-1: below the high watermark); the new log start,
        or None when ``cut`` is past Kafka's high watermark."""
        pk = self.keys.partition(config.name, partition)
        replicas = tuple(pk.replica(r) for r in range(1, config.replication_factor))
        call = self.store.partition_call("delete_records", config, partition, [cut], replicas)
        # (refused as deleted: this pod forgets the topic, as after any partition script)
        status, low = await self.store._partition_reply(config, call)
        return None if int(status) else int(low)

    async def new_producer_id(self) -> int:
        return int(await self.store.batcher.call("INCR", self.keys.kafka_producer_ids))


async def _gather(*futures: Any) -> list[Any]:
    return list(await asyncio.gather(*futures))
