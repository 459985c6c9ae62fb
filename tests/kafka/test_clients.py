"""Real Kafka clients against two pods on one Redis: produce through one, fetch through the
other. confluent-kafka (librdkafka), kafka-python and aiokafka; V1 <-> Kafka both ways."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from adapter.client import Client
from tests.support.pods import Pod

BOUNDED = {"socket.timeout.ms": 5000, "message.timeout.ms": 10000}


def _produce(bootstrap: str, topic: str, records: list[dict], **config: object) -> list:
    """Produce with confluent-kafka; returns the delivered messages in order."""
    producer = Producer({"bootstrap.servers": bootstrap, **BOUNDED, **config})
    delivered: list = []
    failed: list = []

    def report(err: object, msg: object) -> None:
        (failed if err else delivered).append(err or msg)

    for record in records:
        producer.produce(topic, on_delivery=report, **record)
    assert producer.flush(15) == 0
    assert failed == []
    return delivered


def _consume(bootstrap: str, topic: str, partitions: list[int], count: int, **config: object):
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "socket.timeout.ms": 5000,
            **config,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
    finally:
        consumer.close()
    return got


def test_confluent_idempotent_producer_and_consumer_on_two_pods(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    records = [
        {"key": b"user1", "value": b"created", "headers": [("src", b"web"), ("n", None)]},
        {"key": None, "value": b"no key", "partition": 0},
        {"key": b"gone", "value": None, "partition": 0},  # a tombstone
        {"key": b"empty", "value": b"", "partition": 0},
    ]
    delivered = _produce(a.bootstrap, topic, records, acks="all", **{"enable.idempotence": True})
    got = _consume(b.bootstrap, topic, [0, 1, 2], len(records))
    sent = {(m.partition(), m.offset()): m for m in delivered}
    assert {(m.partition(), m.offset()) for m in got} == set(sent)
    for message in got:
        original = sent[(message.partition(), message.offset())]
        assert (message.key(), message.value()) == (original.key(), original.value())
        assert message.timestamp() == original.timestamp()
    by_key = {m.key(): m for m in got}
    assert by_key[b"user1"].headers() == [("src", b"web"), ("n", None)]
    assert by_key[None].value() == b"no key"
    assert by_key[b"gone"].value() is None
    assert by_key[b"empty"].value() == b""


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_compression_codec(kafka_pods: tuple[Pod, Pod], topic: str, codec: str) -> None:
    a, b = kafka_pods
    records = [{"key": b"k%d" % i, "value": b"v%d" % i * 50, "partition": 1} for i in range(200)]
    delivered = _produce(
        a.bootstrap, topic, records, **{"compression.type": codec, "linger.ms": 20}
    )
    got = _consume(b.bootstrap, topic, [1], len(records))
    assert [(m.offset(), m.value()) for m in got] == [(m.offset(), m.value()) for m in delivered]
    offsets = [m.offset() for m in delivered]
    assert offsets == sorted(set(offsets))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_modes(kafka_pods: tuple[Pod, Pod], topic: str, acks: str) -> None:
    a, b = kafka_pods
    records = [{"key": b"k", "value": b"v%d" % i, "partition": 2} for i in range(20)]
    _produce(a.bootstrap, topic, records, acks=acks)
    got = _consume(b.bootstrap, topic, [2], len(records))
    assert [m.value() for m in got] == [r["value"] for r in records]


def test_a_one_mebibyte_value(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, b = kafka_pods
    value = bytes(range(256)) * 4096
    _produce(
        a.bootstrap, topic, [{"key": b"big", "value": value, "partition": 0}],
        **{"message.max.bytes": 2 << 20},
    )  # fmt: skip
    (message,) = _consume(b.bootstrap, topic, [0], 1)
    assert message.value() == value


def test_a_fetch_max_bytes_below_the_partitions_limits(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    # the consumers ask each partition for up to 1 MiB and the response for 64 KiB: the pod
    # reads the partitions in shares of that (adapter/kafka/fetch_reads.py), and every
    # record still comes, once, in order
    a, b = kafka_pods
    records = [
        {"key": None, "value": b"%d-%d-" % (p, i) + b"x" * 200, "partition": p}
        for p in range(3)
        for i in range(1500)
    ]
    delivered = _produce(a.bootstrap, topic, records, **{"linger.ms": 20})
    got = _consume(
        b.bootstrap,
        topic,
        [0, 1, 2],
        len(records),
        **{"fetch.max.bytes": 65536, "message.max.bytes": 65536},
    )
    sent = {p: [(m.offset(), m.value()) for m in delivered if m.partition() == p] for p in range(3)}
    for p in range(3):
        assert [(m.offset(), m.value()) for m in got if m.partition() == p] == sent[p]
    # and kafka-python, whose fetcher keeps what each response held of each partition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=b.bootstrap, request_timeout_ms=5000, fetch_max_wait_ms=100,
        consumer_timeout_ms=5000, fetch_max_bytes=65536,
    )  # fmt: skip
    partitions = [KTopicPartition(topic, p) for p in range(3)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    read = [next(consumer) for _ in range(len(records))]
    consumer.close()
    for p in range(3):
        assert [(m.offset, m.value) for m in read if m.partition == p] == sent[p]


def test_kafka_python_producer_consumer_and_offsets(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    a, b = kafka_pods
    producer = KafkaProducer(
        bootstrap_servers=a.bootstrap, acks="all", request_timeout_ms=5000, max_block_ms=10000
    )
    first = producer.send(topic, key=b"a", value=b"1", headers=[("h", b"v")], partition=0)
    second = producer.send(topic, key=b"b", value=None, partition=0)
    producer.flush(10)
    metadata = [first.get(10), second.get(10)]
    producer.close()

    consumer = KafkaConsumer(
        bootstrap_servers=b.bootstrap, request_timeout_ms=5000, fetch_max_wait_ms=100,
        consumer_timeout_ms=5000,
    )  # fmt: skip
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [next(consumer) for _ in range(2)]
    assert [(m.offset, m.key, m.value, list(m.headers)) for m in got] == [
        (metadata[0].offset, b"a", b"1", [("h", b"v")]),
        (metadata[1].offset, b"b", None, []),
    ]
    assert consumer.beginning_offsets([tp]) == {tp: metadata[0].offset}
    assert consumer.end_offsets([tp]) == {tp: metadata[1].offset + 1}
    found = consumer.offsets_for_times({tp: 0})[tp]
    assert found.offset == metadata[0].offset
    after = consumer.offsets_for_times({tp: int(time.time() * 1000) + 60_000})[tp]
    assert after is None  # nothing appended that late
    consumer.close()


def test_aiokafka_producer_and_consumer(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATopicPartition

    a, b = kafka_pods

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=a.bootstrap, acks="all", enable_idempotence=True,
            request_timeout_ms=5000, compression_type="gzip",
        )  # fmt: skip
        await producer.start()
        try:
            sent = await producer.send_and_wait(
                topic, key=b"a", value=b"1", headers=[("h", b"v")], partition=2
            )
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=b.bootstrap, request_timeout_ms=5000, fetch_max_wait_ms=100
        )
        await consumer.start()
        try:
            tp = ATopicPartition(topic, 2)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            message = await asyncio.wait_for(consumer.getone(), 10)
            assert (message.offset, message.key, message.value) == (sent.offset, b"a", b"1")
            assert list(message.headers) == [("h", b"v")]
            assert await consumer.end_offsets([tp]) == {tp: sent.offset + 1}
        finally:
            await consumer.stop()

    asyncio.run(run())


def test_v1_sees_kafka_records_and_kafka_sees_v1_records(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    kafka_made, no_key, tombstone = _produce(
        a.bootstrap, topic, [
            {"key": b"user1", "value": b"from kafka", "partition": 2},
            {"key": None, "value": b"no key", "partition": 2},
            {"key": b"gone", "value": None, "partition": 2},
        ],
    )  # fmt: skip
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        consumed = v1.consume(topic, 2, 0)
        assert consumed.records == [
            (kafka_made.offset(), b"from kafka"),
            (no_key.offset(), b"no key"),
            (tombstone.offset(), b""),  # V1 shows a null value as empty
        ]
        v1_made = v1.produce(topic, b"user1", b"from v1")  # user1 -> partition 2 of 3
    assert v1_made.partition == 2
    got = _consume(b.bootstrap, topic, [2], 4)
    last = got[-1]
    assert (last.offset(), last.key(), last.value()) == (v1_made.offset, b"user1", b"from v1")
    assert last.headers() is None
    assert last.timestamp()[1] > 0  # its append time
