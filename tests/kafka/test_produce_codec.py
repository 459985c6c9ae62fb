"""Produce's hand-written codec (adapter/kafka/produce_codec.py) against kafka-python's
generic messages, every served version: the same fields read from any request, the same
bytes written for any response, and a truncated request refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kafka import produce_codec, protocol
from adapter.kafka.versions import PRODUCE

VERSIONS = range(PRODUCE.min_version, PRODUCE.max_version + 1)
Request, Response = PRODUCE.request, PRODUCE.response

_names = st.text(min_size=1, max_size=12)
_messages = st.none() | st.text(max_size=20)
_int16 = st.integers(-(2**15), 2**15 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_topics = st.lists(
    st.tuples(_names, st.lists(st.tuples(_int32, st.none() | st.binary(max_size=300)), max_size=4)),
    max_size=3,
)


def _request_frame(version: int, body: tuple, client_id: str | None) -> bytes:
    transactional_id, acks, timeout_ms, topics = body
    message = Request[version](
        transactional_id=transactional_id if version >= 3 else None,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            Request.TopicProduceData(
                name=name,
                partition_data=[
                    Request.TopicProduceData.PartitionProduceData(index=index, records=records)
                    for index, records in parts
                ],
            )
            for name, parts in topics
        ],
    )
    return protocol.encode_request(PRODUCE, version, message, 7, client_id)[4:]  # type: ignore[arg-type]


def _fields(body: Any) -> tuple:
    return (
        body.transactional_id,
        body.acks,
        body.timeout_ms,
        [
            (
                t.name,
                [
                    (p.index, None if p.records is None else bytes(p.records))
                    for p in t.partition_data
                ],
            )
            for t in body.topic_data
        ],
    )


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    transactional_id=_messages,
    acks=_int16,
    timeout_ms=_int32,
    topics=_topics,
    client_id=st.none() | st.text(max_size=10),
)
def test_requests_read_as_kafka_python_reads_them(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: list,
    client_id: str | None,
) -> None:
    frame = _request_frame(version, (transactional_id, acks, timeout_ms, topics), client_id)
    theirs = Request.decode(frame, version=version, header=True)
    client, ours = produce_codec.decode_request(frame, version)
    assert client == theirs.header.client_id
    assert _fields(ours) == _fields(theirs)
    parsed = protocol.parse_request(frame)  # the pod's own parse takes this codec
    assert isinstance(parsed.body, produce_codec.ProduceBody)
    assert (parsed.client_id, _fields(parsed.body)) == (client, _fields(ours))


@settings(max_examples=100, deadline=None)
@given(version=st.sampled_from(VERSIONS), topics=_topics, cut=st.integers(1, 400))
def test_a_truncated_request_is_refused(version: int, topics: list, cut: int) -> None:
    frame = _request_frame(version, ("txn", 1, 5000, topics), "client")
    cut = min(cut, len(frame) - 8)  # into the body: the header's fixed part stays
    with pytest.raises(ValueError):
        produce_codec.decode_request(frame[:-cut], version)
    assert protocol.parse_request(frame[:-cut]).error  # INVALID_REQUEST, answered by closing


_partitions = st.lists(
    st.tuples(
        _int32, _int16, _int64, _int64, _int64,
        st.lists(st.tuples(_int32, _messages), max_size=2), _messages,
    ),
    max_size=4,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    topics=st.lists(st.tuples(_names, _partitions), max_size=3),
    throttle=_int32,
    correlation_id=_int32,
)
def test_responses_are_kafka_pythons_bytes(
    version: int, topics: list, throttle: int, correlation_id: int
) -> None:
    ours = produce_codec.ProduceAnswer(
        [
            produce_codec.TopicAnswer(name, [
                produce_codec.PartitionAnswer(
                    index, code, base, append, start,
                    [produce_codec.RecordError(i, m) for i, m in errors], message,
                )
                for index, code, base, append, start, errors, message in parts
            ])
            for name, parts in topics
        ],
        throttle,
    )  # fmt: skip
    P = Response.TopicProduceResponse.PartitionProduceResponse
    E = P.BatchIndexAndErrorMessage
    theirs = Response[version](
        responses=[
            Response.TopicProduceResponse(name=name, partition_responses=[
                P(index=index, error_code=code, base_offset=base, log_append_time_ms=append,
                  log_start_offset=start, error_message=message,
                  record_errors=[E(batch_index=i, batch_index_error_message=m) for i, m in errors])
                for index, code, base, append, start, errors, message in parts
            ])
            for name, parts in topics
        ],
        throttle_time_ms=throttle,
    )  # fmt: skip
    request = protocol.Request(PRODUCE, version, correlation_id, None, None)
    expected = protocol.encode_response(request, theirs)
    assert ours.frame(version, correlation_id) == expected
    assert protocol.encode_response(request, ours) == expected
