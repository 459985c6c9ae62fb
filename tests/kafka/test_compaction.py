"""A compacted topic through the Kafka front door: records without a key are refused with
INVALID_RECORD and Kafka's message; after compaction a confluent-kafka consumer from the
start reads exactly the latest record of every key and the unexpired tombstones, in offset
order, and a group's committed offset that compaction removed still resumes at the next
record; records of the active segment, and what only they supersede, are never removed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from adapter.kafka import errors
from adapter.kafka.versions import PRODUCE
from mapping.core import codec
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.compaction import (
    Record,
    compact_now,
    compacted_topic,
    kafka_keeps,
    roll_segment,
    scripted_records,
)
from tests.support.kafka import (
    KAFKA_PODS_PREFIX,
    RawKafka,
    encode_batch,
    partition_reply,
    produce_body,
)
from tests.support.kafka import Record as KafkaRecord
from tests.support.pods import Pod


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(KAFKA_PODS_PREFIX), client)
    client.close()


def _produce(pod: Pod, topic: str, records: list[Record]) -> list[int]:
    offsets: list[int] = []
    failures: list[KafkaError] = []

    def delivered(err: KafkaError | None, message: object) -> None:
        if err is not None:
            failures.append(err)
        else:
            offsets.append(message.offset())  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": pod.bootstrap, "linger.ms": 5})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(10) == 0
    assert failures == []
    return offsets


def _consumer(pod: Pod, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": pod.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def _read_all(consumer: Consumer, expected: int) -> list[tuple[int, Record]]:
    found: list[tuple[int, Record]] = []
    for _ in range(200):
        if len(found) >= expected:
            break
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            found.append((message.offset(), (message.key(), message.value())))
    return found


def test_a_consumer_reads_exactly_what_compaction_keeps(
    kafka_pods: tuple[Pod, Pod], target: CliTarget, topic: str
) -> None:
    a, b = kafka_pods
    compacted_topic(target.client, target.keys, topic, min_cleanable_dirty_ratio="0.1")
    records = scripted_records()
    written = list(zip(_produce(a, topic, records), records, strict=True))
    written += roll_segment(lambda rolled: _produce(a, topic, rolled))
    kept = kafka_keeps(written)
    # a group committed a position compaction is about to remove (k3's first version's)
    removed = next(o for o, (k, _) in written if k == b"k3")
    group = f"g-{uuid.uuid4().hex[:6]}"
    committer = _consumer(b, group)
    committer.commit(offsets=[TopicPartition(topic, 0, removed)], asynchronous=False)
    committer.close()

    assert "removed=" in compact_now(target, topic)

    reader = _consumer(b, f"g-{uuid.uuid4().hex[:6]}")
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        assert _read_all(reader, len(kept)) == kept
        assert reader.poll(0.3) is None  # nothing more
    finally:
        reader.close()

    resumed = _consumer(a, group)
    resumed.assign([TopicPartition(topic, 0)])  # from the committed offset
    try:
        after = [(o, r) for o, r in kept if o >= removed]
        assert _read_all(resumed, len(after)) == after
    finally:
        resumed.close()


def test_records_without_a_key_are_refused_with_kafkas_message(
    kafka_pods: tuple[Pod, Pod], target: CliTarget, topic: str
) -> None:
    a, _ = kafka_pods
    compacted_topic(target.client, target.keys, topic)
    pairs = [(b"k", b"kept"), (None, b"no key"), (b"k2", b"v"), (None, b"again")]
    data = encode_batch([KafkaRecord(k, v, 1_700_000_000_000, []) for k, v in pairs])
    with RawKafka(a.kafka_port) as raw:
        reply = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, data)))
    message = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
    assert reply.error_code == errors.INVALID_RECORD
    assert reply.error_message == message
    assert [(e.batch_index, e.batch_index_error_message) for e in reply.record_errors] == [
        (1, message),
        (3, message),
    ]
    # nothing of the batch was written; the connection and the topic go on
    producer = Producer({"bootstrap.servers": a.bootstrap})
    failures: list[KafkaError] = []
    producer.produce(topic, value=b"keyless", partition=0,
                     on_delivery=lambda err, _m: failures.append(err))  # fmt: skip
    producer.flush(10)
    assert [f.code() for f in failures] == [KafkaError.INVALID_RECORD]
    assert _produce(a, topic, [(b"k", b"v")]) == [_first_offset(target, topic)]


def _first_offset(target: CliTarget, topic: str) -> int:
    entries = target.client.xrange(target.keys.partition(topic, 0).log)
    assert len(entries) == 1
    return codec.offset_of(entries[0][0])


def test_compaction_never_touches_the_active_segment(
    kafka_pods: tuple[Pod, Pod], target: CliTarget, topic: str
) -> None:
    """The second version of every key is in the active segment: compaction removes
    nothing, a consumer reads both versions; once that segment rolls, the first go."""
    a, b = kafka_pods
    compacted_topic(target.client, target.keys, topic, min_cleanable_dirty_ratio="0.01")
    first = [(f"k{k}".encode(), b"first") for k in range(5)]
    written = list(zip(_produce(a, topic, first), first, strict=True))
    written += roll_segment(lambda rolled: _produce(a, topic, rolled))
    second = [(k, b"second") for k, _ in first]
    written += list(zip(_produce(a, topic, second), second, strict=True))
    assert " removed=0 " in compact_now(target, topic)
    reader = _consumer(b, f"g-{uuid.uuid4().hex[:6]}")
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        assert _read_all(reader, len(written)) == written
    finally:
        reader.close()

    written += roll_segment(lambda rolled: _produce(a, topic, rolled))
    assert " removed=5 " in compact_now(target, topic)
    reader = _consumer(b, f"g-{uuid.uuid4().hex[:6]}")
    reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        assert _read_all(reader, len(written) - 5) == written[5:]
    finally:
        reader.close()
