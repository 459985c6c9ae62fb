"""Topic configs enforced where records are written and read (adapter/kafka/produce.py,
adapter/kafka/fetch.py, V1 PRODUCE, the Spark sink's appender): max.message.bytes,
message.timestamp.type, the timestamp bounds, compression.type, and min.insync.replicas
altered after creation. Configs are written into the topic hash before any pod has seen the
topic (mapping.topic.topics.alter_configs_sync), so no pod holds older settings."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
)

from adapter.client import Client
from adapter.client.client import RequestFailed
from adapter.kafka import errors
from adapter.kafka.fetch_reads import encode_entries
from adapter.kafka.records import LOG_APPEND_TIME_ATTRIBUTE
from adapter.kafka.versions import FETCH, PRODUCE
from mapping.core.keys import Keys
from mapping.core.records import record_batch_bytes
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import ConfigValue, alter_configs_sync, ensure_topic_sync
from spark_connector.appender import _check_size
from spark_connector.sink_options import SinkWriteError
from spark_connector.sink_records import Record
from tests.support.kafka import (
    KAFKA_PODS_PREFIX,
    RawKafka,
    batch,
    fetch_body,
    fetched,
    partition_reply,
    produce_body,
)
from tests.support.pods import Pod
from tests.support.waiting import wait_until

Start = Callable[..., Pod]
HOUR_MS = 3_600_000


def _topic_with(
    redis_url: str, prefix: str, topic: str, configs: dict[str, ConfigValue], *,
    replication_factor: int = 1, min_insync_replicas: int = 1,
) -> None:  # fmt: skip
    """Create one-partition topic ``topic`` with these configs (hash fields) set."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = Keys(prefix)
        ensure_topic_sync(client, keys, topic, 1, replication_factor, min_insync_replicas)
        if configs:
            alter_configs_sync(client, keys, topic, configs)
    finally:
        client.close()


def _producer(pod: Pod, **extra: Any) -> Producer:
    return Producer(
        {
            "bootstrap.servers": pod.bootstrap,
            "linger.ms": 0,
            "message.timeout.ms": 10_000,
            **extra,
        }
    )


def _deliver(producer: Producer, topic: str, value: bytes, **extra: Any) -> tuple[Any, Message]:
    """(error or None, message) of one produced record, as its delivery report gives them."""
    reports: list[tuple[Any, Message]] = []
    producer.produce(
        topic, value, partition=0, on_delivery=lambda e, m: reports.append((e, m)), **extra
    )
    producer.flush(15)
    assert len(reports) == 1
    return reports[0]


@pytest.fixture
def consumer(kafka_pods: tuple[Pod, Pod]) -> Iterator[Consumer]:
    reader = Consumer(
        {
            "bootstrap.servers": kafka_pods[1].bootstrap,
            "group.id": f"g{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    yield reader
    reader.close()


def _consume(consumer: Consumer, topic: str, count: int) -> list[Message]:
    consumer.subscribe([topic])
    got: list[Message] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    assert len(got) == count
    return got


# --- max.message.bytes -----------------------------------------------------------------------


def test_a_batch_over_max_message_bytes_is_refused_and_the_next_one_goes(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"max_message_bytes": 1000})
    producer = _producer(kafka_pods[0])
    error, _ = _deliver(producer, topic, b"x" * 2000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    error, message = _deliver(producer, topic, b"small")
    assert error is None and message.offset() >= 0


def test_max_message_bytes_measures_the_record_batch(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """The limit is the RecordBatch's size, as Kafka measures it: one byte over is refused,
    exactly at the limit is taken; nothing is stored for the refused batch."""
    exact = batch([b"v" * 500])
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"max_message_bytes": len(exact)})
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        over = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"v" * 501]))))
        assert over.error_code == errors.MESSAGE_TOO_LARGE
        part, got = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert got == []
        fits = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, exact)))
        assert (fits.error_code, fits.log_append_time_ms) == (errors.NONE, -1)


def test_v1_produce_refuses_a_record_over_max_message_bytes(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    limit = record_batch_bytes(b"k", b"v" * 100, [])
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"max_message_bytes": limit})
    with Client("127.0.0.1", kafka_pods[0].port, timeout=10) as v1:
        with pytest.raises(RequestFailed, match="record too large") as refused:
            v1.produce(topic, "k", "v" * 101)
        assert refused.value.code == "BAD_REQUEST"
        # the connection stays usable; a record exactly at the limit goes
        produced = v1.produce(topic, "k", "v" * 100)
        assert [v for _, v in v1.consume(topic, produced.partition, 0).records] == [b"v" * 100]


def test_the_spark_sink_refuses_a_record_over_max_message_bytes() -> None:
    config = TopicConfig("t", 1, 1, 1, overrides=(("max_message_bytes", "200"),))
    _check_size(config, Record(None, None, b"k", b"v" * 100, [("h", b"x")]))
    with pytest.raises(SinkWriteError, match="record too large for t"):
        _check_size(config, Record(None, None, b"k", b"v" * 200))


def test_fetch_returns_a_first_batch_larger_than_max_bytes(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """KIP-74: a record larger than the Fetch's limits still comes when it is the first."""
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"max_message_bytes": 1 << 21})
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        big = b"b" * (1 << 20)
        sent = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch([big, b"s"]))))
        assert sent.error_code == errors.NONE
        body = fetch_body(topic, 0, 0)
        body.max_bytes = 1000
        body.topics[0].partitions[0].partition_max_bytes = 1000
        part, got = fetched(raw.call(FETCH, 12, body))
        assert part.error_code == errors.NONE
        assert [r.value for r in got] == [big]


# --- message.timestamp.type ------------------------------------------------------------------


def test_log_append_time_topic_stamps_records_with_their_append_time(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str, consumer: Consumer
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"message_timestamp_type": "LogAppendTime"})
    producer = _producer(kafka_pods[0])
    before = int(time.time() * 1000)
    reports = [_deliver(producer, topic, b"v%d" % i, timestamp=1_000 + i) for i in range(2)]
    after = int(time.time() * 1000)
    stamps = []
    for error, message in reports:
        assert error is None
        kind, stamp = message.timestamp()
        # the delivery report carries the broker's append time, not the producer's
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before - 5000 <= stamp <= after + 5000
        stamps.append(stamp)
    got = _consume(consumer, topic, 2)
    assert [m.timestamp() for m in got] == [(TIMESTAMP_LOG_APPEND_TIME, s) for s in stamps]
    # stored without the producer's timestamp: V1 and Spark readers see the same time
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(Keys(KAFKA_PODS_PREFIX).partition(topic, 0).log)
    finally:
        client.close()
    assert [int(fields[b"ts"]) for _, fields in entries] == stamps
    assert all(b"create_ts" not in fields and b"create_dt" not in fields for _, fields in entries)


def test_create_time_topic_keeps_the_producers_timestamp(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str, consumer: Consumer
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {})
    stamp = int(time.time() * 1000) - 60_000
    error, message = _deliver(_producer(kafka_pods[0]), topic, b"v", timestamp=stamp)
    assert error is None
    assert message.timestamp()[0] == TIMESTAMP_CREATE_TIME
    (got,) = _consume(consumer, topic, 1)
    assert got.timestamp() == (TIMESTAMP_CREATE_TIME, stamp)


def _entry(offset: int, stamp: bytes, value: bytes) -> list:
    return [b"%d-%d" % (offset >> 10, offset & 1023), [b"value", value, b"ts", stamp, b"n", b"1"]]


def test_fetch_batches_of_a_log_append_time_topic_hold_one_append_time_each() -> None:
    config = TopicConfig("t", 1, 1, 1, overrides=(("message_timestamp_type", "LogAppendTime"),))
    entries = [_entry(5000, b"700", b"a"), _entry(5001, b"700", b"b"), _entry(6000, b"900", b"c")]
    # a record stored before the topic was switched to LogAppendTime: its append time too
    entries.append(
        [b"6-1", [b"key", b"k", b"value", b"d", b"ts", b"900", b"create_ts", b"5", b"n", b"4"]]
    )
    batches, taken, _, _, _ = encode_entries(entries, 10, 1 << 40, 1 << 20, True, config)
    assert (len(batches), taken) == (2, 4)
    seen = []
    memory = MemoryRecords(b"".join(batches))
    while memory.has_next():
        stored = memory.next_batch()
        assert stored.validate_crc()
        assert stored.attributes & LOG_APPEND_TIME_ATTRIBUTE
        assert stored.max_timestamp == stored.first_timestamp
        seen += [(r.offset, r.value, stored.max_timestamp) for r in stored]
    assert seen == [(5000, b"a", 700), (5001, b"b", 700), (6000, b"c", 900), (6145, b"d", 900)]


# --- timestamp bounds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configs", "shift_ms"),
    [
        ({"message_timestamp_before_max_ms": 60_000}, -HOUR_MS),
        ({"message_timestamp_after_max_ms": 60_000}, HOUR_MS),
        ({"message_timestamp_difference_max_ms": 60_000}, -HOUR_MS),
        ({"message_timestamp_difference_max_ms": 60_000}, HOUR_MS),
    ],
)
def test_a_timestamp_out_of_bounds_is_invalid(
    redis_url: str,
    kafka_pods: tuple[Pod, Pod],
    topic: str,
    configs: dict[str, ConfigValue],
    shift_ms: int,
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, configs)
    producer = _producer(kafka_pods[0])
    now = int(time.time() * 1000)
    error, _ = _deliver(producer, topic, b"far", timestamp=now + shift_ms)
    assert error is not None and error.code() == KafkaError.INVALID_TIMESTAMP
    error, _ = _deliver(producer, topic, b"near", timestamp=now)
    assert error is None


def test_timestamp_bounds_do_not_apply_with_log_append_time(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    configs: dict[str, ConfigValue] = {
        "message_timestamp_type": "LogAppendTime",
        "message_timestamp_before_max_ms": 60_000,
    }
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, configs)
    error, message = _deliver(_producer(kafka_pods[0]), topic, b"old", timestamp=1_000)
    assert error is None and message.timestamp()[0] == TIMESTAMP_LOG_APPEND_TIME


# --- compression.type ------------------------------------------------------------------------


@pytest.mark.parametrize(("codec", "number"), [("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4)])
def test_fetch_compresses_with_the_topics_codec(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str, codec: str, number: int
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"compression_type": codec})
    values = [b"value %d " % i * 20 for i in range(50)]
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        sent = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch(values))))
        assert sent.error_code == errors.NONE
        response = raw.call(FETCH, 12, fetch_body(topic, 0, 0))
    data = bytes(response.responses[0].partitions[0].records)
    memory = MemoryRecords(data)
    got: list[bytes] = []
    while memory.has_next():
        stored = memory.next_batch()
        assert stored.compression_type == number
        got += [r.value for r in stored]
    assert got == values
    assert len(data) < sum(map(len, values))


def test_a_compressed_topic_reads_in_confluent_kafka(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str, consumer: Consumer
) -> None:
    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"compression_type": "zstd"})
    producer = _producer(kafka_pods[0])
    for i in range(3):
        producer.produce(topic, b"v%d" % i, partition=0)
    producer.flush(15)
    assert [m.value() for m in _consume(consumer, topic, 3)] == [b"v0", b"v1", b"v2"]


# --- min.insync.replicas altered -------------------------------------------------------------


def test_min_insync_replicas_altered_takes_effect_for_acks_all(
    redis_url: str, start_pod: Start, topic: str
) -> None:
    """RF 2, no replicator: the follower leaves the ISR, so acks=all goes with min ISR 1 and
    is refused once min ISR is altered to 2 (every pod reads the topic again), for V1
    (REPLICATION_TIMEOUT) and Kafka (NOT_ENOUGH_REPLICAS_AFTER_APPEND: the pod appends
    before it waits, so the record is in the log)."""
    prefix = f"enf{uuid.uuid4().hex[:10]}"
    pod = start_pod(
        redis_url, "--key-prefix", prefix, "--no-replicator",
        "--acks-timeout-ms", "500", "--replica-lag-max-ms", "100",
    )  # fmt: skip
    _topic_with(redis_url, prefix, topic, {}, replication_factor=2, min_insync_replicas=1)

    def v1_acks_all() -> str:
        with pod.client() as v1:
            response = v1.request("PRODUCE", f"{topic} k:v acks=all")
            return "OK" if response.ok else response.code

    assert v1_acks_all() == "OK"
    _topic_with(redis_url, prefix, topic, {"min_insync_replicas": 2})
    wait_until(lambda: v1_acks_all() == "REPLICATION_TIMEOUT", timeout=10)
    error, _ = _deliver(_producer(pod, acks="all", retries=0), topic, b"v")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    _topic_with(redis_url, prefix, topic, {"min_insync_replicas": 1})
    wait_until(lambda: v1_acks_all() == "OK", timeout=10)


def test_log_append_time_in_kafka_python_and_aiokafka(
    redis_url: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """The Java-like clients read the timestamp type from the batch attributes and the
    time from the batch's max timestamp (kafka-python) or each record (aiokafka): both see
    the append time, as the producer's metadata does."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATopicPartition
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTopicPartition

    _topic_with(redis_url, KAFKA_PODS_PREFIX, topic, {"message_timestamp_type": "LogAppendTime"})
    a, b = kafka_pods
    producer = KafkaProducer(bootstrap_servers=a.bootstrap, request_timeout_ms=5000)
    sent = producer.send(topic, value=b"v", partition=0, timestamp_ms=1_000).get(10)
    producer.close()
    assert sent.timestamp > 1_000  # the broker's log append time, not the producer's

    consumer = KafkaConsumer(
        bootstrap_servers=b.bootstrap, request_timeout_ms=5000, fetch_max_wait_ms=100,
        consumer_timeout_ms=5000,
    )  # fmt: skip
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    message = next(consumer)
    consumer.close()
    assert (message.timestamp_type, message.timestamp) == (1, sent.timestamp)

    async def aiokafka_read() -> tuple[int, int]:
        reader = AIOKafkaConsumer(bootstrap_servers=b.bootstrap, request_timeout_ms=5000)
        await reader.start()
        try:
            atp = ATopicPartition(topic, 0)
            reader.assign([atp])
            await reader.seek_to_beginning(atp)
            got = await asyncio.wait_for(reader.getone(), 10)
            return got.timestamp_type, got.timestamp
        finally:
            await reader.stop()

    assert asyncio.run(aiokafka_read()) == (1, sent.timestamp)
