"""Kafka RecordBatches (magic 2) <-> records, with aiokafka's compiled codec.

Decode (Produce): CRC-32C checked, any of the four codecs (gzip, snappy, lz4, zstd through
cramjam). Encode (Fetch): batches whose base offset is the first record's offset and whose
offset deltas are the gaps between the pod's offsets (a batch never spans more than 2^31-1
offsets: a longer run starts a new batch; mapping.partition.record_walk.walk_entries feeds them),
compressed with the topic's compression.type, and on a LogAppendTime topic marked so (the
timestamp-type attribute bit), one append time per batch; a transaction's records in batches
of their own with the transactional bit and the producer's id and epoch, each commit or abort
marker a control batch (control and transactional bits, one control record).

The old formats (magic 0/1 MessageSets: Produce v0-2, Fetch v0-3) are message_sets.py's.

Fetch's common batches (uncompressed, CreateTime, plain records with a null key or a key and
a value, no headers) come from a compiled walk (``plain_batch``, adapter/kafka/_walk.c) where
the install built it: the same bytes as the pure walk feeding aiokafka's builder, which does
every other batch and all of them where it is not built or ADAPTER_PURE_PYTHON is set.
``plain_batch_raw`` is the same walk over an XRANGE reply still in its RESP bytes (the
batcher's raw replies, mapping/connection/raw_replies.py): the entries are never made into
Python objects unless a batch goes to the pure path.

Measured on the 2-core VM (1000 records of 100 bytes per batch): aiokafka.record decodes
~0.9 M rec/s and encodes ~2.2 M rec/s; kafka-python's pure-Python record codec decodes
~31 k rec/s. So aiokafka for records, kafka-python for the message schemas.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from mapping.core.compiled import compiled
from mapping.core.records import BATCH_HEADER_BYTES, ProducedRecord, RawRecords

_BATCH_LENGTH = struct.Struct(">i")  # at byte 8: the bytes after the first 12
_BASE_OFFSET = struct.Struct(">q")
_CRC = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
_LEADER_EPOCH = struct.Struct(">i")  # at byte 12: PartitionLeaderEpoch (not under the CRC)
MAGIC_OFFSET = 16
CRC_OFFSET = 17  # the CRC-32C covers the bytes from the attributes on
ATTRIBUTES_OFFSET = 21
LOG_APPEND_TIME_ATTRIBUTE = 0x08  # the attributes' timestamp-type bit
TRANSACTIONAL_ATTRIBUTE = 0x10
CONTROL_ATTRIBUTE = 0x20
HEADER_BYTES = BATCH_HEADER_BYTES  # a v2 batch without records
RECORD_COUNT_OFFSET = 57
_RECORD_COUNT = struct.Struct(">i")
# the attributes a batch sent whole has none of: a codec, LogAppendTime, transactional,
# control
# a first timestamp sent with the records: the module reads numbers of up to 18 digits
TIME_BOUND = 10**18
RAW_ATTRIBUTES_MASK = 0x07 | LOG_APPEND_TIME_ATTRIBUTE | TRANSACTIONAL_ATTRIBUTE | CONTROL_ATTRIBUTE
NO_PRODUCER_ID = -1


# plain_batch(entries, start, bits, high watermark, budget, take first, epoch_at) ->
# (batch, end, used, done), walk_entries' Walked for a plain batch, or None: not one such
# batch from ``start`` (a header, a tombstone, a V1 record...), left to the pure path.
PlainBatch = Callable[
    [list[Any], int, int, int, int, bool, Callable[[int], int] | None],
    tuple[bytes, int, int, bool] | None,
]


def compiled_plain_batch() -> PlainBatch | None:
    """The compiled walk, None where the install did not build it or ADAPTER_PURE_PYTHON
    asks for the pure path (mapping/core/compiled.py)."""
    return compiled("adapter.kafka._walk", "plain_batch")


plain_batch: PlainBatch | None = compiled_plain_batch()  # read per call: the tests swap it

# plain_batch_raw(data, pos, index, count, bits, high watermark, budget, take first,
# epoch_at) -> (batch, end, end_pos, used, done) or None: plain_batch over the entries of a
# raw XRANGE reply (mapping/connection/raw_replies.RawReply: ``data``, its ``count``
# entries, entry ``index`` at byte ``pos``), ``end_pos`` where entry ``end`` starts.
PlainBatchRaw = Callable[
    [bytes, int, int, int, int, int, int, bool, Callable[[int], int] | None],
    tuple[bytes, int, int, int, bool] | None,
]


def compiled_plain_batch_raw() -> PlainBatchRaw | None:
    """The compiled walk over raw XRANGE replies (None as for ``compiled_plain_batch``)."""
    return compiled("adapter.kafka._walk", "plain_batch_raw")


# read per call: the tests swap it; None: Fetch reads its pages parsed
plain_batch_raw: PlainBatchRaw | None = compiled_plain_batch_raw()


class CorruptBatch(Exception):
    """A batch that is truncated, not magic 2, or fails its CRC."""


class UnsupportedMagic(CorruptBatch):
    """A batch of an older message format (magic 0 or 1) where only magic 2 is accepted
    (Produce v3+; v0-2 read it with message_sets.decode_message_set)."""


class InvalidBatch(Exception):
    """Records Kafka refuses as INVALID_RECORD: magics mixed in one partition's data, more
    than one compressed wrapper, a compressed wrapper without a value or with zstd."""


class UnsupportedCompression(Exception):
    """A codec the pod cannot read in this format (UNSUPPORTED_COMPRESSION_TYPE)."""


@dataclass(slots=True)
class ProducedBatch:
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    records: list[ProducedRecord]  # (key, value, create time, headers)
    size: int  # its bytes as sent (what Kafka checks against max.message.bytes)
    is_control: bool = False  # a control batch (clients never send one: refused)
    # the records carry their own timestamps (CreateTime); False for magic 0, which has none:
    # they are stored without one, so readers see their append time
    create_time: bool = True
    # its records as sent, not decoded (``records`` empty): plain records that the
    # streamadapter module appends (decode_batches' keep_plain; ``decode`` reads them)
    raw: RawRecords | None = None

    @property
    def count(self) -> int:
        return self.raw.count if self.raw is not None else len(self.records)

    def decode(self) -> None:
        """Read ``raw``'s records into ``records`` (for what needs each record: a check
        of the topic's, an append without the module)."""
        if self.raw is not None:
            self.records = _records(DefaultRecordBatch(self.raw.batch))
            self.raw = None


def _records(batch: DefaultRecordBatch) -> list[ProducedRecord]:
    try:
        return [(r.key, r.value, r.timestamp, r.headers) for r in batch]
    except Exception as exc:  # a bad varint, a bad compressed payload...
        raise CorruptBatch(f"undecodable records: {exc}") from None


# plain_records(records, count): whether a batch's bytes after its header are exactly
# ``count`` plain records (adapter/kafka/_produce.c); None where the install did not build
# it: every batch is decoded
PlainRecords = Callable[[memoryview, int], bool]
plain_records: PlainRecords | None = compiled("adapter.kafka._produce", "plain_records")


def _raw(data: bytes, batch: DefaultRecordBatch) -> RawRecords | None:
    """``data`` (``batch``'s bytes) kept as sent, when its records are plain
    (module-appended), else None."""
    check = plain_records
    if check is None or batch.attributes & RAW_ATTRIBUTES_MASK:  # compressed, LogAppendTime...
        return None
    if not -TIME_BOUND < batch.first_timestamp < TIME_BOUND:
        return None
    (count,) = _RECORD_COUNT.unpack_from(data, RECORD_COUNT_OFFSET)
    if not check(memoryview(data)[HEADER_BYTES:], count):
        return None
    return RawRecords(data, batch.first_timestamp, count)


def decode_batches(data: bytes | memoryview, keep_plain: bool = False) -> list[ProducedBatch]:
    """Every batch of a Produce request's ``records``; raises CorruptBatch. ``keep_plain``:
    a batch of plain records (uncompressed, CreateTime, not transactional: a key or null, a
    value or null, no headers) is kept as sent (``raw``), its records not decoded."""
    view = memoryview(data)
    batches: list[ProducedBatch] = []
    pos = 0
    while pos < len(view):
        # the magic first: an old format's message may be shorter than a v2 header
        if len(view) - pos > MAGIC_OFFSET and view[pos + MAGIC_OFFSET] != 2:
            magic = view[pos + MAGIC_OFFSET]
            raise UnsupportedMagic(f"message format magic {magic}; only magic 2 is accepted")
        if len(view) - pos < HEADER_BYTES:
            raise CorruptBatch("truncated record batch")
        (length,) = _BATCH_LENGTH.unpack_from(view, pos + 8)
        end = pos + 12 + length
        if length < HEADER_BYTES - 12 or end > len(view):
            raise CorruptBatch("truncated record batch")
        data_bytes = bytes(view[pos:end])
        batch = DefaultRecordBatch(data_bytes)
        if not batch.validate_crc():
            raise CorruptBatch("record batch CRC-32C mismatch")
        raw = _raw(data_bytes, batch) if keep_plain else None
        records = _records(batch) if raw is None else []
        batches.append(
            ProducedBatch(
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                bool(batch.is_transactional),
                records,
                end - pos,
                bool(batch.is_control_batch),
                raw=raw,
            )
        )
        pos = end
    return batches


def last_offset(batches: bytes, at: int = 0) -> int:
    """The last offset of the (magic 2) record batch at byte ``at`` of ``batches``: its base
    offset plus its last offset delta."""
    base = int.from_bytes(batches[at : at + 8], "big", signed=True)
    return base + int.from_bytes(batches[at + 23 : at + 27], "big")


def next_offset(batches: bytes) -> int:
    """The offset after the last record of ``batches`` (magic 2, one after another)."""
    at = 0
    last = -1
    while at + 27 <= len(batches):
        last = last_offset(batches, at)
        at += 12 + int.from_bytes(batches[at + 8 : at + 12], "big")
    return last + 1


def batch_builder(codec: int = 0) -> DefaultRecordBatchBuilder:
    """A batch's builder for Fetch (offset deltas from ``finish_batch``'s base), compressed
    with ``codec`` (mapping.topic.topic_config.compression_codec; 0: none)."""
    return DefaultRecordBatchBuilder(2, codec, 0, NO_PRODUCER_ID, -1, -1, 1 << 31)


def finish_batch(
    builder: DefaultRecordBatchBuilder,
    base_offset: int,
    log_append_time: bool = False,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    control: bool = False,
    leader_epoch: int = 0,
) -> bytes:
    """The built batch at ``base_offset``; ``log_append_time``: marked as stamped by the log
    (its records' timestamps, first and max, are their one append time), so clients report
    TIMESTAMP_LOG_APPEND_TIME with the batch's max timestamp. ``producer_id`` (not -1): a
    transactional batch of that producer and epoch (the transactional attribute, which
    read_committed consumers match against the aborted transactions); ``control``: a
    transaction marker's batch (its one record Kafka's control key and value);
    ``leader_epoch``: the leader epoch of its records (KIP-320,
    mapping/replication/leader_epochs.py)."""
    bits = LOG_APPEND_TIME_ATTRIBUTE if log_append_time else 0
    if producer_id != NO_PRODUCER_ID:
        builder.set_producer_state(producer_id, producer_epoch, -1)
        bits |= TRANSACTIONAL_ATTRIBUTE | (CONTROL_ATTRIBUTE if control else 0)
    batch = builder.build()
    _BASE_OFFSET.pack_into(batch, 0, base_offset)  # not covered by the CRC
    _LEADER_EPOCH.pack_into(batch, 12, leader_epoch)  # nor is this
    if bits:
        (attributes,) = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_OFFSET)
        _ATTRIBUTES.pack_into(batch, ATTRIBUTES_OFFSET, attributes | bits)
        _CRC.pack_into(batch, CRC_OFFSET, calc_crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)
