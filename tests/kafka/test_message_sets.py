"""The old message formats' codec (adapter/kafka/message_sets.py), pure: magic 0/1 MessageSets
as old producers send them decoded into records, corrupt and invalid ones refused, and the
Fetch's down-conversion read back by aiokafka's reader; ListOffsets v0's offsets list and
which Fetch versions a topic refuses."""

from __future__ import annotations

import struct
from binascii import crc32

import pytest
from aiokafka.codec import gzip_encode
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from hypothesis import given
from hypothesis import strategies as st

from adapter.kafka import errors
from adapter.kafka.fetch_reads import encode_entries, magic_of, refusal
from adapter.kafka.list_offsets import EARLIEST, LATEST, legacy_offsets
from adapter.kafka.message_sets import MessageSetBuilder, decode_message_set
from adapter.kafka.records import CorruptBatch, InvalidBatch, UnsupportedCompression
from mapping.core.records import entry_record
from mapping.topic.topic_config import TopicConfig
from tests.support.kafka import Record, encode_message_set

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
SENT = [
    Record(b"k", b"v" * 100, 1_700_000_000_000, []),
    Record(None, b"no key", 1_700_000_000_001, []),
    Record(b"tombstone", None, 1_700_000_000_002, []),
    Record(b"", b"", 1_700_000_000_003, []),
]


def _read(data: bytes) -> list[tuple]:
    """(offset, timestamp, timestamp type, key, value) of every record, as aiokafka's
    consumer reads a Fetch answer (CRCs checked)."""
    memory = MemoryRecords(data)
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value) for r in batch]
    return seen


# --- Produce v0-2: decoding ----------------------------------------------------------------


@pytest.mark.parametrize(("magic", "codec"), [(0, 0), (0, GZIP), (0, SNAPPY), (1, 0), (1, GZIP),
                                              (1, SNAPPY), (1, LZ4)])  # fmt: skip
def test_message_sets_decode_into_records_in_every_codec(magic: int, codec: int) -> None:
    batch = decode_message_set(encode_message_set(SENT, magic=magic, compression=codec))
    # magic 0 has no timestamps: the records are stored without one (their append time)
    stamps = [r.timestamp if magic else -1 for r in SENT]
    assert batch.records == [(r.key, r.value, t, []) for r, t in zip(SENT, stamps, strict=True)]
    assert batch.create_time is (magic == 1)
    assert (batch.producer_id, batch.is_transactional, batch.is_control) == (-1, False, False)


def test_an_uncompressed_set_is_one_batch_measured_by_its_largest_message() -> None:
    data = encode_message_set(SENT, magic=1)
    batch = decode_message_set(data)
    assert len(batch.records) == len(SENT)
    largest = 12 + 22 + 1 + 100  # log overhead, magic 1's fixed part, key, value
    assert batch.size == largest < len(data)


def _corrupt_crc(data: bytes, at: int) -> bytes:
    changed = bytearray(data)
    changed[at] ^= 0xFF
    return bytes(changed)


def test_a_bad_crc_or_a_truncated_message_is_corrupt() -> None:
    data = encode_message_set(SENT, magic=1)
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_message_set(_corrupt_crc(data, 40))  # in the first message's value
    with pytest.raises(CorruptBatch, match="truncated"):
        decode_message_set(data[:-1])
    with pytest.raises(CorruptBatch, match="truncated"):
        decode_message_set(data[:20])


def _wrapper(value: bytes, codec: int, magic: int = 1) -> bytes:
    """A wrapper message holding ``value`` with ``codec`` in its attributes, its own CRC
    right (what a producer's compressed message set looks like outside)."""
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 30)
    builder.append(0, 1, None, value)
    data = bytearray(builder.build())
    data[17] = codec
    struct.pack_into(">I", data, 12, crc32(data[16:]))
    return bytes(data)


def test_the_inner_messages_crcs_are_checked() -> None:
    """A wrapper whose own CRC is right but whose inner message is damaged (Kafka checks the
    deep entries of compressed sets)."""
    inner = bytearray(encode_message_set(SENT[:2], magic=1))
    assert decode_message_set(_wrapper(gzip_encode(bytes(inner)), GZIP)).records  # intact
    inner[-1] ^= 0xFF
    with pytest.raises(CorruptBatch, match="CRC"):
        decode_message_set(_wrapper(gzip_encode(bytes(inner)), GZIP))


def test_inner_messages_take_the_wrappers_magic_and_no_compression() -> None:
    mixed = encode_message_set(SENT[:1], magic=0)
    with pytest.raises(InvalidBatch, match="inner message of magic 0"):
        decode_message_set(_wrapper(gzip_encode(mixed), GZIP))
    nested = encode_message_set(SENT[:1], magic=1, compression=GZIP)
    with pytest.raises(InvalidBatch, match="inside a compressed"):
        decode_message_set(_wrapper(gzip_encode(nested), GZIP))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (encode_message_set(SENT[:1], magic=0) + encode_message_set(SENT[:1], magic=1),
         "different magics"),
        (encode_message_set(SENT[:1], magic=1, compression=GZIP) * 2, "more than one batch"),
        (b"", "no messages"),
    ],
)  # fmt: skip
def test_what_kafka_refuses_as_invalid_record(data: bytes, message: str) -> None:
    with pytest.raises(InvalidBatch, match=message):
        decode_message_set(data)


def test_a_magic_2_batch_among_old_messages_is_invalid() -> None:
    from tests.support.kafka import encode_batch

    data = encode_message_set(SENT[:1], magic=1) + encode_batch(SENT[:1])
    with pytest.raises(InvalidBatch, match="magic-2"):
        decode_message_set(data)


def test_zstd_and_magic_0_lz4_wrappers_are_refused() -> None:
    with pytest.raises(InvalidBatch, match="codec 4"):
        decode_message_set(_wrapper(b"whatever", ZSTD))
    with pytest.raises(UnsupportedCompression, match="KAFKA-3160"):
        decode_message_set(_wrapper(b"whatever", LZ4, magic=0))
    with pytest.raises(CorruptBatch, match="undecodable"):
        decode_message_set(_wrapper(b"whatever", GZIP))  # not gzip


@given(st.binary(max_size=300))
def test_random_bytes_decode_or_are_refused_cleanly(data: bytes) -> None:
    try:
        decode_message_set(data)
    except (CorruptBatch, InvalidBatch, UnsupportedCompression):
        pass


@given(st.binary(min_size=1, max_size=200), st.integers(0, 199))
def test_damaged_sets_are_refused_cleanly(noise: bytes, at: int) -> None:
    data = bytearray(encode_message_set(SENT, magic=1, compression=GZIP))
    at %= len(data)
    data[at : at + len(noise)] = noise
    try:
        decode_message_set(bytes(data))
    except (CorruptBatch, InvalidBatch, UnsupportedCompression):
        pass


# --- Fetch v0-3: down-conversion -------------------------------------------------------------

# records at offsets with gaps, as the pod's offsets are
DELTAS = [0, 1, 4096, 4097, 9000]
STAMPS = [11, 12, 13, 15, 14]


def _built(magic: int, codec: int, log_append_time: bool = False, base: int = 5000) -> bytes:
    builder = MessageSetBuilder(magic, codec)
    for delta, stamp, i in zip(DELTAS, STAMPS, range(len(DELTAS)), strict=True):
        key = None if i == 1 else b"k%d" % i
        value = None if i == 2 else b"v%d" % i
        builder.append(delta, stamp, key, value, [("dropped", b"header")])
    return builder.build(base, log_append_time)


@pytest.mark.parametrize("codec", [0, GZIP, SNAPPY, LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_down_converted_sets_keep_the_pods_offsets(magic: int, codec: int) -> None:
    seen = _read(_built(magic, codec))
    assert [s[0] for s in seen] == [5000 + d for d in DELTAS]
    assert [(s[3], s[4]) for s in seen] == [
        (b"k0", b"v0"), (None, b"v1"), (b"k2", None), (b"k3", b"v3"), (b"k4", b"v4")
    ]  # fmt: skip
    if magic == 1:
        assert [(s[1], s[2]) for s in seen] == [(t, 0) for t in STAMPS]  # CreateTime
    else:
        assert {(s[1], s[2]) for s in seen} == {(None, None)}  # magic 0: no timestamps


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_a_compressed_run_is_one_wrapper_at_its_last_offset(codec: int) -> None:
    data = _built(1, codec)
    offset, size = struct.unpack_from(">qi", data)
    assert 12 + size == len(data)  # one message
    assert offset == 5000 + DELTAS[-1]
    assert data[17] == codec
    assert struct.unpack_from(">q", data, 18)[0] == max(STAMPS)  # the newest timestamp


def test_magic_0_of_an_lz4_topic_goes_out_uncompressed() -> None:
    data = _built(0, LZ4)
    assert len(_read(data)) == len(DELTAS)
    assert data[17] == 0  # the first message is a plain one, not a wrapper


@pytest.mark.parametrize("codec", [0, GZIP])
def test_log_append_time_sets_the_timestamp_type(codec: int) -> None:
    seen = _read(_built(1, codec, log_append_time=True))
    assert {s[2] for s in seen} == {1}  # LogAppendTime
    if codec:  # the wrapper's time stands for every inner record
        assert {s[1] for s in seen} == {max(STAMPS)}


BITS = 12


def _entry(offset: int, *fields: bytes) -> list:
    return [b"%d-%d" % (offset >> BITS, offset & ((1 << BITS) - 1)), list(fields)]


ENTRIES = [
    _entry(5000, b"key", b"k", b"value", b"v1", b"ts", b"9", b"create_ts", b"11", b"n", b"1"),
    _entry(5001, b"key", b"k2", b"value", b"v2", b"ts", b"9", b"create_ts", b"12",
           b"h:a", b"x", b"n", b"2"),
    # a transaction's record and its commit marker
    _entry(9000, b"key", b"k3", b"value", b"v3", b"ts", b"9", b"create_ts", b"13",
           b"pid", b"7", b"pe", b"0", b"n", b"3"),
    _entry(9001, b"ctl", b"commit", b"pid", b"7", b"pe", b"0", b"ts", b"9", b"n", b"4"),
    _entry(9002, b"key", b"k5", b"value", b"v5", b"ts", b"9", b"create_ts", b"14", b"n", b"5"),
]  # fmt: skip


@pytest.mark.parametrize("magic", [0, 1])
def test_fetch_down_converts_entries_without_headers_or_markers(magic: int) -> None:
    plain = TopicConfig("t", 1, 1, 1)
    sets, taken, _, done, transactional = encode_entries(
        ENTRIES, BITS, 1 << 40, 1 << 20, True, plain, magic
    )
    assert (taken, done, transactional) == (len(ENTRIES), False, False)
    stored = [entry_record(i, f, BITS) for i, f in ENTRIES if f[0] != b"ctl"]
    expected = [
        (r.offset, r.timestamp if magic else None, 0 if magic else None, r.key, r.value)
        for r in stored
    ]
    assert _read(b"".join(sets)) == expected
    # the same entries in magic 2 do carry the marker and the header
    batches = encode_entries(ENTRIES, BITS, 1 << 40, 1 << 20, True, plain)[0]
    assert len(_read(b"".join(batches))) == len(ENTRIES)


def test_the_message_format_of_each_fetch_version() -> None:
    assert [magic_of(v) for v in range(13)] == [0, 0, 1, 1] + [2] * 9


def test_what_a_topic_refuses_to_old_fetch_versions() -> None:
    zstd = TopicConfig("t", 1, 1, 1, overrides=(("compression_type", "zstd"),))
    closed = TopicConfig("t", 1, 1, 1, overrides=(("message_downconversion_enable", "false"),))
    plain = TopicConfig("t", 1, 1, 1)
    assert [refusal(v, zstd) for v in (0, 3, 4, 9, 10, 12)] == [
        errors.UNSUPPORTED_COMPRESSION_TYPE
    ] * 4 + [errors.NONE] * 2  # fmt: skip
    assert [refusal(v, closed) for v in (0, 1, 2, 3, 4, 12)] == [
        errors.UNSUPPORTED_VERSION
    ] * 4 + [errors.NONE] * 2  # fmt: skip
    assert {refusal(v, plain) for v in range(13)} == {errors.NONE}


# --- ListOffsets v0 --------------------------------------------------------------------------

START, END, WRITTEN, NOW = 4096, 81920, 1_000, 5_000


@pytest.mark.parametrize(
    ("spec", "max_num", "expected"),
    [
        (LATEST, 1, [END]),  # Burrow's and Sarama's question
        (LATEST, 2, [END, START]),
        (LATEST, 10, [END, START]),
        (EARLIEST, 1, [START]),
        (EARLIEST, 5, [START]),
        (LATEST, 0, []),
        (NOW, 5, [END, START]),  # at or after the last point's time
        (WRITTEN, 5, [START]),  # the segment's last write, not yet "now"
        (WRITTEN - 1, 5, []),  # before anything was written
    ],
)
def test_list_offsets_v0_answers_as_kafka_3_9_over_one_segment(
    spec: int, max_num: int, expected: list[int]
) -> None:
    assert legacy_offsets(spec, max_num, START, END, WRITTEN, NOW) == expected


def test_list_offsets_v0_of_an_empty_log() -> None:
    assert legacy_offsets(LATEST, 5, 0, 0, None, NOW) == [0]
    assert legacy_offsets(EARLIEST, 5, 0, 0, None, NOW) == [0]
