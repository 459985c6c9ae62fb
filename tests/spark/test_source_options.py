"""The source's options named as Spark's Kafka source names them, through a local Spark,
batch and streaming: subscribe / subscribePattern (several topics, a topic column per row,
topics created later), includeHeaders, maxOffsetsPerTrigger (a proportional cap on records),
startingTimestamp / startingOffsetsByTimestamp (and their strategy, and the ending ones),
minPartitions, and the errors of values the topics contradict, raised while planning.

Data is tiny and the SparkSession shared (conftest.py); records are written through the real
produce script (``TopicWriter``) or the sink's appender (headers)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis

from spark_connector.sink_records import Record
from tests.spark.test_sink_appender import sink_options, write
from tests.spark.test_spark_connector import _fails_before_any_task
from tests.support.topic_writer import TopicWriter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

FORMAT = "redis-topics"
BITS = 10  # the run's Redis keeps the default sequence bits
Row = tuple[str, int, int, str]  # topic, partition, offset, value


def read(spark: Any, url: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("redis.url", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def rows_of(df: Any) -> list[Row]:
    rows = df.select("topic", "partition", "offset", "value").collect()
    return sorted((r.topic, r.partition, r.offset, r.value) for r in rows)


class Batches:
    """A foreachBatch sink: each micro-batch's rows (and the whole rows) by batch id."""

    def __init__(self) -> None:
        self.rows: dict[int, list[Row]] = {}
        self.full: dict[int, list[Any]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        collected = df.collect()
        with self.lock:
            self.full[batch_id] = collected
            self.rows[batch_id] = [(r.topic, r.partition, r.offset, r.value) for r in collected]

    def all(self) -> list[Row]:
        with self.lock:
            return sorted(row for rows in self.rows.values() for row in rows)

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(self.rows[b]) for b in sorted(self.rows) if self.rows[b]]


def stream(
    spark: Any, url: str, checkpoint: Path, sink: Batches, *, available_now: bool, **options: str
) -> Any:
    reader = spark.readStream.format(FORMAT).option("redis.url", url)
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = reader.load().writeStream.foreachBatch(sink)
    writer = writer.option("checkpointLocation", str(checkpoint))
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="300 milliseconds").start()


def run_available_now(spark: Any, url: str, checkpoint: Path, **options: str) -> Batches:
    sink = Batches()
    query = stream(spark, url, checkpoint, sink, available_now=True, **options)
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return sink


def produced_rows(topic: str, partition: int, offsets: list[int], tag: str) -> list[Row]:
    return [(topic, partition, o, f"{tag}{i}") for i, o in enumerate(offsets)]


def values(writer: TopicWriter, topic: str, partition: int, tag: str, n: int) -> list[int]:
    return writer.produce(topic, partition, [(b"k", f"{tag}{i}".encode()) for i in range(n)])


def test_subscribe_several_topics(spark, spark_redis_url, writer, tmp_path) -> None:
    tag = uuid.uuid4().hex[:8]
    one, two = f"sub-{tag}-1", f"sub-{tag}-2"
    first = values(writer, one, 0, "a", 3)
    second = values(writer, two, 2, "b", 2)
    expected = sorted(produced_rows(one, 0, first, "a") + produced_rows(two, 2, second, "b"))

    assert rows_of(read(spark, spark_redis_url, subscribe=f"{one}, {two}")) == expected
    sink = run_available_now(
        spark,
        spark_redis_url,
        tmp_path / "ckpt",
        subscribe=f"{one},{two}",
        startingOffsets="earliest",
    )
    assert sink.all() == expected
    # Spark's per-topic JSON: one's partition 0 from its second record, two's from earliest
    df = read(
        spark,
        spark_redis_url,
        subscribe=f"{one},{two}",
        startingOffsets=f'{{"{one}": {{"0": {first[1]}}}}}',
        endingOffsets=f'{{"{two}": {{"2": {second[1]}}}}}',
    )
    assert rows_of(df) == sorted(
        produced_rows(one, 0, first, "a")[1:] + produced_rows(two, 2, second, "b")[:1]
    )
    # a named topic must exist, as the single topic option requires
    _fails_before_any_task(
        spark,
        lambda: read(spark, spark_redis_url, subscribe=f"{one},no-such-{tag}").collect(),
        f"topic 'no-such-{tag}' does not exist",
    )


def test_subscribe_pattern_reads_topics_created_later(
    spark, spark_redis_url, writer, tmp_path
) -> None:
    tag = uuid.uuid4().hex[:8]
    early, late = f"pat-{tag}-early", f"pat-{tag}-late"
    first = values(writer, early, 1, "e", 2)
    values(writer, f"x-pat-{tag}-other", 0, "o", 1)  # the whole name must match
    pattern = f"pat-{tag}-.*"
    assert rows_of(read(spark, spark_redis_url, subscribePattern=pattern)) == produced_rows(
        early, 1, first, "e"
    )

    sink = Batches()
    query = stream(
        spark,
        spark_redis_url,
        tmp_path / "ckpt",
        sink,
        available_now=False,
        subscribePattern=pattern,
        startingOffsets="earliest",
    )
    try:
        wait_until(lambda: len(sink.all()) == 2, timeout=60)
        # created while the query runs: picked up at a next micro-batch, from its first record
        later = values(writer, late, 0, "l", 3)
        wait_until(lambda: len(sink.all()) == 5, timeout=60)
        more = values(writer, early, 1, "m", 1)
        wait_until(lambda: len(sink.all()) == 6, timeout=60)
    finally:
        query.stop()
    assert sink.all() == sorted(
        produced_rows(early, 1, first, "e")
        + produced_rows(late, 0, later, "l")
        + produced_rows(early, 1, more, "m")
    )
    assert query.exception() is None


def test_include_headers(spark, spark_redis_url, spark_topic, tmp_path) -> None:
    client = redis.Redis.from_url(spark_redis_url)
    try:
        headers = [("trace", b"t1"), ("trace", b"t2"), ("empty", b""), ("gone", None)]
        write(
            client,
            sink_options(spark_redis_url, spark_topic),
            [Record(None, 0, b"k", b"with", headers), Record(None, 0, b"k", b"without")],
            marker=None,
        )
    finally:
        client.close()
    want = [
        [("trace", b"t1"), ("trace", b"t2"), ("empty", b""), ("gone", None)],
        None,  # no headers: null, as in Spark's Kafka source
    ]

    def header_pairs(rows: list[Any]) -> list[Any]:
        ordered = sorted(rows, key=lambda r: r.offset)
        return [
            None if r.headers is None else [(h.key, h.value and bytes(h.value)) for h in r.headers]
            for r in ordered
        ]

    df = read(spark, spark_redis_url, topic=spark_topic, includeHeaders="true")
    assert dict(df.dtypes)["headers"] == "array<struct<key:string,value:binary>>"
    assert df.columns[-1] == "headers"
    assert header_pairs(df.collect()) == want
    assert "headers" not in read(spark, spark_redis_url, topic=spark_topic).columns

    sink = run_available_now(
        spark,
        spark_redis_url,
        tmp_path / "ckpt",
        topic=spark_topic,
        startingOffsets="earliest",
        includeHeaders="true",
    )
    assert header_pairs([row for rows in sink.full.values() for row in rows]) == want


def test_max_offsets_per_trigger_splits_in_proportion(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    produced = {p: values(writer, spark_topic, p, f"p{p}-", 20 * (p + 1)) for p in range(3)}
    sink = run_available_now(
        spark,
        spark_redis_url,
        tmp_path / "ckpt",
        topic=spark_topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger="30",
    )
    # 120 records, 20/40/60 by partition: each micro-batch reads 30, 5/10/15 of them
    assert sink.sizes() == [30, 30, 30, 30]
    first = defaultdict(int)
    for _, p, _, _ in sink.rows[min(sink.rows)]:
        first[p] += 1
    assert dict(first) == {0: 5, 1: 10, 2: 15}
    assert sink.all() == sorted(
        row
        for p, offsets in produced.items()
        for row in produced_rows(spark_topic, p, offsets, f"p{p}-")
    )
    # a batch query ignores it, as Spark's does
    assert read(spark, spark_redis_url, topic=spark_topic, maxOffsetsPerTrigger="30").count() == 120


def test_starting_and_ending_timestamps(spark, spark_redis_url, writer, spark_topic, tmp_path):
    # (every partition has records: as in Spark, a starting timestamp fails on a partition
    # with no record after it, an empty one too, unless the strategy is "latest")
    before = {p: values(writer, spark_topic, p, "a", 3) for p in range(3)}
    time.sleep(0.005)  # the next appends get a later millisecond
    after = {p: values(writer, spark_topic, p, "b", 2) for p in range(3)}
    moment = min(offsets[0] for offsets in after.values()) >> BITS  # the first "b"'s append time
    assert max(offsets[-1] for offsets in before.values()) >> BITS < moment
    old = [r for p in range(3) for r in produced_rows(spark_topic, p, before[p], "a")]
    new = [r for p in range(3) for r in produced_rows(spark_topic, p, after[p], "b")]

    at = {"topic": spark_topic, "startingTimestamp": str(moment)}
    assert rows_of(read(spark, spark_redis_url, **at)) == sorted(new)
    assert run_available_now(spark, spark_redis_url, tmp_path / "ckpt", **at).all() == sorted(new)
    # per partition: partition 0 from the time, the others not named: from earliest
    by_partition = f'{{"{spark_topic}": {{"0": {moment}}}}}'
    expected = sorted(new + [r for r in old if r[1] != 0])
    df = read(spark, spark_redis_url, topic=spark_topic, startingOffsetsByTimestamp=by_partition)
    assert rows_of(df) == expected
    sink = run_available_now(
        spark,
        spark_redis_url,
        tmp_path / "ckpt2",
        topic=spark_topic,
        startingOffsetsByTimestamp=by_partition,
    )
    assert sink.all() == expected
    # batch: up to the time (exclusive), as Spark's endingTimestamp
    df = read(spark, spark_redis_url, topic=spark_topic, endingTimestamp=str(moment))
    assert rows_of(df) == sorted(old)

    # no record at or after the time: the query fails, or with "latest" starts there
    future = str((after[0][-1] >> BITS) + 60_000)
    _fails_before_any_task(
        spark,
        lambda: read(spark, spark_redis_url, topic=spark_topic, startingTimestamp=future).collect(),
        f"no committed record of topic '{spark_topic}' partition 0 was appended at or after",
    )
    latest = {"topic": spark_topic, "startingTimestamp": future}
    latest["startingOffsetsByTimestampStrategy"] = "latest"
    assert read(spark, spark_redis_url, **latest).count() == 0
    sink = run_available_now(spark, spark_redis_url, tmp_path / "ckpt3", **latest)
    assert sink.all() == []


def test_min_partitions(spark, spark_redis_url, writer, spark_topic, tmp_path) -> None:
    produced = values(writer, spark_topic, 1, "v", 40)
    df = read(spark, spark_redis_url, topic=spark_topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    rows = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
    assert rows == [(1, o) for o in produced]  # each task a run, in order, none twice
    assert read(spark, spark_redis_url, topic=spark_topic).rdd.getNumPartitions() == 1

    # streaming: the same records once each (the tasks of a micro-batch: test_planning.py)
    sink = run_available_now(
        spark,
        spark_redis_url,
        tmp_path / "ckpt",
        topic=spark_topic,
        startingOffsets="earliest",
        minPartitions="4",
    )
    assert sink.all() == produced_rows(spark_topic, 1, produced, "v")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": '{"TOPIC": {"7": 0}}'}, r"names partition\(s\) \[7\] of topic"),
        ({"startingOffsets": '{"other-topic": {"0": 0}}'}, "names topic 'other-topic', which"),
        ({"endingOffsetsByTimestamp": '{"TOPIC": {"5": 0}}'}, r"names partition\(s\) \[5\]"),
        ({"startingOffsetsByTimestamp": '{"nope": {"0": 0}}'}, "names topic 'nope', which"),
    ],
)
def test_values_the_topics_contradict_fail_while_planning(
    spark, spark_redis_url, writer, spark_topic, options, message
) -> None:
    writer.topic(spark_topic)
    named = {k: v.replace("TOPIC", spark_topic) for k, v in options.items()}
    _fails_before_any_task(
        spark, lambda: read(spark, spark_redis_url, topic=spark_topic, **named).collect(), message
    )
