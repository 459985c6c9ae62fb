"""The "redis-topics" sink through a real local SparkSession against a real redis-server:
batch ``save()``, streaming ``start()``, replays after a failure, and the example pipeline.

What was written is read back through the consume script (``Partitions.consume``, what V1
CONSUME runs) and through the connector's own source. One SparkSession serves the run (conftest.py).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from mapping.topic.partitioner import partition_for
from mapping.topic.topic_config import TopicDefaults
from spark_connector import example_pipeline
from tests.support.pods import Pod
from tests.support.topic_writer import TopicWriter

pytestmark = pytest.mark.spark

FORMAT = "redis-topics"


def sink(df: Any, url: str, **options: str) -> Any:
    writer = df.write.format(FORMAT).option("redis.url", url).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer


def read_back(spark: Any, url: str, topic: str) -> list[tuple[int, str, str]]:
    """(partition, key, value) of every record, as the connector's source reads them."""
    df = spark.read.format(FORMAT).option("redis.url", url).option("topic", topic).load()
    return [(r.partition, r.key, r.value) for r in df.orderBy("partition", "offset").collect()]


def consumed(writer: TopicWriter, topic: str) -> dict[int, list[bytes]]:
    """Values per partition through the consume script (V1 CONSUME), oldest first."""
    partitions = writer.topic(topic).partitions
    return {p: [v for _, v in writer.consume_all(topic, p)] for p in range(partitions)}


def read_with_kafka(redis_url: str, topic: str, partitions: int) -> dict[int, list]:
    """(offset, value) per partition as confluent-kafka reads them through a pod."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    pod = Pod(redis_url).start()
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": "read-back",
                         "enable.auto.commit": False, "enable.partition.eof": True})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        read: dict[int, list] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            if message.error() is not None:
                at_end.add(message.partition())  # _PARTITION_EOF: caught up
                continue
            read[message.partition()].append((message.offset(), message.value()))
        return read
    finally:
        consumer.close()
        pod.stop()


@pytest.mark.slow
def test_batch_write_partitions_by_key_like_produce(
    spark, spark_redis_url, writer, spark_topic
) -> None:
    rows = [(f"user{i % 13}", f"order-{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(4)
    # The topic does not exist yet: the sink creates it with the topic.* settings.
    sink(df, spark_redis_url, topic=spark_topic, **{"topic.replicationFactor": "1"}).save()

    stored = consumed(writer, spark_topic)
    assert sum(len(v) for v in stored.values()) == 300
    for p, values in stored.items():
        # Each record sits where V1 PRODUCE would put its key.
        assert Counter(values) == Counter(
            v.encode() for k, v in rows if partition_for(k.encode(), 3) == p
        )
    assert sorted(read_back(spark, spark_redis_url, spark_topic)) == sorted(
        (partition_for(k.encode(), 3), k, v) for k, v in rows
    )
    client = redis.Redis.from_url(spark_redis_url)
    try:
        # A one-off save() leaves no replay markers behind.
        assert client.exists(*(writer.keys.sink_markers(spark_topic, p) for p in range(3))) == 0
    finally:
        client.close()


def test_batch_write_topic_and_partition_columns_binary_headers(
    spark, spark_redis_url, writer, spark_topic
) -> None:
    other = f"{spark_topic}-b"
    writer.topic(spark_topic)
    writer.topic(other)
    df = spark.createDataFrame(
        [
            (spark_topic, 2, b"k1", b"\x00\xffbin", [("h", b"\x01")]),
            (other, None, b"user1", b"by-key", None),  # FNV: user1 -> 2 of 3
            (other, 0, None, None, []),  # null key and value (a tombstone)
        ],
        "topic string, partition int, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>",
    )
    sink(df, spark_redis_url).save()
    assert consumed(writer, spark_topic) == {0: [], 1: [], 2: [b"\x00\xffbin"]}
    assert consumed(writer, other) == {0: [b""], 1: [], 2: [b"by-key"]}
    # A partition outside the topic fails the job with a message naming it.
    bad = spark.createDataFrame([(7, "v")], "partition int, value string")
    with pytest.raises(Exception, match="partition 7 is outside"):
        sink(bad, spark_redis_url, topic=spark_topic).save()


def test_driver_refuses_overwrite_and_missing_topic(spark, spark_redis_url, spark_topic) -> None:
    """Checked when the writer is made, before any task (every check: test_sink_appender)."""
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="append-only"):
        sink(df, spark_redis_url, topic=spark_topic).mode("overwrite").save()
    with pytest.raises(Exception, match="needs a topic"):
        sink(df, spark_redis_url).save()


def run_stream(
    spark: Any, url: str, source: str, target: str, checkpoint: Path, **options: str
) -> Any:
    """source -> (key, value upper-cased) -> target, Trigger.AvailableNow; the finished query."""
    stream = (
        spark.readStream.format(FORMAT)
        .option("redis.url", url)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("key", F.upper("value").alias("value"))
        .writeStream.format(FORMAT)
        .option("redis.url", url)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )
    for name, value in options.items():
        stream = stream.option(name, value)
    query = stream.start()
    try:
        query.awaitTermination(180)
    except StreamingQueryException:
        pass  # the caller looks at query.exception()
    query.stop()  # a failed query deregisters its checkpoint only once stopped
    return query


def forget_last_commit(checkpoint: Path) -> None:
    """What a driver dying right after the sink's commit leaves: the last micro-batch is in
    the offset log but not in the commit log, so a restart runs it again."""
    commits = checkpoint / "commits"
    last = max(int(f.name) for f in commits.iterdir() if f.name.isdigit())
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)


def v1_values(pod: Pod, topic: str, partitions: int) -> list[bytes]:
    """Every visible value over V1 CONSUME, partition by partition."""
    values: list[bytes] = []
    with pod.client() as client:
        for p in range(partitions):
            position = 0
            while (reply := client.consume(topic, p, position)).records:
                values += [value for _, value in reply.records]
                position = reply.next_offset
    return values


@pytest.mark.slow
def test_stream_replays_after_failure_store_nothing_twice(
    spark, spark_redis_url, writer, start_pod, spark_topic, tmp_path
) -> None:
    """A task fails after its append (acks=all times out: no replicator runs) and the query
    dies mid-batch (the job aborts the other tasks). A pod comes up (its replicator plays the
    followers); restarted from its checkpoint, Spark replays the micro-batch and the sink
    stores each record exactly once. Then a replay after the sink committed (Spark's commit
    log lost, as when the driver dies right after the sink's commit) stores nothing twice."""
    source, target = spark_topic, f"{spark_topic}-out"
    for i in range(60):
        writer.produce(source, partition_for(b"k%d" % i, 3), [(b"k%d" % i, b"v%d" % i)])
    # Target: RF 2, min ISR 2: hw waits for the follower (in the ISR for 60 s).
    rf2 = TopicDefaults(partitions=3, replication_factor=2, min_insync_replicas=2)
    follower = TopicWriter(spark_redis_url, replica_lag_max_ms=60_000, defaults=rf2)
    follower.topic(target)
    follower.close()
    checkpoint = tmp_path / "ckpt"
    lag = {"replicaLagMaxMs": "60000"}
    client = redis.Redis.from_url(spark_redis_url)
    logs = [writer.keys.partition(target, p).log for p in range(3)]
    try:
        failed = run_stream(
            spark, spark_redis_url, source, target, checkpoint, **lag, **{"acks.timeoutMs": "300"}
        )
        assert "REPLICATION_TIMEOUT" in str(failed.exception())
        # The tasks that ran appended (the failed one too); none of it is visible yet.
        assert 0 < sum(client.xlen(log) for log in logs) <= 60
        assert all(
            client.hget(writer.keys.partition(target, p).state, "hw") in (None, b"-1")
            for p in range(3)
        )

        pod = start_pod(spark_redis_url, "--replica-lag-max-ms", "60000")
        done = run_stream(spark, spark_redis_url, source, target, checkpoint, **lag)
        assert done.exception() is None
        assert sum(client.xlen(log) for log in logs) == 60
        expected = Counter(b"V%d" % i for i in range(60))
        assert Counter(v1_values(pod, target, 3)) == expected

        # The sink committed batch 0 but Spark's commit log does not know: replayed again.
        forget_last_commit(checkpoint)
        again = run_stream(spark, spark_redis_url, source, target, checkpoint, **lag)
        assert again.exception() is None
        assert Counter(v1_values(pod, target, 3)) == expected
    finally:
        client.close()


@pytest.mark.slow
def test_stream_appends_each_micro_batch(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    source, target = spark_topic, f"{spark_topic}-out"
    writer.produce(source, 0, [(b"a", b"x%d" % i) for i in range(20)])
    checkpoint = tmp_path / "ckpt"
    options = {"topic.replicationFactor": "1", "batchSize": "7"}
    assert (
        run_stream(spark, spark_redis_url, source, target, checkpoint, **options).exception()
        is None
    )
    writer.produce(source, 1, [(b"b", b"y%d" % i) for i in range(5)])
    assert (
        run_stream(spark, spark_redis_url, source, target, checkpoint, **options).exception()
        is None
    )
    values = Counter(v for _, _, v in read_back(spark, spark_redis_url, target))
    assert values == Counter([f"X{i}" for i in range(20)] + [f"Y{i}" for i in range(5)])


@pytest.mark.slow
def test_example_pipeline_writes_summary_exactly_once(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    """orders -> count per key per batch -> orders-summary, read back as V1 CONSUME does;
    a micro-batch replayed by foreachBatch writes its summary once."""
    orders, summary = spark_topic, f"{spark_topic}-summary"
    keys = [f"customer{i % 5}" for i in range(200)]
    writer.topic(summary)  # single replica: no replicator runs in these tests
    for i, key in enumerate(keys):
        writer.produce(orders, partition_for(key.encode(), 3), [(key.encode(), b"o%d" % i)])
    config = example_pipeline.PipelineConfig(
        redis_url=spark_redis_url,
        topic=orders,
        group="summary",
        checkpoint=str(tmp_path / "ckpt"),
        available_now=True,
        summary_topic=summary,
        quiet=True,
    )

    def summed() -> Counter:
        totals: Counter = Counter()
        for p, values in consumed(writer, summary).items():
            for offset_value in values:
                totals[p] += int(offset_value)
        return totals

    def run() -> None:
        query = example_pipeline.start(spark, config)
        assert query.awaitTermination(180) and query.exception() is None

    run()
    # The summary topic is keyed like any produce: each customer's counts in its partition.
    expected = Counter()
    for key in keys:
        expected[partition_for(key.encode(), 3)] += 1
    assert summed() == expected
    # A stable writerId keeps its markers (one per task and partition) for the next batch.
    client = redis.Redis.from_url(spark_redis_url)
    try:
        markers = [writer.keys.sink_markers(summary, p) for p in range(3)]
        assert client.exists(*markers) > 0
    finally:
        client.close()
    rows = read_back(spark, spark_redis_url, summary)
    assert {k for _, k, _ in rows} == set(keys)
    # A Kafka consumer reads the same summary records from a pod's Kafka listener.
    v1 = {p: [(o, v) for o, v in writer.consume_all(summary, p)] for p in range(3)}
    assert read_with_kafka(spark_redis_url, summary, 3) == v1
    # foreachBatch replays the last batch when Spark's commit log lacks it: no duplicates.
    forget_last_commit(tmp_path / "ckpt")
    run()
    assert summed() == expected
    # A new checkpoint is a new query (batch ids from 0 again): nothing is skipped.
    config.checkpoint = str(tmp_path / "ckpt2")
    config.starting_offsets = "earliest"
    run()
    assert summed() == expected + expected
