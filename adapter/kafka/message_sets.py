"""Kafka's old message formats, magic 0 and 1 MessageSets <-> records, with aiokafka's legacy
codec (``aiokafka.record.legacy_records``), beside the RecordBatch codec of records.py.

Decode (Produce v0-2): a partition's MessageSet is one append, as Kafka's LogValidator takes
it: one magic throughout (else INVALID_RECORD), a compressed set is a single wrapper message
(else INVALID_RECORD) whose inner messages have the wrapper's magic and no compression of
their own; every message's CRC-32 is checked, the inner ones too (CORRUPT_MESSAGE). gzip,
snappy and lz4 wrappers are read; zstd never existed in these formats (INVALID_RECORD, as
Kafka's legacy iterator), and magic 0 with lz4 (Kafka 0.8/0.9's frame with the wrong header
checksum, KAFKA-3160) is refused with UNSUPPORTED_COMPRESSION_TYPE, as aiokafka refuses it.
A magic-0 message has no timestamp: its records are stored without one (readers see their
append time, docs/kafka.md "Old message formats").

Encode (Fetch v0-3, Kafka's down-conversion: magic 0 for v0-1, magic 1 for v2-3): records
as mapping.partition.record_walk.walk_entries feeds them, headers dropped (the formats have none).
Uncompressed, each message carries its own offset; compressed (the topic's compression.type),
one wrapper message per run whose offset is its last record's, the inner offsets relative to
the first record in magic 1 and absolute in magic 0 (what Kafka's MemoryRecordsBuilder
writes). Magic 1 carries timestamps; a LogAppendTime topic's messages (or wrapper) carry the
append time with the timestamp-type attribute. A magic-0 answer of an lz4 topic goes out
uncompressed (see above).
"""

from __future__ import annotations

import struct
from binascii import crc32
from collections.abc import Iterator

from aiokafka.codec import gzip_decode, lz4_decode, snappy_decode
from aiokafka.errors import CorruptRecordException
from aiokafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder

from adapter.kafka.records import (
    CorruptBatch,
    InvalidBatch,
    ProducedBatch,
    UnsupportedCompression,
)
from mapping.core.records import Header, ProducedRecord

_SIZE = struct.Struct(">i")  # at byte 8: the message's bytes after the first 12
_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_TIMESTAMP = struct.Struct(">q")
LOG_OVERHEAD = 12  # offset and size
CRC_AT, MAGIC_AT, ATTRIBUTES_AT, TIMESTAMP_AT = 12, 16, 17, 18  # CRC-32 from the magic on
# a message's least bytes after the log overhead: CRC, magic, attributes, (timestamp), key
# and value lengths
MIN_SIZE = {0: 14, 1: 22}
KEY_AT = {0: 18, 1: 26}
CODEC_MASK = 0x07
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
LOG_APPEND_TIME_ATTRIBUTE = 0x08  # magic 1's timestamp-type bit
NO_TIMESTAMP = -1
_UNBOUNDED = 1 << 31  # a builder's batch size: a Fetch run is bounded by its byte budget


def decode_message_set(data: bytes | memoryview) -> ProducedBatch:
    """A Produce v0-2 partition's MessageSet as one batch; raises CorruptBatch,
    InvalidBatch or UnsupportedCompression (see the module's docstring)."""
    view = memoryview(data)
    messages = list(_messages(view))
    if not messages:
        raise InvalidBatch("no messages")
    magic = messages[0][2]
    if any(m != magic for _, _, m, _ in messages):
        raise InvalidBatch("messages of different magics in one message set")
    compressed = any(attributes & CODEC_MASK for _, _, _, attributes in messages)
    if compressed and len(messages) > 1:
        raise InvalidBatch("Compressed outer record has more than one batch")
    records: list[ProducedRecord] = []
    for start, end, _, attributes in messages:
        message = bytes(view[start:end])
        codec = attributes & CODEC_MASK
        if codec == NONE:
            records.append(_record(message, magic))
        else:
            records += _inner_records(message, magic, codec)
    largest = max(end - start for start, end, _, _ in messages)  # what max.message.bytes sees
    return ProducedBatch(-1, -1, -1, False, records, largest, create_time=magic > 0)


def _messages(view: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """(start, end, magic, attributes) of each message of a set, in order."""
    pos = 0
    while pos < len(view):
        if len(view) - pos < LOG_OVERHEAD + MIN_SIZE[0]:
            raise CorruptBatch("truncated message")
        (size,) = _SIZE.unpack_from(view, pos + 8)
        magic = view[pos + MAGIC_AT]
        if magic == 2:
            raise InvalidBatch("a magic-2 batch among magic-0/1 messages")
        if magic > 2:
            raise CorruptBatch(f"message format magic {magic}")
        end = pos + LOG_OVERHEAD + size
        if size < MIN_SIZE[magic] or end > len(view):
            raise CorruptBatch("truncated message")
        yield pos, end, magic, view[pos + ATTRIBUTES_AT]
        pos = end


def _checked(message: bytes, magic: int) -> LegacyRecordBatch:
    """The message read by aiokafka, its layout and CRC-32 checked."""
    _value(message, magic)  # its key and value lengths fill it exactly
    try:
        batch = LegacyRecordBatch(message, magic)
    except CorruptRecordException as exc:
        raise CorruptBatch(f"undecodable message: {exc}") from None
    if not batch.validate_crc():
        raise CorruptBatch("message CRC-32 mismatch")
    return batch


def _record(message: bytes, magic: int) -> ProducedRecord:
    """An uncompressed message's record (key, value, timestamp or -1, no headers)."""
    batch = _checked(message, magic)
    try:
        (record,) = list(batch)
    except Exception as exc:  # key or value lengths past the message's end...
        raise CorruptBatch(f"undecodable message: {exc}") from None
    timestamp = record.timestamp if magic and record.timestamp is not None else NO_TIMESTAMP
    return record.key, record.value, timestamp, []


def _inner_records(message: bytes, magic: int, codec: int) -> list[ProducedRecord]:
    """A compressed wrapper's records: its value decompressed, read as a message set whose
    messages have the wrapper's magic and no compression."""
    _checked(message, magic)
    if codec == ZSTD or codec > LZ4:
        raise InvalidBatch(f"compression codec {codec} in a magic-{magic} message")
    if codec == LZ4 and magic == 0:
        raise UnsupportedCompression("LZ4 in magic 0 (KAFKA-3160): use magic 1")
    value = _value(message, magic)
    if value is None:
        raise InvalidBatch("a compressed message without a value")
    try:
        inner = {GZIP: gzip_decode, SNAPPY: snappy_decode, LZ4: lz4_decode}[codec](value)
    except Exception as exc:
        raise CorruptBatch(f"undecodable compressed messages: {exc}") from None
    view = memoryview(inner)
    records = []
    for start, end, inner_magic, attributes in _messages(view):
        if inner_magic != magic:
            raise InvalidBatch(f"an inner message of magic {inner_magic} in a magic-{magic} one")
        if attributes & CODEC_MASK:
            raise InvalidBatch("a compressed message inside a compressed message")
        records.append(_record(bytes(view[start:end]), magic))
    if not records:
        raise InvalidBatch("a compressed message without messages")
    return records


def _value(message: bytes, magic: int) -> bytes | None:
    """A message's value (a wrapper's compressed inner set), None when null; CorruptBatch
    unless its key and value (-1: null) fill the message exactly."""
    pos = KEY_AT[magic]
    try:
        (key_size,) = _SIZE.unpack_from(message, pos)
        pos += 4 + max(key_size, 0)
        (value_size,) = _SIZE.unpack_from(message, pos)
    except struct.error:
        raise CorruptBatch("key length past the message's end") from None
    pos += 4
    if key_size < -1 or value_size < -1 or pos + max(value_size, 0) != len(message):
        raise CorruptBatch("key and value lengths do not match the message size")
    return None if value_size < 0 else message[pos:]


class MessageSetBuilder:
    """One run of records in a MessageSet of ``magic`` 0 or 1 (Fetch v0-3): ``append`` has
    the RecordBatch builder's signature (walk_entries feeds either), ``build`` writes them
    at their offsets once the run's first offset is known."""

    __slots__ = ("magic", "codec", "_records")

    def __init__(self, magic: int, codec: int = NONE) -> None:
        self.magic = magic
        # zstd never exists here (Fetch answers UNSUPPORTED_COMPRESSION_TYPE first); magic-0
        # lz4 goes out uncompressed (KAFKA-3160)
        self.codec = NONE if codec == LZ4 and magic == 0 else codec
        self._records: list[tuple[int, int, bytes | None, bytes | None]] = []

    def append(
        self,
        offset_delta: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header],
    ) -> None:
        self._records.append((offset_delta, timestamp, key, value))  # headers dropped

    def build(self, base_offset: int, log_append_time: bool = False) -> bytes:
        """The messages at ``base_offset`` + their deltas; ``log_append_time``: magic 1's
        timestamps are the log's append time (the timestamp-type attribute)."""
        magic, records = self.magic, self._records
        if not records:
            return b""
        if self.codec == NONE:
            builder = LegacyRecordBatchBuilder(magic, NONE, _UNBOUNDED)
            for delta, timestamp, key, value in records:
                builder.append(base_offset + delta, timestamp, key, value)
            data = builder.build()
            if log_append_time and magic == 1:
                _mark_each_log_append_time(data)
            return bytes(data)
        builder = LegacyRecordBatchBuilder(magic, self.codec, _UNBOUNDED)
        for delta, timestamp, key, value in records:
            # magic 1: offsets relative to the first record; magic 0: absolute
            builder.append(delta if magic else base_offset + delta, timestamp, key, value)
        wrapper = builder.build()  # one wrapper message at offset 0, timestamp 0
        _OFFSET.pack_into(wrapper, 0, base_offset + records[-1][0])  # its last record's
        if magic == 1:  # the wrapper's timestamp: its newest record's, or the append time
            _TIMESTAMP.pack_into(wrapper, TIMESTAMP_AT, max(r[1] for r in records))
            if log_append_time:
                wrapper[ATTRIBUTES_AT] |= LOG_APPEND_TIME_ATTRIBUTE
            _seal(wrapper, 0, len(wrapper))
        return bytes(wrapper)


def _seal(data: bytearray, start: int, end: int) -> None:
    """Recompute the CRC-32 of the message at ``start`` (it covers the magic on)."""
    _CRC.pack_into(data, start + CRC_AT, crc32(memoryview(data)[start + MAGIC_AT : end]))


def _mark_each_log_append_time(data: bytearray) -> None:
    pos = 0
    while pos < len(data):
        (size,) = _SIZE.unpack_from(data, pos + 8)
        end = pos + LOG_OVERHEAD + size
        data[pos + ATTRIBUTES_AT] |= LOG_APPEND_TIME_ATTRIBUTE
        _seal(data, pos, end)
        pos = end
