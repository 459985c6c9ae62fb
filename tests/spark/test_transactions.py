"""The Spark source and transactions (docs/transactions.md): a task never returns a
transaction marker nor a record of an aborted transaction, and the driver's end positions
stop below the last stable offset (an open transaction's records are not read until it
ends). The executor's read is called as Spark calls it, without a SparkSession; then once
with one, on the records of a real Kafka client's transactions through a pod."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from confluent_kafka import Producer

from mapping.core.keys import Keys
from spark_connector.offsets import RangePartition, end_positions
from spark_connector.options import parse_options
from spark_connector.records import read_partition, source_schema
from tests.support.pods import RF1, Pod
from tests.support.topic_writer import TopicWriter

PID = 4242


def _read(url: str, topic: str, start: int, end: int) -> list[str]:
    options = parse_options({"redis.url": url, "topic": topic, "fetchSize": "2"})
    planned = RangePartition(0, start, end, sequence_bits=10)
    return [
        value
        for batch in read_partition(options, source_schema(), planned)
        for value in batch.column("value").to_pylist()
    ]


def _end(url: str, topic: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return end_positions(client, Keys(), topic, 1)[0]
    finally:
        client.close()


def test_the_source_reads_committed_records_only(
    spark_redis_url: str, writer: TopicWriter, spark_topic: str
) -> None:
    (first,) = writer.produce(spark_topic, 0, [(b"k", b"a")])
    assert writer.txn_add(spark_topic, 0, PID, 0) == 0
    status, open_first, _ = writer.txn_append(spark_topic, 0, PID, 0, 0, [(b"k", b"t1")])
    assert status == 0
    writer.produce(spark_topic, 0, [(b"k", b"b")])
    # open: the end stops at the transaction's first record
    assert _end(spark_redis_url, spark_topic) == open_first
    assert _read(spark_redis_url, spark_topic, first, open_first) == ["a"]
    writer.txn_end(spark_topic, 0, PID, 0, commit=True)
    # an aborted transaction, then a plain record
    assert writer.txn_add(spark_topic, 0, PID, 0) == 0
    writer.txn_append(spark_topic, 0, PID, 0, 1, [(b"k", b"x1"), (b"k", b"x2"), (b"k", b"x3")])
    abort = writer.txn_end(spark_topic, 0, PID, 0, commit=False)
    assert abort is not None
    (last,) = writer.produce(spark_topic, 0, [(b"k", b"c")])
    end = _end(spark_redis_url, spark_topic)
    assert end == last + 1
    assert _read(spark_redis_url, spark_topic, first, end) == ["a", "t1", "b", "c"]


@pytest.mark.spark
def test_spark_never_reads_aborted_records_nor_past_an_open_transaction(
    spark: Any, spark_redis_url: str, start_pod: Callable[..., Pod], spark_topic: str
) -> None:
    """confluent-kafka's transactional producer through a pod: an aborted transaction's
    records never show in a Spark batch read, and while a transaction is open the read stops
    before its first record (the plain record behind it waits too), until it commits."""
    pod = start_pod(spark_redis_url, *RF1)
    client = {"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000}
    plain = Producer(client)
    producer = Producer({**client, "transactional.id": f"spark-{spark_topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(3):
        producer.produce(spark_topic, value=b"aborted-%d" % n, partition=0)
    assert producer.flush(15) == 0
    producer.abort_transaction(30)
    plain.produce(spark_topic, value=b"plain-1", partition=0)
    assert plain.flush(15) == 0
    producer.begin_transaction()
    producer.produce(spark_topic, value=b"open", partition=0)
    assert producer.flush(15) == 0
    plain.produce(spark_topic, value=b"plain-2", partition=0)
    assert plain.flush(15) == 0

    def values() -> list[str]:
        df = (
            spark.read.format("redis-topics")
            .option("redis.url", spark_redis_url)
            .option("topic", spark_topic)
            .load()
        )
        return [r.value for r in df.where("partition = 0").orderBy("offset").collect()]

    assert values() == ["plain-1"]
    producer.commit_transaction(30)
    assert values() == ["plain-1", "open", "plain-2"]
