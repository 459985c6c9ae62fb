"""Fetch's hand-written answer (adapter/kafka/fetch_codec.py) against kafka-python's generic
message, every served version: the same bytes for any answer, and what a client reads back
from them is what was answered."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kafka import errors, fetch, fetch_codec, protocol
from adapter.kafka.fetch_reads import Answer, Wanted
from adapter.kafka.versions import FETCH

VERSIONS = range(FETCH.min_version, FETCH.max_version + 1)
Response = FETCH.response
Topic = Response.FetchableTopicResponse
Partition = Topic.PartitionData

_int16 = st.integers(-(2**15), 2**15 - 1)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_partitions = st.lists(
    st.tuples(
        _int32, _int16, _int64, _int64, _int64,
        st.none() | st.lists(st.tuples(_int64, _int64), max_size=3),
        _int32,
        st.none() | st.binary(max_size=300),
    ),
    max_size=4,
)  # fmt: skip
_topics = st.lists(st.tuples(st.text(max_size=12), st.uuids(), _partitions), max_size=3)


@settings(max_examples=300, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    topics=_topics,
    top=st.tuples(_int32, _int16, _int32),
    correlation_id=_int32,
)
def test_answers_are_kafka_pythons_bytes(
    version: int, topics: list, top: tuple[int, int, int], correlation_id: int
) -> None:
    throttle, error, session_id = top
    ids = version >= fetch_codec.TOPIC_IDS_SINCE
    ours = fetch_codec.FetchAnswer(
        [
            fetch_codec.TopicResponse(None if ids else name, topic_id if ids else None, [
                fetch_codec.PartitionData(
                    index, code, high, stable, start,
                    None if aborted is None
                    else [fetch_codec.AbortedTransaction(p, f) for p, f in aborted],
                    replica, records,
                )
                for index, code, high, stable, start, aborted, replica, records in parts
            ])
            for name, topic_id, parts in topics
        ],
        error, session_id, throttle,
    )  # fmt: skip
    named = {"topic_id": "t"} if ids else {"topic": "t"}
    theirs = Response[version](
        throttle_time_ms=throttle,
        error_code=error,
        session_id=session_id,
        responses=[
            Topic(version=version, partitions=[
                Partition(
                    version=version, partition_index=index, error_code=code,
                    high_watermark=high, last_stable_offset=stable, log_start_offset=start,
                    aborted_transactions=None if aborted is None else [
                        Partition.AbortedTransaction(producer_id=p, first_offset=f)
                        for p, f in aborted
                    ],
                    preferred_read_replica=replica, records=records,
                )
                for index, code, high, stable, start, aborted, replica, records in parts
            ], **{key: topic_id if ids else name for key in named})
            for name, topic_id, parts in topics
        ],
    )  # fmt: skip
    request = protocol.Request(FETCH, version, correlation_id, None, None)
    expected = protocol.encode_response(request, theirs)
    assert ours.frame(version, correlation_id) == expected
    assert protocol.encode_response(request, ours) == expected


@settings(max_examples=100, deadline=None)
@given(
    version=st.sampled_from(VERSIONS),
    records=st.binary(max_size=64),
    aborted=st.none() | st.lists(st.tuples(_int64, _int64), max_size=2),
)
def test_fetch_answers_read_back_as_answered(
    version: int, records: bytes, aborted: list | None
) -> None:
    """fetch.py's answer, decoded by kafka-python as a client would: every partition's fields
    in the request's version, by name or by id, grouped by topic in the order answered."""
    ids = version >= fetch_codec.TOPIC_IDS_SINCE
    first, second = uuid.uuid4(), uuid.uuid4()
    answered = [
        (Wanted("a", 2, 0, 1 << 20, topic_id=first if ids else None),
         Answer(errors.NONE, 100, 7, records, 90, aborted=aborted)),
        (Wanted("b", 0, 0, 1 << 20, topic_id=second if ids else None),
         Answer(errors.OFFSET_OUT_OF_RANGE, 5, 1)),
        (Wanted("a", 5, 0, 1 << 20, topic_id=first if ids else None),
         Answer(errors.NONE, 8, 0, None, 8)),
    ]  # fmt: skip
    request = protocol.Request(FETCH, version, 41, None, None)
    frame = protocol.encode_response(request, fetch._response(request, errors.NONE, 3, answered))
    decoded = Response.decode(frame[4:], version=version, header=True)
    assert decoded.header.correlation_id == 41
    if version >= 7:
        assert (decoded.error_code, decoded.session_id) == (errors.NONE, 3)
    got = [
        (t.topic_id if ids else t.topic, [
            (p.partition_index, p.error_code, p.high_watermark, bytes(p.records or b""))
            for p in t.partitions
        ])
        for t in decoded.responses
    ]  # fmt: skip
    assert got == [
        (first if ids else "a", [(2, errors.NONE, 100, records), (5, errors.NONE, 8, b"")]),
        (second if ids else "b", [(0, errors.OFFSET_OUT_OF_RANGE, 5, b"")]),
    ]
    (a2, a5), (b0,) = (t.partitions for t in decoded.responses)
    assert b0.records is not None  # an empty record set, never null (librdkafka refuses it)
    if version >= 4:
        assert (a2.last_stable_offset, a5.last_stable_offset) == (90, 8)
        read = a2.aborted_transactions
        assert (None if read is None else [(t.producer_id, t.first_offset) for t in read]) == (
            None if aborted is None else [tuple(t) for t in aborted]
        )
    if version >= 5:
        assert (a2.log_start_offset, b0.log_start_offset) == (7, 1)
