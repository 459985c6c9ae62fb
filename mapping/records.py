"""A record's stream entry: the one definition of its fields, how an append spells them and
how a read takes them apart (aiokafka's ``record/`` package is the model).

Every record, V1's, Kafka's or the Spark sink's, is one stream entry with readable fields:

    key        the key (absent: null key)
    value      the value (absent: null value, a tombstone; V1 CONSUME shows it as empty)
    ts         the append time (ms, Redis' clock), as V1 writes it
    create_ts  the record's own timestamp (CreateTime) as the producer set it
    null       "key", "value" or "key value": which of them the producer sent as null
    h:<name>   one header, in order (a null header value: field "hn:<name>", empty value)
    pid, pe    a transactional record's producer id and epoch (decimal text), before n
    n          the entry's number (records ever appended to the log), always last

A transaction's commit or abort marker (Kafka's control record) is an entry of its own at an
offset like any record: ``ctl`` ("commit" or "abort"), ``pid``, ``pe``, ``ts``, ``n`` (no key,
no value). Kafka Fetch renders it as a control batch; V1 CONSUME and Spark skip it.

So ``redis-cli XRANGE`` shows everything, V1 and Spark read key/value/ts as before, and a
Kafka consumer reading a V1 record sees its key, its value, its append time, no headers.

The Lua scripts that write or read entries (lib/append.lua, partition/produce.lua,
kafka/produce.lua, partition/consume.lua, partition/lag.lua) spell the same names;
tests/mapping/test_record_layout.py checks that they agree with the constants here.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from typing import Any, NamedTuple

from mapping import codec

# The field names, as the append scripts take them.
KEY = "key"
VALUE = "value"
APPEND_TIME = "ts"
CREATE_TIME = "create_ts"
NULLS = "null"
NUMBER = "n"
HEADER_PREFIX = "h:"
NULL_HEADER_PREFIX = "hn:"
PRODUCER_ID = "pid"
PRODUCER_EPOCH = "pe"
CONTROL = "ctl"
FIELD_NAMES = frozenset(
    {KEY, VALUE, APPEND_TIME, CREATE_TIME, NULLS, NUMBER, PRODUCER_ID, PRODUCER_EPOCH, CONTROL}
)
# A control entry's ``ctl`` values (Kafka's ControlRecordType ABORT 0, COMMIT 1).
CONTROL_COMMIT = "commit"
CONTROL_ABORT = "abort"

# The same names as XRANGE replies carry them: what the readers compare.
KEY_BYTES = KEY.encode()
VALUE_BYTES = VALUE.encode()
APPEND_TIME_BYTES = APPEND_TIME.encode()
CREATE_TIME_BYTES = CREATE_TIME.encode()
NULLS_BYTES = NULLS.encode()
NUMBER_BYTES = NUMBER.encode()
HEADER_PREFIX_BYTES = HEADER_PREFIX.encode()
NULL_HEADER_PREFIX_BYTES = NULL_HEADER_PREFIX.encode()
PRODUCER_ID_BYTES = PRODUCER_ID.encode()
PRODUCER_EPOCH_BYTES = PRODUCER_EPOCH.encode()
CONTROL_BYTES = CONTROL.encode()
CONTROL_COMMIT_BYTES = CONTROL_COMMIT.encode()
CONTROL_BYTES_ABORT = CONTROL_ABORT.encode()

# kafka/produce.lua's short forms of the common records (see ``append_args``): the first
# argument of a record given as (-1, value, create time) or (-2, key, value, create time).
SHORT_NULL_KEY = -1
SHORT_KEY_VALUE = -2

Header = tuple[str, bytes | None]
# A record as a Produce request carries it: (key, value, create time, headers).
ProducedRecord = tuple[bytes | None, bytes | None, int, list[Header]]


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
    (kafka/produce.lua, the Spark sink's spark/sink_append.lua), the one definition of the layout
    V1, Spark and Kafka consumers read: key and value first (``lead`` items, each left out
    when null), then the script's ``ts``, then ``create_ts`` (the record's own timestamp,
    when it has one), ``null`` ("key", "value" or "key value": which were null) and one
    ``h:<name>`` field per header in order (``hn:<name>``, empty, for a null header value);
    the script adds ``n`` last (lib/append.lua)."""
    items: list[bytes | str | int] = []
    if key is not None:
        items += (KEY, key)
    if value is not None:
        items += (VALUE, value)
    lead = len(items)
    if timestamp is not None:
        items += (CREATE_TIME, timestamp)
    if key is None or value is None:
        nulls = [name for name, v in ((KEY, key), (VALUE, value)) if v is None]
        items += (NULLS, " ".join(nulls))
    for name, header_value in headers:
        if header_value is None:
            items += (f"{NULL_HEADER_PREFIX}{name}", b"")
        else:
            items += (f"{HEADER_PREFIX}{name}", header_value)
    return lead, items


def append_args(
    records: list[ProducedRecord], create_time: bool = True, short: bool = True
) -> list[bytes | str | int]:
    """The per-record arguments of kafka/produce.lua: ``len(items), lead, *items`` of
    ``record_items``, or for the common records (no headers, a key and a value or a null
    key) a short form the script expands to the same fields (-1, value, create time or
    -2, key, value, create time): Produce's hot loop, and 3-4 arguments a record instead of
    8 for hiredis to pack and Redis to parse. ``create_time`` False: the records keep no
    ``create_ts`` (a LogAppendTime topic: their timestamp is the append time). ``short``
    False: the long form only (a transactional batch: the script adds fields to each)."""
    args: list[bytes | str | int] = []
    for key, value, timestamp, headers in records:
        if not create_time:
            lead, items = record_items(key, value, None, headers)
            args += (len(items), lead, *items)
        elif headers or value is None or not short:
            lead, items = record_items(key, value, timestamp, headers)
            args += (len(items), lead, *items)
        elif key is None:
            args += (SHORT_NULL_KEY, value, timestamp)
        else:
            args += (SHORT_KEY_VALUE, key, value, timestamp)
    return args


def entry_record(entry_id: bytes, fields: list[bytes], bits: int) -> StoredRecord:
    """A raw XRANGE entry as a Kafka record (a V1 record: its append time, no headers)."""
    # the common layouts at fixed places (a Kafka record with key and value and no headers,
    # a V1 record); anything else field by field
    size = len(fields)
    if size >= 2 and fields[size - 2] == NUMBER_BYTES:  # every append numbers its entry last
        size -= 2
    if (
        size == 8
        and fields[0] == KEY_BYTES
        and fields[2] == VALUE_BYTES
        and fields[6] == CREATE_TIME_BYTES
    ):
        ms, _, seq = entry_id.partition(b"-")
        return StoredRecord((int(ms) << bits) | int(seq), int(fields[7]), fields[1], fields[3], [])
    if (
        size == 6
        and fields[0] == KEY_BYTES
        and fields[2] == VALUE_BYTES
        and fields[4] == APPEND_TIME_BYTES
    ):
        ms, _, seq = entry_id.partition(b"-")
        return StoredRecord((int(ms) << bits) | int(seq), int(fields[5]), fields[1], fields[3], [])
    if size == 8 and fields[4] == CREATE_TIME_BYTES and fields[6] == NULLS_BYTES:
        # a null key (value first) or a tombstone (key first), no headers
        ms, _, seq = entry_id.partition(b"-")
        offset = (int(ms) << bits) | int(seq)
        if fields[0] == VALUE_BYTES:
            return StoredRecord(offset, int(fields[5]), None, fields[1], [])
        if fields[0] == KEY_BYTES:
            return StoredRecord(offset, int(fields[5]), fields[1], None, [])
    key = value = None
    append_ts = create_ts = None
    headers: list[Header] = []
    for i in range(0, len(fields), 2):
        name = fields[i]
        if name == KEY_BYTES:
            key = fields[i + 1]
        elif name == VALUE_BYTES:
            value = fields[i + 1]
        elif name == APPEND_TIME_BYTES:
            append_ts = fields[i + 1]
        elif name == CREATE_TIME_BYTES:
            create_ts = fields[i + 1]
        elif name.startswith(HEADER_PREFIX_BYTES):
            headers.append(
                (name[len(HEADER_PREFIX_BYTES) :].decode("utf-8", "replace"), fields[i + 1])
            )
        elif name.startswith(NULL_HEADER_PREFIX_BYTES):
            headers.append((name[len(NULL_HEADER_PREFIX_BYTES) :].decode("utf-8", "replace"), None))
    ms, _, seq = entry_id.partition(b"-")
    offset = (int(ms) << bits) | int(seq)
    stamp = create_ts if create_ts is not None else append_ts
    timestamp = int(stamp) if stamp is not None else offset >> bits
    return StoredRecord(offset, timestamp, key, value, headers)


def entry_values(
    reply: list[Any],
    first: int,
    high_watermark: int,
    bits: int,
    transactional: list[tuple[int, int]] | None = None,
) -> list[tuple[int, bytes]]:
    """(offset, value) of the XRANGE entries ``reply[first:]`` up to the high watermark: what
    V1 CONSUME returns (a null value reads as empty). Entries are raw ``[id, [field, value,
    ...]]`` (see mapping.client.connect) or redis-py's ``(id, {field: value})``.
    Transaction markers are left out; they and the transactional records are noted in
    ``transactional`` as (offset, producer id; -1 for a marker) for the caller to filter
    aborted ones (mapping/partition_txns.py)."""
    values: list[tuple[int, bytes]] = []
    for entry_id, fields in islice(reply, first, None):
        offset = codec.entry_offset(entry_id, bits)
        if offset > high_watermark:
            break
        if isinstance(fields, dict):  # redis-py's shape, where its callback applies
            if CONTROL_BYTES in fields:
                if transactional is not None:
                    transactional.append((offset, -1))
                continue
            producer = fields.get(PRODUCER_ID_BYTES)
            if producer is not None and transactional is not None:
                transactional.append((offset, int(producer)))
            value = fields.get(VALUE_BYTES, b"")
        else:
            size = len(fields)
            if size >= 6 and fields[size - 6] == PRODUCER_ID_BYTES:  # pid P pe E n N
                if transactional is not None:
                    transactional.append((offset, int(fields[size - 5])))
            elif fields and fields[0] == CONTROL_BYTES:
                if transactional is not None:
                    transactional.append((offset, -1))
                continue
            if size > 3 and fields[2] == VALUE_BYTES:  # as partition/produce.lua writes them
                value = fields[3]
            else:
                named = dict(zip(fields[::2], fields[1::2], strict=False))
                value = named.get(VALUE_BYTES, b"")
        values.append((offset, value))
    return values


# A RecordBatch (magic 2) without records: its header's bytes.
BATCH_HEADER_BYTES = 61


def _varint_bytes(number: int) -> int:
    """Bytes of ``number`` as a zigzag varint (Kafka's ByteUtils.sizeOfVarint/Varlong)."""
    encoded = (number << 1) ^ (number >> 63)
    size = 1
    while encoded >= 0x80:
        encoded >>= 7
        size += 1
    return size


def _field_bytes(data: bytes | None) -> int:
    return 1 if data is None else _varint_bytes(len(data)) + len(data)


def record_batch_bytes(key: bytes | None, value: bytes | None, headers: list[Header]) -> int:
    """The size of a RecordBatch holding only this record (offset and timestamp deltas 0):
    what Kafka measures against a topic's max.message.bytes, for the writers that send
    records one by one (V1 PRODUCE, the Spark sink)."""
    body = 1 + 1 + 1 + _field_bytes(key) + _field_bytes(value) + _varint_bytes(len(headers))
    for name, header_value in headers:
        body += _field_bytes(name.encode()) + _field_bytes(header_value)
    return BATCH_HEADER_BYTES + _varint_bytes(body) + body


# Bytes a record costs in a RecordBatch beyond its key and value (roughly): what a fetch's
# byte budget counts per record.
RECORD_OVERHEAD = 32
MAX_OFFSET_DELTA = (1 << 31) - 1  # the most a RecordBatch's offset delta holds
_NO_HEADERS: list[Header] = []  # shared, never changed: the common records have none


def _append_stamp(fields: list[bytes]) -> bytes | None:
    """An entry's append time (its ``ts`` field: after the key and the value, so among the
    first three fields), None for an entry without one."""
    for at in (0, 2, 4):
        if at + 1 < len(fields) and fields[at] == APPEND_TIME_BYTES:
            return fields[at + 1]
    return None


class Walked(NamedTuple):
    end: int  # index of the first entry not taken
    used: int  # bytes taken (RECORD_OVERHEAD included)
    base: int  # the first taken entry's offset (-1: none taken)
    done: bool  # stopped at the high watermark or the budget (False: a new batch must start)
    producer_id: int = -1  # a transactional batch's producer (-1: plain records)
    producer_epoch: int = -1
    control: int = -1  # a marker's batch: 0 abort, 1 commit (Kafka's ControlRecordType)


# A control record's key and value (Kafka's ControlRecordType and EndTransactionMarker, both
# version 0): key = version, type (0 abort, 1 commit); value = version, coordinator epoch.
_CONTROL_KEY = {CONTROL_BYTES_ABORT: b"\x00\x00\x00\x00", CONTROL_COMMIT_BYTES: b"\x00\x00\x00\x01"}
CONTROL_VALUE = b"\x00\x00\x00\x00\x00\x00"


def is_control(fields: list[bytes]) -> bool:
    """Whether a raw entry's fields are a transaction marker's."""
    return bool(fields) and fields[0] == CONTROL_BYTES


def walk_entries(
    entries: list[Any],
    start: int,
    bits: int,
    high_watermark: int,
    budget: int,
    take_first: bool,
    append: Callable[[int, int, bytes | None, bytes | None, list[Header]], Any],
    append_time: bool = False,
) -> Walked:
    """Feeds ``append(offset delta, timestamp, key, value, headers)`` the raw XRANGE entries
    from ``start`` on, in order, while their offsets are at or below ``high_watermark`` (V1's)
    and their sizes fit in ``budget`` (the first one whatever its size when ``take_first``),
    without a record object each: the fetch's hot loop. The deltas are from the first taken
    entry's offset and stay within one RecordBatch's range (past it: ``done`` False).
    ``append_time`` (a LogAppendTime topic): every record's timestamp is its append time,
    and one batch holds one append time (another: ``done`` False, a new batch starts).
    Transactions: one batch holds one producer's transactional records, or plain records
    only (another: ``done`` False); a marker is a batch of its own (``control``), its record
    Kafka's control key and value."""
    batch_stamp = b""
    batch_time = 0
    used = 0
    base = -1
    limit = 0
    last_ms = b""
    ms_delta = 0
    last_stamp = b""
    timestamp = 0
    batch_producer: bytes | None = None
    producer_id = producer_epoch = -1
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
            return Walked(i, used, base, delta + base > high_watermark, producer_id, producer_epoch)
        # the common layouts at fixed places (see entry_record), anything else field by field
        size = len(fields)
        if size >= 2 and fields[size - 2] == NUMBER_BYTES:
            size -= 2
        first = fields[0] if size else b""
        if first == CONTROL_BYTES:  # ctl, kind, pid, P, pe, E, ts, T: a batch of its own
            if i > start:
                return Walked(i, used, base, False, producer_id, producer_epoch)
            length = RECORD_OVERHEAD + 10
            if length > budget and not take_first:
                return Walked(i, used, base, True)
            named = dict(zip(fields[:size:2], fields[1:size:2], strict=False))
            kind = named.get(CONTROL_BYTES, b"")
            stamp = named.get(APPEND_TIME_BYTES)
            append(
                delta,
                int(stamp) if stamp is not None else int(ms),
                _CONTROL_KEY.get(kind, _CONTROL_KEY[CONTROL_BYTES_ABORT]),
                CONTROL_VALUE,
                _NO_HEADERS,
            )
            return Walked(
                i + 1,
                length,
                base,
                False,
                int(named.get(PRODUCER_ID_BYTES, -1)),
                int(named.get(PRODUCER_EPOCH_BYTES, -1)),
                1 if kind == CONTROL_COMMIT_BYTES else 0,
            )
        producer = None
        if size >= 4 and fields[size - 4] == PRODUCER_ID_BYTES:  # a transactional record
            producer = fields[size - 3]
            if i == start:
                producer_id, producer_epoch = int(producer), int(fields[size - 1])
            size -= 4
        if i == start:
            batch_producer = producer
        elif producer != batch_producer:
            return Walked(i, used, base, False, producer_id, producer_epoch)
        headers = _NO_HEADERS
        first = fields[0] if size else b""
        one_null = size == 8 and fields[4] == CREATE_TIME_BYTES and fields[6] == NULLS_BYTES
        if one_null and first == VALUE_BYTES:
            key, value, stamp = None, fields[1], fields[5]  # a null key
            length = len(value)
        elif one_null and first == KEY_BYTES:
            key, value, stamp = fields[1], None, fields[5]  # a tombstone
            length = len(key)
        elif (
            size == 8
            and first == KEY_BYTES
            and fields[2] == VALUE_BYTES
            and fields[6] == CREATE_TIME_BYTES
        ):
            stamp = fields[7]
            key, value = fields[1], fields[3]
            length = len(key) + len(value)
        elif (
            size == 6
            and first == KEY_BYTES
            and fields[2] == VALUE_BYTES
            and fields[4] == APPEND_TIME_BYTES
        ):
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
        if append_time:
            appended = _append_stamp(fields) or ms
            if i == start:
                batch_stamp, batch_time = appended, int(appended)
            elif appended != batch_stamp:
                return Walked(i, used, base, False, producer_id, producer_epoch)
            timestamp = batch_time
        length += RECORD_OVERHEAD
        if used + length > budget and (i > start or not take_first):
            return Walked(i, used, base, True, producer_id, producer_epoch)
        used += length
        append(delta, timestamp, key, value, headers)
    return Walked(len(entries), used, base, False, producer_id, producer_epoch)
