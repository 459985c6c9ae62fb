"""kafka-python pinned to old brokers sends what old programs send, against two pods (seen
in a pod's debug log): ``api_version=(0, 10, 0)``: ApiVersions v0, Metadata v1, Produce v2
with magic 1, Fetch v2, ListOffsets v0, FindCoordinator v0, JoinGroup/SyncGroup/LeaveGroup
v0, OffsetCommit v2, OffsetFetch v1; ``(0, 9)``: the same but Metadata v0, Produce v1 and
Fetch v1 with magic 0; ``(0, 8, 2)``: Metadata v0, Produce v0, Fetch v0, ListOffsets v0,
FindCoordinator v0, OffsetCommit v1, OffsetFetch v1 (no group management: partitions
assigned by hand)."""

from __future__ import annotations

import uuid

import pytest

from adapter.kafka.versions import FETCH
from tests.support.kafka import RawKafka, fetch_body, fetched
from tests.support.pods import Pod

STAMP = 1_700_000_000_000
COUNT = 5


@pytest.mark.slow
@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 9), (0, 8, 2)])
def test_kafka_python_with_an_old_api_version(
    kafka_pods: tuple[Pod, Pod], topic: str, api_version: tuple[int, ...], compression: str | None
) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    a, b = kafka_pods
    producer = KafkaProducer(
        bootstrap_servers=a.bootstrap, api_version=api_version, compression_type=compression,
        request_timeout_ms=10000, max_block_ms=15000, linger_ms=50,
    )  # fmt: skip
    try:
        sent = [
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0,
                          timestamp_ms=STAMP + i)
            for i in range(COUNT)
        ]  # fmt: skip
        producer.flush(15)
        offsets = [future.get(15).offset for future in sent]
    finally:
        producer.close(5)
    assert offsets == sorted(offsets) and len(set(offsets)) == COUNT

    group = f"old-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    config = dict(
        bootstrap_servers=b.bootstrap, api_version=api_version, group_id=group,
        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000,
        request_timeout_ms=11000, session_timeout_ms=10000, heartbeat_interval_ms=1000,
        fetch_max_wait_ms=100,
    )  # fmt: skip
    if api_version >= (0, 9):  # group management: JoinGroup v0 and the rest
        consumer = KafkaConsumer(topic, **config)
    else:
        consumer = KafkaConsumer(**config)
        consumer.assign([tp])
    try:
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == COUNT:
                break
        assert [(m.offset, m.key, m.value) for m in got] == [
            (o, b"k%d" % i, b"v%d" % i) for i, o in enumerate(offsets)
        ]
        consumer.commit()
        assert consumer.committed(tp) == offsets[-1] + 1
    finally:
        consumer.close()

    # what the format kept: magic 1 carries the producer's timestamp, magic 0 none (the
    # records show their append time)
    with RawKafka(a.kafka_port) as raw:
        _, records = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
    stamps = [r.timestamp for r in records]
    if api_version >= (0, 10, 0):
        assert stamps == [STAMP + i for i in range(COUNT)]
    else:
        assert all(s > STAMP + COUNT for s in stamps)
