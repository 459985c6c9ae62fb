"""Produce's request and response, v0-11, coded by hand: the hot path of every producer.

kafka-python's generic messages (adapter/kafka/versions.py) build an object per partition
and encode field by field through its schema: with librdkafka's small batches (many
producers over many partitions) that cost the pod about 40 µs per partition of a Produce,
more than appending the records. These functions read and write the same bytes
(tests/kafka/test_produce_codec.py checks both against kafka-python's for every version),
with attribute names as kafka-python's, so a handler reads either.

Request (ProduceRequest.json): [TransactionalId v3+] Acks TimeoutMs TopicData[Name
PartitionData[Index Records]]; response (ProduceResponse.json): Responses[Name
PartitionResponses[Index ErrorCode BaseOffset, LogAppendTimeMs v2+, LogStartOffset v5+,
RecordErrors[BatchIndex BatchIndexErrorMessage] and ErrorMessage v8+]], ThrottleTimeMs v1+.
From v9 on (flexible, KIP-482): compact strings, arrays and bytes, tagged fields after each
structure (none written; the tagged CurrentLeader and NodeEndpoints of v10+ stay unset, as
they were), request header v2 and response header v1.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from adapter.kafka.primitives import count as _count
from adapter.kafka.primitives import string as _string

FLEXIBLE_SINCE = 9

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api key, version, correlation id
_ACKS_TIMEOUT = struct.Struct(">hi")
# a partition's answer: Index ErrorCode BaseOffset, LogAppendTimeMs v2+, LogStartOffset v5+
_PARTITION_V0 = struct.Struct(">ihq")
_PARTITION_V2 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")


class Truncated(ValueError):
    """The request ends before its fields do (or a length is out of range)."""


@dataclass(slots=True)
class PartitionData:
    index: int
    records: bytes | None


@dataclass(slots=True)
class TopicData:
    name: str
    partition_data: list[PartitionData]


@dataclass(slots=True)
class ProduceBody:
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


@dataclass(slots=True)
class RecordError:
    batch_index: int
    batch_index_error_message: str | None = None


@dataclass(slots=True)
class PartitionAnswer:
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[RecordError] = field(default_factory=list)
    error_message: str | None = None


@dataclass(slots=True)
class TopicAnswer:
    name: str
    partition_responses: list[PartitionAnswer]


@dataclass(slots=True)
class ProduceAnswer:
    responses: list[TopicAnswer]
    throttle_time_ms: int = 0

    def frame(self, version: int, correlation_id: int) -> bytes:
        """The response frame: size, header, this answer in ``version``."""
        return encode_response(self, version, correlation_id)


def decode_request(data: bytes | memoryview, version: int) -> tuple[str | None, ProduceBody]:
    """(client id, body) of a Produce request frame (without its size prefix) of
    ``version``; raises ValueError (Truncated, a bad UTF-8 string) when it is malformed."""
    data = bytes(data)
    try:
        return _decode(data, version)
    except (IndexError, struct.error) as exc:  # a fixed-size field past the end
        raise Truncated(str(exc)) from None


def _decode(data: bytes, version: int) -> tuple[str | None, ProduceBody]:
    compact = version >= FLEXIBLE_SINCE
    client_id, at = _string_at(data, _HEADER.size, False)  # the header's: never compact
    if compact:
        at = _skip_tags(data, at)
    transactional_id = None
    if version >= 3:
        transactional_id, at = _string_at(data, at, compact)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(data, at)
    at += _ACKS_TIMEOUT.size
    topics: list[TopicData] = []
    count, at = _count_at(data, at, compact)
    for _ in range(count):
        name, at = _string_at(data, at, compact)
        parts: list[PartitionData] = []
        partitions, at = _count_at(data, at, compact)
        for _ in range(partitions):
            (index,) = _INT32.unpack_from(data, at)
            if compact:
                size, at = _uvarint_at(data, at + 4)
                size -= 1
            else:
                (size,) = _INT32.unpack_from(data, at + 4)
                at += 8
            records = None
            if size >= 0:
                records = data[at : at + size]
                if len(records) != size:
                    raise Truncated(f"records of {size} bytes at {at} of {len(data)}")
                at += size
            parts.append(PartitionData(index, records))
            if compact:
                at = _skip_tags(data, at)
        if compact:
            at = _skip_tags(data, at)
        topics.append(TopicData(name or "", parts))
    if compact:
        _skip_tags(data, at)
    return client_id, ProduceBody(transactional_id, acks, timeout_ms, topics)


def _uvarint_at(data: bytes, at: int) -> tuple[int, int]:
    byte = data[at]
    if byte < 0x80:  # the common case: one byte
        return byte, at + 1
    value, shift = byte & 0x7F, 7
    while True:
        at += 1
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at + 1
        shift += 7
        if shift > 28:
            raise Truncated("a varint longer than 5 bytes")


def _string_at(data: bytes, at: int, compact: bool) -> tuple[str | None, int]:
    if compact:
        size, at = _uvarint_at(data, at)
        size -= 1
    else:
        (size,) = _INT16.unpack_from(data, at)
        at += 2
    if size < 0:
        return None, at
    if at + size > len(data):
        raise Truncated(f"a string of {size} bytes at {at} of {len(data)}")
    return data[at : at + size].decode(), at + size


def _count_at(data: bytes, at: int, compact: bool) -> tuple[int, int]:
    """An array's length (null: none) and where its items start."""
    if compact:
        count, at = _uvarint_at(data, at)
        return max(count - 1, 0), at
    (count,) = _INT32.unpack_from(data, at)
    return max(count, 0), at + 4


def _skip_tags(data: bytes, at: int) -> int:
    tags, at = _uvarint_at(data, at)
    for _ in range(tags):
        _, at = _uvarint_at(data, at)  # the tag
        size, at = _uvarint_at(data, at)
        at += size
        if at > len(data):
            raise Truncated(f"a tagged field past the end ({len(data)} bytes)")
    return at


def encode_response(answer: ProduceAnswer, version: int, correlation_id: int) -> bytes:
    """The frame of ``answer`` in ``version``: what kafka-python encodes, byte for byte."""
    compact = version >= FLEXIBLE_SINCE
    tags = b"\x00" if compact else b""
    out = [_INT32.pack(correlation_id), tags, _count(len(answer.responses), compact)]
    for topic in answer.responses:
        out += (_string(topic.name, compact), _count(len(topic.partition_responses), compact))
        for p in topic.partition_responses:
            if version >= 5:
                out.append(_PARTITION_V5.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset
                ))  # fmt: skip
            elif version >= 2:
                out.append(
                    _PARTITION_V2.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
                )
            else:
                out.append(_PARTITION_V0.pack(p.index, p.error_code, p.base_offset))
            if version >= 8:
                out.append(_count(len(p.record_errors), compact))
                for error in p.record_errors:
                    out += (
                        _INT32.pack(error.batch_index),
                        _string(error.batch_index_error_message, compact),
                        tags,
                    )
                out.append(_string(p.error_message, compact))
            out.append(tags)
        out.append(tags)
    if version >= 1:
        out.append(_INT32.pack(answer.throttle_time_ms))
    out.append(tags)
    body = b"".join(out)
    return _INT32.pack(len(body)) + body
