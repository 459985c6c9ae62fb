"""The sans-I/O Kafka core: framing, headers, ApiVersions, error paths, record batches."""

from __future__ import annotations

import asyncio
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kafka import api_versions, errors, protocol, records
from adapter.kafka.framing import FrameDecoder, FrameTooLarge, frame
from adapter.kafka.versions import (
    API_VERSIONS,
    CREATE_TOPICS,
    FETCH,
    IMPLEMENTED,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    Api,
)
from mapping.core.records import StoredRecord
from mapping.topic.topic_config import TopicConfig
from tests.support.kafka import Record, encode_batch, encode_stored


def test_frames_split_across_reads_come_out_whole_and_in_order() -> None:
    payloads = [b"a" * n for n in (0, 1, 5, 1000)]
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(max_bytes=2000)
    out: list[bytes] = []
    for i in range(0, len(stream), 3):
        out += decoder.feed(stream[i : i + 3])
    assert out == payloads
    assert decoder.buffered == 0


def test_a_frame_above_the_limit_is_refused_before_it_is_buffered() -> None:
    decoder = FrameDecoder(max_bytes=100)
    with pytest.raises(FrameTooLarge):
        decoder.feed(struct.pack(">i", 101))
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(struct.pack(">i", -1))


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(1, 50))
def test_framing_round_trip(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(max_bytes=1000)
    out: list[bytes] = []
    for i in range(0, len(stream), chunk):
        out += decoder.feed(stream[i : i + chunk])
    assert out == payloads


def _api_versions_request(version: int, correlation_id: int = 9) -> bytes:
    body = API_VERSIONS.request[version](client_software_name="test", client_software_version="1.0")
    return protocol.encode_request(API_VERSIONS, version, body, correlation_id, "client-1")[4:]


@pytest.mark.parametrize("version", range(API_VERSIONS.min_version, API_VERSIONS.max_version + 1))
def test_api_versions_lists_exactly_what_is_implemented(version: int) -> None:
    request = protocol.parse_request(_api_versions_request(version))
    assert (request.version, request.correlation_id, request.client_id) == (version, 9, "client-1")
    reply = protocol.encode_response(request, asyncio.run(api_versions.handle(None, request)))
    # ApiVersions' response header is v0 in every version (no tagged fields)
    decoded = API_VERSIONS.response.decode(reply[4:], version=version, header=True)
    assert decoded.header.correlation_id == 9
    assert decoded.error_code == errors.NONE
    listed = {(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys}
    assert listed == {(a.key, a.min_version, a.max_version) for a in IMPLEMENTED.values()}


def test_an_unsupported_api_versions_version_gets_v0s_reply_with_unsupported_version() -> None:
    data = struct.pack(">hhi", API_VERSIONS.key, 99, 41) + b"\x00\x00junk"
    request = protocol.parse_request(data)
    assert request.error == errors.UNSUPPORTED_VERSION
    reply = protocol.error_response(request)
    assert reply is not None
    decoded = API_VERSIONS.response.decode(reply[4:], version=0, header=True)
    assert decoded.header.correlation_id == 41
    assert decoded.error_code == errors.UNSUPPORTED_VERSION
    assert {a.api_key for a in decoded.api_keys} == set(IMPLEMENTED)


def test_a_flexible_request_header_with_tagged_fields_is_read() -> None:
    body = METADATA.request[12](topics=None, allow_auto_topic_creation=False)
    data = protocol.encode_request(METADATA, 12, body, 3, "c")[4:]
    request = protocol.parse_request(data)
    assert METADATA.flexible(12) and request.body.topics is None
    assert request.correlation_id == 3


def test_unknown_api_keys_and_short_frames_close_the_connection() -> None:
    with pytest.raises(protocol.CloseConnection):
        protocol.parse_request(struct.pack(">hhi", 999, 0, 1))
    with pytest.raises(protocol.CloseConnection):
        protocol.parse_request(b"\x00\x00\x00")


# Kafka 3.9's validVersions (clients/src/main/resources/common/message/*.json at the 3.9
# tag) of the APIs the pod implements: the pod serves each from its floor (DESIGN, versions)
KAFKA_3_9 = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 8: (0, 9), 9: (0, 9), 10: (0, 6),
    11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 5), 16: (0, 5), 17: (0, 1),
    18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5), 23: (0, 4), 24: (0, 5),
    25: (0, 4), 26: (0, 4), 28: (0, 4), 32: (0, 4), 33: (0, 2), 36: (0, 2), 37: (0, 3),
    42: (0, 2), 44: (0, 1), 47: (0, 0), 60: (0, 1), 65: (0, 0), 66: (0, 1), 68: (0, 0),
    69: (0, 0),
    50: (0, 0), 51: (0, 0),  # users' SCRAM credentials
    29: (0, 3), 30: (0, 3), 31: (0, 3),  # ACLs
    48: (0, 1), 49: (0, 1),  # client quotas
    35: (0, 4), 61: (0, 0), 75: (0, 0),  # log dirs, producers, topic partitions
}  # fmt: skip
# KIP-932's share group APIs, which Kafka 3.9 did not serve, as Kafka 4.2 serves them: the
# heartbeat, describe, fetch and acknowledge from v1 (v0 was 4.0's early access), the
# offsets admin APIs from v0
KIP_932 = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 90: (0, 1), 91: (0, 0), 92: (0, 0)}


def test_every_version_kafka_3_9_served_is_served() -> None:
    assert set(IMPLEMENTED) == set(KAFKA_3_9) | set(KIP_932)
    for key, api in IMPLEMENTED.items():
        low, high = {**KAFKA_3_9, **KIP_932}[key]
        assert api.min_version == low, api.name
        assert all(api.supports(v) for v in range(low, high + 1)), api.name


@pytest.mark.parametrize(
    ("api", "version"),
    [(PRODUCE, 12), (FETCH, 18), (LIST_OFFSETS, 10), (CREATE_TOPICS, 8), (METADATA, -1)],
)
def test_a_version_outside_the_served_range_closes_the_connection(api: Api, version: int) -> None:
    """kafka-go's CreateTopics v0 was once answered with an empty response, which reads as
    success: a version the pod does not serve closes the connection, as Kafka does."""
    with pytest.raises(protocol.CloseConnection, match=f"{api.name} v{version} is not served"):
        protocol.parse_request(struct.pack(">hhih", api.key, version, 5, -1) + b"\x00\x00")


def test_failures_are_answered_only_where_the_response_carries_an_error_code() -> None:
    """An empty Produce or CreateTopics response says every topic succeeded: none is given
    (the connection closes); Fetch v7+ and Metadata-less APIs with an error code get one."""
    request = protocol.Request(PRODUCE, 9, 1, None, None, errors.INVALID_REQUEST)
    assert protocol.error_response(request) is None
    request = protocol.Request(CREATE_TOPICS, 7, 1, None, None, errors.INVALID_REQUEST)
    assert protocol.error_response(request) is None
    request = protocol.Request(FETCH, 4, 1, None, None, errors.INVALID_REQUEST)
    assert protocol.error_response(request) is None  # Fetch's error code is v7+
    request = protocol.Request(FETCH, 12, 1, None, None, errors.INVALID_REQUEST)
    reply = protocol.error_response(request)
    assert reply is not None
    decoded = FETCH.response.decode(reply[4:], version=12, header=True)
    assert decoded.error_code == errors.INVALID_REQUEST


def test_a_truncated_body_is_answered_invalid_request() -> None:
    data = _api_versions_request(3)
    request = protocol.parse_request(data[:-3])
    assert request.error == errors.INVALID_REQUEST
    reply = protocol.error_response(request)
    assert reply is not None
    decoded = API_VERSIONS.response.decode(reply[4:], version=3, header=True)
    assert decoded.error_code == errors.INVALID_REQUEST


@given(st.binary(max_size=200))
def test_random_frames_either_parse_or_close(data: bytes) -> None:
    try:
        request = protocol.parse_request(data)
    except protocol.CloseConnection:
        return
    if request.error:
        protocol.error_response(request)  # must not raise


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_record_batches_round_trip_in_every_codec(codec: int) -> None:
    sent = [
        Record(b"k", b"v" * 100, 1700000000000, [("h", b"x"), ("n", None)]),
        Record(None, None, 1700000000001, []),
        Record(b"", b"", 1700000000002, []),
    ]
    data = encode_batch(sent, compression=codec, producer_id=7, producer_epoch=1, base_sequence=4)
    (batch,) = records.decode_batches(data)
    assert batch.records == [(r.key, r.value, r.timestamp, r.headers) for r in sent]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 4)


def test_a_bad_crc_or_a_truncated_batch_is_corrupt() -> None:
    data = bytearray(encode_batch([Record(b"k", b"v", 1, [])]))
    with pytest.raises(records.CorruptBatch):
        records.decode_batches(bytes(data[:-1]))
    data[-1] ^= 0xFF
    with pytest.raises(records.CorruptBatch):
        records.decode_batches(bytes(data))


def test_fetch_batches_carry_the_pods_offsets_with_gaps() -> None:
    from aiokafka.record.memory_records import MemoryRecords

    stored = [
        StoredRecord(5000, 1, b"a", b"1", []),
        StoredRecord(7000, 2, None, None, [("h", b"v")]),
        StoredRecord(7000 + (1 << 31) + 1, 3, b"c", b"3", []),
    ]
    memory = MemoryRecords(encode_stored(stored))
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    assert seen == [(s.offset, s.timestamp, s.key, s.value, s.headers) for s in stored]


@pytest.mark.parametrize(
    "record",
    [
        (b"k", b"v", 5, []),
        (None, b"v", 5, []),
        (b"k", None, 5, []),
        (None, None, 5, []),
        (b"k", b"v", 5, [("a", b"x"), ("b", None)]),
        (None, b"v", 5, [("a", b"x")]),
    ],
)
def test_produce_arguments_are_record_items_for_every_record_shape(record: tuple) -> None:
    from mapping.core.records import append_args, record_items

    key, value, timestamp, headers = record
    lead, items = record_items(*record)
    args = append_args([record, record])
    if headers or value is None:
        assert args == [len(items), lead, *items] * 2
    elif key is None:  # the short forms kafka/produce.lua expands to the same fields
        assert args == [-1, value, timestamp] * 2
    else:
        assert args == [-2, key, value, timestamp] * 2


BITS = 12


def _entry(offset: int, *fields: bytes) -> list:
    return [b"%d-%d" % (offset >> BITS, offset & ((1 << BITS) - 1)), list(fields)]


# a topic with every config at its default: uncompressed CreateTime batches
PLAIN = TopicConfig("t", 1, 1, 1)

# one entry of every layout a log holds: Kafka key + value, null key, tombstone, V1, headers
# (and a null header value), both null, an entry without the trailing ``n`` field
LAYOUTS = [
    _entry(5000, b"key", b"k", b"value", b"v1", b"ts", b"9", b"create_ts", b"11", b"n", b"1"),
    _entry(5001, b"value", b"v2", b"ts", b"9", b"create_ts", b"11", b"null", b"key", b"n", b"2"),
    _entry(5002, b"key", b"k3", b"ts", b"9", b"create_ts", b"12", b"null", b"value", b"n", b"3"),
    _entry(9000, b"key", b"k4", b"value", b"v4", b"ts", b"8"),
    _entry(
        9001,
        b"key",
        b"k5",
        b"value",
        b"v5",
        b"ts",
        b"9",
        b"create_ts",
        b"13",
        b"h:a",
        b"x",
        b"hn:b",
        b"",
        b"n",
        b"5",
    ),  # fmt: skip
    _entry(9002, b"ts", b"9", b"create_ts", b"14", b"null", b"key value", b"n", b"6"),
    _entry(9003 + (1 << 31), b"key", b"k7", b"value", b"v7", b"ts", b"9", b"create_ts", b"15"),
]


def _fetched(batches: list[bytes]) -> list[tuple]:
    from aiokafka.record.memory_records import MemoryRecords

    memory = MemoryRecords(b"".join(batches))
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return seen


def test_fetch_encodes_every_entry_layout_as_entry_record_reads_it() -> None:
    from adapter.kafka.fetch_reads import encode_entries
    from mapping.core.records import entry_record

    batches, taken, _, done, _ = encode_entries(LAYOUTS, BITS, 1 << 40, 1 << 20, True, PLAIN)
    assert (taken, done) == (len(LAYOUTS), False)
    assert len(batches) == 2  # the last offset is past one batch's delta range
    expected = [tuple(entry_record(i, f, BITS)) for i, f in LAYOUTS]
    assert _fetched(batches) == expected
    assert expected[4][4] == [("a", b"x"), ("b", None)]
    assert expected[5][2:4] == (None, None)


# entries of a log whose layouts change from one to the next: the walk's fast path for
# the common plain records must hand over to the general one and back within a batch
_MIXED_LAYOUTS = [fields for _, fields in LAYOUTS[:6]] + [
    # a transactional null-key record: a batch of its producer's records
    [b"value", b"t", b"ts", b"9", b"create_ts", b"16", b"null", b"key", b"pid", b"7",
     b"pe", b"0", b"n", b"8"],
    # a plain record whose names are not the fast path's at the fast path's places
    [b"value", b"v", b"ts", b"9", b"h:x", b"1", b"null", b"key", b"n", b"9"],
]  # fmt: skip


@settings(deadline=None)  # its first example imports the Fetch modules
@given(
    st.lists(
        st.tuples(st.integers(0, len(_MIXED_LAYOUTS) - 1), st.integers(1, 1500)),
        min_size=1,
        max_size=30,
    )
)
def test_fetch_encodes_mixed_layouts_as_entry_record_reads_them(picks: list[tuple]) -> None:
    from adapter.kafka.fetch_reads import encode_entries
    from mapping.core.records import entry_record

    # BITS (12) is above the walk's table of sequences (mapping.core.codec.MAX_SEQUENCE_BITS,
    # 11): sequences from 2,048 on take its int() path
    entries, offset = [], 5 << BITS
    for layout, gap in picks:
        offset += gap
        ms, sequence = offset >> BITS, offset & ((1 << BITS) - 1)
        entries.append([b"%d-%d" % (ms, sequence), list(_MIXED_LAYOUTS[layout])])
    batches, taken, _, _, _ = encode_entries(entries, BITS, 1 << 40, 1 << 20, True, PLAIN)
    assert taken == len(entries)
    expected = [tuple(entry_record(i, f, BITS)) for i, f in entries]
    assert _fetched(batches) == expected


def test_fetch_stops_at_the_high_watermark_and_the_byte_budget() -> None:
    from adapter.kafka.fetch_reads import encode_entries
    from mapping.partition.record_walk import RECORD_OVERHEAD

    batches, taken, _, done, _ = encode_entries(LAYOUTS, BITS, 9000, 1 << 20, True, PLAIN)
    assert (taken, done) == (4, True)
    assert [r[0] for r in _fetched(batches)] == [5000, 5001, 5002, 9000]
    first_two = 2 + 1 + 2 + 2 * RECORD_OVERHEAD  # k + v1, v2
    batches, taken, used, done, _ = encode_entries(
        LAYOUTS, BITS, 1 << 40, first_two + 1, True, PLAIN
    )
    assert (taken, used, done) == (2, first_two, True)
    # the first entry comes whatever its size only when asked to
    assert encode_entries(LAYOUTS, BITS, 1 << 40, 1, True, PLAIN)[1:3] == (1, 3 + RECORD_OVERHEAD)
    assert encode_entries(LAYOUTS, BITS, 1 << 40, 1, False, PLAIN)[:2] == ([], 0)


@pytest.mark.parametrize("value", ["nohost", "host:", ":9093", "host:port", "host:70000"])
def test_a_malformed_advertised_listener_is_a_configuration_error(value: str) -> None:
    from adapter.kafka.listener import advertised
    from adapter.settings import Settings
    from mapping.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="HOST:PORT"):
        advertised(Settings(kafka_advertised_listener=value), 9093)


def test_the_advertised_address() -> None:
    from adapter.kafka.listener import advertised
    from adapter.settings import Settings

    assert advertised(Settings(kafka_advertised_listener="[::1]:19093"), 1) == ("::1", 19093)
    assert advertised(Settings(host="127.0.0.1"), 40000) == ("127.0.0.1", 40000)
    assert advertised(Settings(host="127.0.0.1", kafka_host="10.0.0.5"), 9) == ("10.0.0.5", 9)
