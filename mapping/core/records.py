"""A record's stream entry: the one definition of its fields, how an append spells them and
how a read takes them apart (aiokafka's ``record/`` package is the model).

Every record, V1's, Kafka's or the Spark sink's, is one stream entry with readable fields:

    key        the key (absent: null key)
    value      the value (absent: null value, a tombstone; V1 CONSUME shows it as empty)
    ts         the append time (ms, Redis' clock), as V1 writes it
    create_ts  the record's own timestamp (CreateTime) as the producer set it
    create_dt  the same as a difference from ``ts`` (CreateTime - ts, ms), in place of
               create_ts: what the streamadapter module writes (a few digits where a
               timestamp takes 13, 9 bytes less per record in Redis); readers take both
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
tests/mapping/core/test_record_layout.py checks that they agree with the constants here. The Kafka
Fetch's walk over raw entries is mapping/partition/record_walk.py.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import islice
from typing import Any, NamedTuple

from mapping.core import codec, resp

# The field names, as the append scripts take them.
KEY = "key"
VALUE = "value"
APPEND_TIME = "ts"
CREATE_TIME = "create_ts"
CREATE_DELTA = "create_dt"
NULLS = "null"
NUMBER = "n"
HEADER_PREFIX = "h:"
NULL_HEADER_PREFIX = "hn:"
PRODUCER_ID = "pid"
PRODUCER_EPOCH = "pe"
CONTROL = "ctl"
FIELD_NAMES = frozenset(
    {
        KEY,
        VALUE,
        APPEND_TIME,
        CREATE_TIME,
        CREATE_DELTA,
        NULLS,
        NUMBER,
        PRODUCER_ID,
        PRODUCER_EPOCH,
        CONTROL,
    }
)
# A control entry's ``ctl`` values (Kafka's ControlRecordType ABORT 0, COMMIT 1).
CONTROL_COMMIT = "commit"
CONTROL_ABORT = "abort"

# The same names as XRANGE replies carry them: what the readers compare.
KEY_BYTES = KEY.encode()
VALUE_BYTES = VALUE.encode()
APPEND_TIME_BYTES = APPEND_TIME.encode()
CREATE_TIME_BYTES = CREATE_TIME.encode()
CREATE_DELTA_BYTES = CREATE_DELTA.encode()
CREATE_TIME_FIELDS = (CREATE_TIME_BYTES, CREATE_DELTA_BYTES)  # a CreateTime's two names
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
# ... and a RecordBatch's plain records sent whole, for the streamadapter module
# (mapping/connection/append_module.c): -3, first timestamp, count, the records' bytes.
RAW_BATCH = -3
BATCH_HEADER_BYTES = 61  # a magic 2 RecordBatch's header: its records follow
_PACKED_LENGTH = struct.Struct(">I")

Header = tuple[str, bytes | None]
# A record as a Produce request carries it: (key, value, create time, headers).
ProducedRecord = tuple[bytes | None, bytes | None, int, list[Header]]


class RawRecords(NamedTuple):
    """A RecordBatch whose records are plain (a key or null, a value or null, no headers;
    uncompressed, CreateTime), kept as the producer sent them: ``batch``, its whole bytes."""

    batch: bytes
    first_timestamp: int
    count: int


def raw_batch_args(raw: RawRecords) -> list[bytes | int]:
    """kafka/produce.lua's arguments of ``raw``'s records (the module appends them)."""
    return [RAW_BATCH, raw.first_timestamp, raw.count, raw.batch[BATCH_HEADER_BYTES:]]


# STREAMADAPTER.PRODUCEMANY's batch head (mapping/connection/produce_commands.h,
# parse_sent_batch): producer id, epoch, base sequence, record count, the producer id
# expiration, the lost-gap flag, the first timestamp
_SENT_HEAD = struct.Struct(">qiiiqBq")


def sent_batch(
    raw: RawRecords,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    producer_id_expiration_ms: int,
    lost_gap: bool,
) -> bytes:
    """``raw``'s records as one argument of STREAMADAPTER.PRODUCEMANY, with its producer."""
    head = _SENT_HEAD.pack(
        producer_id, producer_epoch, base_sequence, raw.count, producer_id_expiration_ms,
        int(lost_gap), raw.first_timestamp,
    )  # fmt: skip
    return head + memoryview(raw.batch)[BATCH_HEADER_BYTES:]


def raw_batch_resp(raw: RawRecords) -> resp.RespArgs:
    """``raw_batch_args`` in RESP (the records' bytes copied once)."""
    records = memoryview(raw.batch)[BATCH_HEADER_BYTES:]
    head = resp.bulks((RAW_BATCH, raw.first_timestamp, raw.count))
    data = b"".join((head, b"$%d\r\n" % len(records), records, b"\r\n"))
    return resp.RespArgs(data, 4, lambda: raw_batch_args(raw))


def packed_pairs(items: Sequence[bytes | str]) -> bytes:
    """V1 records (key1, value1, key2, value2, ...) as partition/produce.lua hands them to the
    streamadapter module in one argument (layout ``packed``, mapping/connection/
    append_module.c): each key and value a 4-byte big-endian length and its bytes."""
    parts = []
    for item in items:
        data = item.encode() if isinstance(item, str) else item
        parts.append(_PACKED_LENGTH.pack(len(data)))
        parts.append(data)
    return b"".join(parts)


def create_time(name: bytes, stamp: bytes, append_stamp: bytes) -> int:
    """A record's CreateTime from its ``name`` field's value ``stamp``: ``create_ts`` as is
    (or ``ts``, a record without one), ``create_dt`` added to the append time."""
    return int(append_stamp) + int(stamp) if name == CREATE_DELTA_BYTES else int(stamp)


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


_NULL_KEY_RESP = resp.bulk(SHORT_NULL_KEY)
_KEY_VALUE_RESP = resp.bulk(SHORT_KEY_VALUE)


def append_resp(
    records: list[ProducedRecord], create_time: bool = True, short: bool = True
) -> resp.RespArgs:
    """``append_args`` already in RESP (mapping/core/resp.py), the same bytes hiredis would pack,
    at a third of the cost: the short forms are written straight, a create time or a value
    length that repeats is encoded once; any other record goes through ``record_items``."""

    def args() -> list[bytes | str | int]:
        return append_args(records, create_time, short)

    if not (create_time and short):
        every = args()
        return resp.RespArgs(resp.bulks(every), len(every), lambda: every)
    parts: list[bytes] = []
    put = parts.append
    count = 0
    last_time: int | None = None
    time_part = b""  # the value's CRLF, then the create time
    null_key_heads: dict[int, bytes] = {}  # by the value's length
    for key, value, timestamp, headers in records:
        if headers or value is None:
            lead, items = record_items(key, value, timestamp, headers)
            put(resp.bulks((len(items), lead, *items)))
            count += len(items) + 2
            continue
        if timestamp != last_time:
            last_time, time_part = timestamp, b"\r\n" + resp.bulk(timestamp)
        if key is None:
            head = null_key_heads.get(len(value))
            if head is None:
                head = null_key_heads[len(value)] = _NULL_KEY_RESP + b"$%d\r\n" % len(value)
            put(head)
            count += 3
        else:
            put(_KEY_VALUE_RESP + b"$%d\r\n" % len(key))
            put(key)
            put(b"\r\n$%d\r\n" % len(value))
            count += 4
        put(value)
        put(time_part)
    return resp.RespArgs(b"".join(parts), count, args)


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
        and fields[6] in CREATE_TIME_FIELDS
    ):
        ms, _, seq = entry_id.partition(b"-")
        timestamp = create_time(fields[6], fields[7], fields[5])
        return StoredRecord((int(ms) << bits) | int(seq), timestamp, fields[1], fields[3], [])
    if (
        size == 6
        and fields[0] == KEY_BYTES
        and fields[2] == VALUE_BYTES
        and fields[4] == APPEND_TIME_BYTES
    ):
        ms, _, seq = entry_id.partition(b"-")
        return StoredRecord((int(ms) << bits) | int(seq), int(fields[5]), fields[1], fields[3], [])
    if size == 8 and fields[4] in CREATE_TIME_FIELDS and fields[6] == NULLS_BYTES:
        # a null key (value first) or a tombstone (key first), no headers
        ms, _, seq = entry_id.partition(b"-")
        offset = (int(ms) << bits) | int(seq)
        timestamp = create_time(fields[4], fields[5], fields[3])
        if fields[0] == VALUE_BYTES:
            return StoredRecord(offset, timestamp, None, fields[1], [])
        if fields[0] == KEY_BYTES:
            return StoredRecord(offset, timestamp, fields[1], None, [])
    key = value = None
    append_ts = create_ts = create_dt = None
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
        elif name == CREATE_DELTA_BYTES:
            create_dt = fields[i + 1]
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
    if create_ts is None and create_dt is not None:
        timestamp += int(create_dt)  # from ts (or, without one, the id's millisecond)
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
    ...]]`` (see mapping.connection.client.connect) or redis-py's ``(id, {field: value})``.
    Transaction markers are left out; they and the transactional records are noted in
    ``transactional`` as (offset, producer id; -1 for a marker) for the caller to filter
    aborted ones (mapping/partition/partition_txns.py). The CONSUME hot loop: entries of one
    millisecond parse it once, the common layout is read at fixed places."""
    values: list[tuple[int, bytes]] = []
    if len(reply) > first and isinstance(reply[first][1], dict):
        return _dict_entry_values(reply, first, high_watermark, bits, transactional)
    noted = transactional if transactional is not None else []
    last_ms = b""
    ms_value = 0
    for entry_id, fields in islice(reply, first, None):
        ms, _, seq = entry_id.partition(b"-")
        if ms != last_ms:
            last_ms, ms_value = ms, int(ms) << bits
        offset = ms_value | int(seq)
        if offset > high_watermark:
            break
        size = len(fields)
        # names sit at even places, so these compare names only
        if size >= 6 and fields[size - 6] == PRODUCER_ID_BYTES:  # ... pid P pe E n N
            noted.append((offset, int(fields[size - 5])))
        if size > 3 and fields[2] == VALUE_BYTES:  # key K value V ...: as the appends write
            values.append((offset, fields[3]))
        elif fields and fields[0] == CONTROL_BYTES:
            noted.append((offset, -1))
        else:
            named = dict(zip(fields[::2], fields[1::2], strict=False))
            values.append((offset, named.get(VALUE_BYTES, b"")))
    return values


def _dict_entry_values(
    reply: list[Any],
    first: int,
    high_watermark: int,
    bits: int,
    transactional: list[tuple[int, int]] | None,
) -> list[tuple[int, bytes]]:
    """``entry_values`` of redis-py's ``(id, {field: value})`` entries."""
    values: list[tuple[int, bytes]] = []
    noted = transactional if transactional is not None else []
    for entry_id, fields in islice(reply, first, None):
        offset = codec.entry_offset(entry_id, bits)
        if offset > high_watermark:
            break
        if CONTROL_BYTES in fields:
            noted.append((offset, -1))
            continue
        producer = fields.get(PRODUCER_ID_BYTES)
        if producer is not None:
            noted.append((offset, int(producer)))
        values.append((offset, fields.get(VALUE_BYTES, b"")))
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
