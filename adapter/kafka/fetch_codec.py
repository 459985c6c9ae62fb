"""Fetch's response, v0-17, written by hand: every consumer's answer, twice a second per idle
consumer.

kafka-python's generic messages build an object per partition and encode it field by field
through its schema: about 4-6 µs per partition of a Fetch (bench.pod_cost's "answer" row).
librdkafka names every partition it fetches in every Fetch, without a session, so a
consumer of many partitions cost the pod that much per partition twice a second even when
nothing happened. This writes the same bytes (tests/kafka/test_fetch_codec.py checks them
against kafka-python's for every version), and its objects have kafka-python's attribute
names, so a test reads either. The request is still read by kafka-python: that is
a fraction of a microsecond per partition.

FetchResponse.json: ThrottleTimeMs v1+, ErrorCode and SessionId v7+, Responses[Topic (v0-12)
or TopicId (v13+), Partitions[PartitionIndex ErrorCode HighWatermark, LastStableOffset v4+,
LogStartOffset v5+, AbortedTransactions[ProducerId FirstOffset] v4+ (nullable),
PreferredReadReplica v11+, Records (nullable)]]. From v12 on (flexible, KIP-482): compact
strings, arrays and bytes, and tagged fields after each structure. None is written: the
tagged DivergingEpoch, CurrentLeader and SnapshotId (v12+) and NodeEndpoints (v16+) concern
replicas and moved leaders, which a pod never answers (adapter/kafka/fetch.py).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from adapter.kafka.primitives import count as _count
from adapter.kafka.primitives import string as _string

FLEXIBLE_SINCE = 12
TOPIC_IDS_SINCE = 13

_INT32 = struct.Struct(">i")
_ABORTED = struct.Struct(">qq")  # ProducerId FirstOffset
# a partition's fixed head: PartitionIndex ErrorCode HighWatermark, LastStableOffset v4+,
# LogStartOffset v5+
_HEAD_V0 = struct.Struct(">ihq")
_HEAD_V4 = struct.Struct(">ihqq")
_HEAD_V5 = struct.Struct(">ihqqq")
# the top: ThrottleTimeMs v1+, ErrorCode and SessionId v7+
_TOP_V1 = struct.Struct(">i")
_TOP_V7 = struct.Struct(">ihi")


@dataclass(slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


@dataclass(slots=True)
class PartitionData:
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[AbortedTransaction] | None = None
    preferred_read_replica: int = -1
    records: bytes | None = b""


@dataclass(slots=True)
class TopicResponse:
    topic: str | None  # v0-12
    topic_id: uuid.UUID | None  # v13+
    partitions: list[PartitionData]


@dataclass(slots=True)
class FetchAnswer:
    responses: list[TopicResponse]
    error_code: int = 0
    session_id: int = 0
    throttle_time_ms: int = 0

    def frame(self, version: int, correlation_id: int) -> bytes:
        """The response frame: size, header, this answer in ``version``."""
        return encode_response(self, version, correlation_id)


def encode_response(answer: FetchAnswer, version: int, correlation_id: int) -> bytes:
    """The frame of ``answer`` in ``version``: what kafka-python encodes, byte for byte."""
    compact = version >= FLEXIBLE_SINCE
    tags = b"\x00" if compact else b""
    # out[0]: the frame's size, once known (one join copies the records once)
    out = [b"", _INT32.pack(correlation_id), tags]  # response header v1 in flexible versions
    if version >= 7:
        out.append(_TOP_V7.pack(answer.throttle_time_ms, answer.error_code, answer.session_id))
    elif version >= 1:
        out.append(_TOP_V1.pack(answer.throttle_time_ms))
    out.append(_count(len(answer.responses), compact))
    head = _HEAD_V5 if version >= 5 else _HEAD_V4 if version >= 4 else _HEAD_V0
    for topic in answer.responses:
        if version >= TOPIC_IDS_SINCE:
            out.append((topic.topic_id or uuid.UUID(int=0)).bytes)
        else:
            out.append(_string(topic.topic, compact))
        out.append(_count(len(topic.partitions), compact))
        for p in topic.partitions:
            if version >= 5:
                out.append(head.pack(p.partition_index, p.error_code, p.high_watermark,
                                     p.last_stable_offset, p.log_start_offset))  # fmt: skip
            elif version >= 4:
                out.append(head.pack(p.partition_index, p.error_code, p.high_watermark,
                                     p.last_stable_offset))  # fmt: skip
            else:
                out.append(head.pack(p.partition_index, p.error_code, p.high_watermark))
            if version >= 4:
                aborted = p.aborted_transactions
                out.append(_count(None if aborted is None else len(aborted), compact))
                for a in aborted or ():
                    out.append(_ABORTED.pack(a.producer_id, a.first_offset))
                    if compact:
                        out.append(tags)
            if version >= 11:
                out.append(_INT32.pack(p.preferred_read_replica))
            records = p.records
            out.append(_count(None if records is None else len(records), compact))
            if records:
                out.append(records)
            if compact:
                out.append(tags)
        if compact:
            out.append(tags)
    out.append(tags)
    out[0] = _INT32.pack(sum(map(len, out)))
    return b"".join(out)
