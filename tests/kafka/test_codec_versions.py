"""Fetch v13-17, ListOffsets v8-9 and OffsetForLeaderEpoch v0-4 on the wire: frames built by
hand, field by field, from Kafka 3.9's message definitions (clients/src/main/resources/
common/message/FetchRequest.json, FetchResponse.json, ListOffsetsRequest.json,
ListOffsetsResponse.json, OffsetForLeaderEpochRequest.json, ...Response.json),
tagged fields included, read by the pod's core (protocol.parse_request) and written by it
(protocol.encode_response) byte for byte. Pure: no pod."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest

from adapter.kafka import errors, fetch, list_offsets, offset_for_leader_epoch, protocol
from adapter.kafka.fetch_reads import Answer, Wanted
from adapter.kafka.versions import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
OTHER_ID = uuid.UUID("f0e1d2c3-b4a5-4697-8877-665544332211")
DIRECTORY_ID = uuid.UUID("0a0b0c0d-0e0f-4011-8213-141516171819")


# The protocol's primitive types (Kafka's "Protocol Primitive Types", KIP-482 for the
# compact and tagged forms)
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def cstr(s: str | None) -> bytes:
    """COMPACT_(NULLABLE_)STRING: length + 1 (0: null), then the UTF-8 bytes."""
    if s is None:
        return b"\x00"
    data = s.encode()
    return uvarint(len(data) + 1) + data


def carr(*items: bytes) -> bytes:
    """COMPACT_ARRAY of already encoded items."""
    return uvarint(len(items) + 1) + b"".join(items)


def tags(*fields: tuple[int, bytes]) -> bytes:
    """A TAGGED_FIELDS section: count, then each tag, its size and its bytes, by tag."""
    return uvarint(len(fields)) + b"".join(uvarint(t) + uvarint(len(d)) + d for t, d in fields)


def request_header(api_key: int, version: int, correlation_id: int, client_id: str) -> bytes:
    """Request header v2: the client id is a NULLABLE_STRING (int16 length), then tags."""
    client = i16(len(client_id)) + client_id.encode()
    return i16(api_key) + i16(version) + i32(correlation_id) + client + tags()


def response_header(correlation_id: int) -> bytes:
    """Response header v1: correlation id, then tags."""
    return i32(correlation_id) + tags()


# --- Fetch requests -------------------------------------------------------------------


def fetch_request(version: int, *, tagged: bool) -> bytes:
    """A consumer's Fetch of ``version`` (13-17): one partition of TOPIC_ID at offset 42, and
    OTHER_ID's partitions 1 and 2 forgotten. ``tagged``: with every tagged field the
    version has (ClusterId; ReplicaState v15+; ReplicaDirectoryId v17+)."""
    partition = i32(3) + i32(-1) + i64(42) + i32(-1) + i64(-1) + i32(1 << 20)
    partition += tags((0, DIRECTORY_ID.bytes)) if tagged and version >= 17 else tags()
    body = b"" if version >= 15 else i32(-1)  # ReplicaId: v0-14
    body += i32(500) + i32(1) + i32(52_428_800) + i8(1) + i32(0) + i32(-1)
    body += carr(TOPIC_ID.bytes + carr(partition) + tags())  # Topics
    body += carr(OTHER_ID.bytes + carr(i32(1), i32(2)) + tags())  # ForgottenTopicsData
    body += cstr("rack-a")  # RackId
    top: list[tuple[int, bytes]] = []
    if tagged:
        top.append((0, cstr("cluster-1")))  # ClusterId
        if version >= 15:  # ReplicaState: a consumer's -1 / -1
            top.append((1, i32(-1) + i64(-1) + tags()))
    return request_header(FETCH.key, version, 77, "golden") + body + tags(*top)


@pytest.mark.parametrize("version", range(13, 18))
@pytest.mark.parametrize("tagged", [False, True])
def test_fetch_requests_by_topic_id_are_read_field_for_field(version: int, tagged: bool) -> None:
    request = protocol.parse_request(fetch_request(version, tagged=tagged))
    assert request.error == errors.NONE and request.version == version
    assert (request.correlation_id, request.client_id) == (77, "golden")
    body = request.body
    assert (body.max_wait_ms, body.min_bytes, body.max_bytes) == (500, 1, 52_428_800)
    assert (body.isolation_level, body.session_id, body.session_epoch) == (1, 0, -1)
    (topic,) = body.topics
    assert topic.topic_id == TOPIC_ID
    (p,) = topic.partitions
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (3, 42, 1 << 20)
    assert (p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset) == (-1, -1, -1)
    (forgotten,) = body.forgotten_topics_data
    assert (forgotten.topic_id, forgotten.partitions) == (OTHER_ID, [1, 2])
    assert body.rack_id == "rack-a"
    assert body.cluster_id == ("cluster-1" if tagged else None)
    if version <= 14:
        assert body.replica_id == -1
    else:  # ReplicaId moved into the tagged ReplicaState (KIP-903)
        state = body.replica_state
        assert (state.replica_id, state.replica_epoch) == (-1, -1) if tagged else state is None
    if version >= 17:
        assert p.replica_directory_id == (DIRECTORY_ID if tagged else None)


@pytest.mark.parametrize("version", range(13, 18))
def test_fetch_requests_by_topic_id_are_written_as_built_by_hand(version: int) -> None:
    """The codec's own frame of the request it read is the hand-built one (a client's view
    of the core: the raw test client sends these)."""
    hand = fetch_request(version, tagged=True)
    body = protocol.parse_request(hand).body
    assert protocol.encode_request(FETCH, version, body, 77, "golden")[4:] == hand


# --- Fetch responses ------------------------------------------------------------------


def fetch_response_body(version: int, records: bytes) -> bytes:
    """The answer to fetch_request: TOPIC_ID's partition 3 with ``records`` at high
    watermark 100 (log start 7, last stable offset 90, no aborted list), then OTHER_ID's
    partition 0 UNKNOWN_TOPIC_ID (its offsets -1), session 0."""
    known = i32(3) + i16(0) + i64(100) + i64(90) + i64(7)
    known += b"\x00"  # AbortedTransactions: null (compact nullable array)
    known += i32(-1)  # PreferredReadReplica
    known += uvarint(len(records) + 1) + records + tags()  # Records: COMPACT_RECORDS
    unknown = i32(0) + i16(errors.UNKNOWN_TOPIC_ID) + i64(-1) + i64(-1) + i64(-1)
    unknown += b"\x00" + i32(-1) + uvarint(1) + tags()
    body = i32(0) + i16(0) + i32(0)  # ThrottleTimeMs, ErrorCode, SessionId
    body += carr(TOPIC_ID.bytes + carr(known) + tags(), OTHER_ID.bytes + carr(unknown) + tags())
    # NodeEndpoints (v16+, tag 0) is left out when empty, as Kafka's generated code writes it
    return body + tags()


@pytest.mark.parametrize("version", range(13, 18))
def test_fetch_responses_by_topic_id_are_written_as_built_by_hand(version: int) -> None:
    """fetch.py's answer names topics by id, an unknown id answered UNKNOWN_TOPIC_ID."""
    request = protocol.Request(FETCH, version, 77, "golden", None)
    records = b"\x01\x02\x03"
    answered = [
        (
            Wanted("t", 3, 42, 1 << 20, topic_id=TOPIC_ID),
            Answer(errors.NONE, 100, 7, records, 90, 99),
        ),
        (
            Wanted(None, 0, 0, 1 << 20, topic_id=OTHER_ID),
            Answer(errors.UNKNOWN_TOPIC_ID),
        ),
    ]
    reply = fetch._response(request, errors.NONE, 0, answered)
    frame = protocol.encode_response(request, reply)
    hand = response_header(77) + fetch_response_body(version, records)
    assert frame == i32(len(hand)) + hand


def node_endpoint(node_id: int, host: str, port: int, rack: str | None) -> bytes:
    return i32(node_id) + cstr(host) + i32(port) + cstr(rack) + tags()


def test_fetch_v16_node_endpoints_and_current_leader_are_read_and_written() -> None:
    """KIP-951's leader discovery: CurrentLeader (tag 1 of a partition) and NodeEndpoints
    (tag 0 of the response), read from and written as the hand-built frame."""
    partition = i32(0) + i16(errors.NOT_LEADER_OR_FOLLOWER) + i64(-1) + i64(-1) + i64(-1)
    partition += b"\x00" + i32(-1) + uvarint(1)
    partition += tags((1, i32(2) + i32(5) + tags()))  # CurrentLeader: node 2, epoch 5
    body = i32(0) + i16(0) + i32(0) + carr(TOPIC_ID.bytes + carr(partition) + tags())
    endpoints = carr(node_endpoint(2, "pod-2", 9093, None), node_endpoint(3, "pod-3", 9094, "r"))
    hand = response_header(5) + body + tags((0, endpoints))
    decoded = FETCH.response.decode(hand, version=16, header=True)
    (part,) = decoded.responses[0].partitions
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (2, 5)
    assert [(n.node_id, n.host, n.port, n.rack) for n in decoded.node_endpoints] == [
        (2, "pod-2", 9093, None),
        (3, "pod-3", 9094, "r"),
    ]
    # (kafka-python's message: the pod's own answer, fetch_codec.py, writes no tagged field)
    response = FETCH.response
    data = response.FetchableTopicResponse.PartitionData
    built = response[16](
        throttle_time_ms=0, error_code=0, session_id=0,
        responses=[response.FetchableTopicResponse(version=16, topic_id=TOPIC_ID, partitions=[data(
            version=16, partition_index=0, error_code=errors.NOT_LEADER_OR_FOLLOWER,
            high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
            current_leader=data.LeaderIdAndEpoch(leader_id=2, leader_epoch=5),
            aborted_transactions=None, preferred_read_replica=-1, records=b"",
        )])],
        node_endpoints=[
            response.NodeEndpoint(node_id=2, host="pod-2", port=9093, rack=None),
            response.NodeEndpoint(node_id=3, host="pod-3", port=9094, rack="r"),
        ],
    )  # fmt: skip
    request = protocol.Request(FETCH, 16, 5, "c", None)
    assert protocol.encode_response(request, built)[4:] == hand


def test_fetch_v12_is_unchanged_by_name() -> None:
    """The versions by name stay as they were: v12 names the topic."""
    request = protocol.Request(FETCH, 12, 77, "golden", None)
    answered = [(Wanted("ab", 1, 0, 100), Answer(errors.NONE, 5, 0, b"", 5, 4))]
    frame = protocol.encode_response(request, fetch._response(request, errors.NONE, 9, answered))
    partition = i32(1) + i16(0) + i64(5) + i64(5) + i64(0) + b"\x00" + i32(-1) + uvarint(1)
    body = i32(0) + i16(0) + i32(9) + carr(cstr("ab") + carr(partition + tags()) + tags())
    hand = response_header(77) + body + tags()
    assert frame == i32(len(hand)) + hand


# --- ListOffsets ----------------------------------------------------------------------


def list_offsets_request(version: int, timestamp: int) -> bytes:
    partition = i32(0) + i32(-1) + i64(timestamp) + tags()
    topic = cstr("orders") + carr(partition) + tags()
    body = i32(-1) + i8(1) + carr(topic) + tags()  # ReplicaId, IsolationLevel, Topics
    return request_header(LIST_OFFSETS.key, version, 12, "golden") + body


@pytest.mark.parametrize(("version", "timestamp"), [(8, -4), (9, -5), (9, 1_700_000_000_000)])
def test_list_offsets_v8_v9_requests_are_read_and_written(version: int, timestamp: int) -> None:
    hand = list_offsets_request(version, timestamp)
    request = protocol.parse_request(hand)
    assert request.error == errors.NONE and request.version == version
    body = request.body
    assert (body.replica_id, body.isolation_level) == (-1, 1)
    (topic,) = body.topics
    (p,) = topic.partitions
    assert (topic.name, p.partition_index, p.current_leader_epoch) == ("orders", 0, -1)
    assert p.timestamp == timestamp
    assert protocol.encode_request(LIST_OFFSETS, version, body, 12, "golden")[4:] == hand


@pytest.mark.parametrize("version", [8, 9])
def test_list_offsets_v8_v9_responses_are_written_as_built_by_hand(version: int) -> None:
    """Earliest local (-4) answered at the log start, latest tiered (-5) with -1 / -1 and
    leader epoch -1 (list_offsets.py's answers)."""
    reply = list_offsets.Response[version](
        throttle_time_ms=0,
        topics=[
            list_offsets.TopicResponse(
                name="orders",
                partitions=[
                    list_offsets.PartitionResponse(
                        partition_index=0, error_code=0, timestamp=-1, offset=1024, leader_epoch=0
                    ),
                    list_offsets.PartitionResponse(
                        partition_index=1, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1
                    ),
                ],
            )
        ],
    )
    request = protocol.Request(LIST_OFFSETS, version, 12, "golden", None)
    frame = protocol.encode_response(request, reply)
    partitions = carr(
        i32(0) + i16(0) + i64(-1) + i64(1024) + i32(0) + tags(),
        i32(1) + i16(0) + i64(-1) + i64(-1) + i32(-1) + tags(),
    )
    hand = response_header(12) + i32(0) + carr(cstr("orders") + partitions + tags()) + tags()
    assert frame == i32(len(hand)) + hand
    decoded: Any = LIST_OFFSETS.response.decode(hand, version=version, header=True)
    assert [(p.offset, p.leader_epoch) for p in decoded.topics[0].partitions] == [
        (1024, 0),
        (-1, -1),
    ]


# --- OffsetForLeaderEpoch (v0-4: Kafka 3.9's; kafka-python's schema starts at v2) -------


def offset_for_leader_epoch_request(version: int) -> bytes:
    """A consumer's OffsetForLeaderEpoch: topic "t", partition 3, current leader epoch 8
    (v2+), the epoch asked for 7; ReplicaId -1 (v3+). v4 is flexible (header v2)."""
    if version >= 4:
        partition = i32(3) + i32(8) + i32(7) + tags()
        body = i32(-1) + carr(cstr("t") + carr(partition) + tags()) + tags()
        return request_header(23, version, 5, "golden") + body
    partition = i32(3) + (i32(8) if version >= 2 else b"") + i32(7)
    body = (i32(-1) if version >= 3 else b"") + i32(1) + i16(1) + b"t" + i32(1) + partition
    return i16(23) + i16(version) + i32(5) + i16(6) + b"golden" + body


@pytest.mark.parametrize("version", range(5))
def test_offset_for_leader_epoch_requests_are_read_field_for_field(version: int) -> None:
    request = protocol.parse_request(offset_for_leader_epoch_request(version))
    assert request.error == errors.NONE and request.version == version
    (topic,) = request.body.topics
    (partition,) = topic.partitions
    assert (topic.topic, partition.partition, partition.leader_epoch) == ("t", 3, 7)
    if version >= 2:
        assert partition.current_leader_epoch == 8


@pytest.mark.parametrize("version", range(5))
def test_offset_for_leader_epoch_responses_are_written_as_built_by_hand(version: int) -> None:
    """Epoch 7 of partition 3 ended at 1000 (the leader epoch answered v1+)."""
    request = protocol.Request(OFFSET_FOR_LEADER_EPOCH, version, 5, "golden", None)
    result = offset_for_leader_epoch.TopicResult
    reply = offset_for_leader_epoch.Response[version](
        throttle_time_ms=0,
        topics=[result(topic="t", partitions=[offset_for_leader_epoch._answer(3, 0, 7, 1000)])],
    )
    epoch = i32(7) if version >= 1 else b""
    if version >= 4:
        partition = i16(0) + i32(3) + epoch + i64(1000) + tags()
        hand = response_header(5) + i32(0) + carr(cstr("t") + carr(partition) + tags()) + tags()
    else:
        throttle = i32(0) if version >= 2 else b""
        partition = i16(0) + i32(3) + epoch + i64(1000)
        hand = i32(5) + throttle + i32(1) + i16(1) + b"t" + i32(1) + partition
    assert protocol.encode_response(request, reply) == i32(len(hand)) + hand
