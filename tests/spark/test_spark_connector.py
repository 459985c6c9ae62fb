"""The "redis-topics" PySpark data source against a real redis-server and a local Spark.

Test data is written through the real produce script (``mapping.partition.partitions.Partitions``),
never as hand-made stream entries. One SparkSession serves the module (see conftest.py).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis

from mapping.connection.embedded import free_port
from mapping.topic.partitioner import partition_for
from mapping.topic.topic_config import TopicDefaults
from spark_connector import example_pipeline
from spark_connector.group_commit import commit_group_offsets
from tests.support import ROOT
from tests.support.topic_writer import TopicWriter
from tests.support.waiting import wait_until

pytestmark = pytest.mark.spark

FORMAT = "redis-topics"


def batch_df(spark: Any, url: str, topic: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("redis.url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


class Collector:
    """A foreachBatch sink that keeps each micro-batch's rows by batch id, so a re-run batch
    replaces its earlier run instead of looking like a duplicate."""

    def __init__(self) -> None:
        self.batches: dict[int, list[tuple[int, int, str]]] = {}
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = [
            (r.partition, r.offset, r.value)
            for r in df.select(*"partition offset value".split()).collect()
        ]
        with self.lock:
            self.batches[batch_id] = rows

    def rows(self) -> list[tuple[int, int, str]]:
        with self.lock:
            return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]

    def sizes(self) -> list[int]:
        with self.lock:
            return [len(self.batches[b]) for b in sorted(self.batches)]


def start_stream(
    spark: Any,
    url: str,
    topic: str,
    checkpoint: Path,
    sink: Collector,
    *,
    available_now: bool = False,
    **options: str,
) -> Any:
    reader = spark.readStream.format(FORMAT).option("redis.url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = (
        reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="300 milliseconds")
    return writer.start()


def run_available_now(
    spark: Any, url: str, topic: str, checkpoint: Path, **options: str
) -> Collector:
    sink = Collector()
    query = start_stream(spark, url, topic, checkpoint, sink, available_now=True, **options)
    assert query.awaitTermination(120), "availableNow query did not finish"
    assert query.exception() is None
    return sink


def produce_keyed(writer: TopicWriter, topic: str, count: int, tag: str = "v") -> dict[int, list]:
    """``count`` records partitioned by key as the adapter does; returns offsets by partition."""
    partitions = writer.topic(topic).partitions
    by_partition: dict[int, list[tuple[bytes, bytes]]] = defaultdict(list)
    for i in range(count):
        key = f"user{i % 37}".encode()
        by_partition[partition_for(key, partitions)].append((key, f"{tag}{i}".encode()))
    produced: dict[int, list[int]] = {}
    for p, records in by_partition.items():
        offsets: list[int] = []
        for chunk in range(0, len(records), 1000):
            offsets += writer.produce(topic, p, records[chunk : chunk + 1000])
        produced[p] = offsets
    return produced


def by_partition(rows: list[tuple[int, int, str]]) -> dict[int, list[tuple[int, str]]]:
    grouped: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for partition, offset, value in rows:
        grouped[partition].append((offset, value))
    return dict(grouped)


def state(spark_redis_url: str, key: str) -> dict[str, str]:
    client = redis.Redis.from_url(spark_redis_url, decode_responses=True)
    try:
        return client.hgetall(key)
    finally:
        client.close()


# --- batch -------------------------------------------------------------------------------


def test_batch_read_equals_store_consume(spark, spark_redis_url, writer, spark_topic) -> None:
    produce_keyed(writer, spark_topic, 10_000)
    expected = {
        p: [(o, v.decode()) for o, v in writer.consume_all(spark_topic, p)] for p in range(3)
    }
    assert sum(len(v) for v in expected.values()) == 10_000

    df = batch_df(
        spark, spark_redis_url, spark_topic, maxRecordsPerPartition="1500", fetchSize="700"
    )
    assert df.columns == ["topic", "partition", "offset", "key", "value", "timestamp"]
    # One task per partition, large partitions split by counting entries.
    assert df.rdd.getNumPartitions() == sum(math.ceil(len(v) / 1500) for v in expected.values())

    rows = df.collect()  # a plain scan keeps each partition's read order
    got = by_partition([(r.partition, r.offset, r.value) for r in rows])
    assert got == expected
    assert {r.topic for r in rows} == {spark_topic}
    assert all(r.key.startswith("user") and r.timestamp is not None for r in rows)


def test_batch_offset_options_and_binary(spark, spark_redis_url, writer, spark_topic) -> None:
    odd = b"\xff\x00 a:b|c,%\n"
    offsets = writer.produce(spark_topic, 0, [(b"k%d" % i, b"v%d" % i) for i in range(10)])
    writer.produce(spark_topic, 1, [(odd, odd)])

    binary = batch_df(spark, spark_redis_url, spark_topic, valueFormat="binary")
    assert dict(binary.dtypes)["value"] == "binary"
    row = binary.where("partition = 1").collect()[0]
    assert (bytes(row.key), bytes(row.value)) == (odd, odd)

    # JSON start/end positions: [offsets[3], offsets[7]) of partition 0, nothing else.
    df = batch_df(
        spark,
        spark_redis_url,
        spark_topic,
        startingOffsets=f'{{"0": {offsets[3]}, "1": -1}}',
        endingOffsets=f'{{"0": {offsets[7]}}}',
    )
    assert [(r.partition, r.offset) for r in df.collect()] == [(0, o) for o in offsets[3:7]]
    assert batch_df(spark, spark_redis_url, spark_topic, startingOffsets="latest").count() == 0

    # group:<name> starts at a group's committed offsets (next offset to read).
    client = redis.Redis.from_url(spark_redis_url)
    try:
        commit_group_offsets(client, writer.keys, "g1", spark_topic, {0: offsets[8]})
    finally:
        client.close()
    df = batch_df(spark, spark_redis_url, spark_topic, startingOffsets="group:g1")
    assert sorted((r.partition, r.offset) for r in df.collect())[:2] == [
        (0, offsets[8]),
        (0, offsets[9]),
    ]
    assert df.count() == 3


def test_key_prefix_option(spark, spark_redis_url, spark_topic) -> None:
    other = TopicWriter(spark_redis_url, prefix="other")
    try:
        other.produce(spark_topic, 2, [(b"k", b"v")])
    finally:
        other.close()
    df = batch_df(spark, spark_redis_url, spark_topic, keyPrefix="other")
    assert [(r.partition, r.value) for r in df.collect()] == [(2, "v")]
    with pytest.raises(Exception, match="does not exist"):
        batch_df(spark, spark_redis_url, spark_topic)  # default prefix "rsa"


# --- streaming -----------------------------------------------------------------------------


def test_stream_exactly_once_with_concurrent_producer(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    writer.topic(spark_topic)
    produced: dict[int, list[int]] = defaultdict(list)

    sink = Collector()

    def produce() -> None:
        for round_ in range(15):
            if round_ == 8:
                # Half way, let a trigger finish first, so the rest must come in later ones
                # however slowly the machine runs.
                wait_until(lambda: any(sink.sizes()), timeout=60)
            for p in range(3):
                records = [(b"k", b"r%d-%d" % (round_, i)) for i in range(50)]
                produced[p] += writer.produce(spark_topic, p, records)
            time.sleep(0.15)  # paces the producer, so records arrive over several triggers

    query = start_stream(
        spark, spark_redis_url, spark_topic, tmp_path / "ckpt", sink, startingOffsets="earliest"
    )
    producer = threading.Thread(target=produce)
    producer.start()
    producer.join(timeout=120)
    try:
        query.processAllAvailable()
    finally:
        query.stop()

    rows = sink.rows()
    assert len(rows) == 15 * 3 * 50
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "a record was delivered twice"
    got = by_partition(rows)
    for p in range(3):
        assert [o for o, _ in got[p]] == produced[p]  # all of them, in offset order
    assert len([n for n in sink.sizes() if n]) >= 2, "expected several non-empty triggers"


def test_max_records_per_trigger_bounds_each_batch(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    produced = produce_keyed(writer, spark_topic, 3_000)
    sink = run_available_now(
        spark,
        spark_redis_url,
        spark_topic,
        tmp_path / "ckpt",
        startingOffsets="earliest",
        maxRecordsPerTrigger="700",
    )
    sizes = [n for n in sink.sizes() if n]
    assert sum(sizes) == 3_000
    assert max(sizes) <= 700
    assert len(sizes) >= math.ceil(3_000 / 700)
    got = by_partition(sink.rows())
    assert {p: [o for o, _ in v] for p, v in got.items()} == produced


def test_restart_from_checkpoint_resumes_exactly(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    checkpoint = tmp_path / "ckpt"
    first_produced = produce_keyed(writer, spark_topic, 1_200, tag="a")
    options = {"startingOffsets": "earliest", "maxRecordsPerTrigger": "500"}
    first = run_available_now(spark, spark_redis_url, spark_topic, checkpoint, **options)
    assert len(first.rows()) == 1_200

    # A continuous query stopped part-way, then restarted: together they see the rest once.
    second_produced = produce_keyed(writer, spark_topic, 900, tag="b")
    partial = Collector()
    query = start_stream(
        spark, spark_redis_url, spark_topic, checkpoint, partial, maxRecordsPerTrigger="200"
    )
    wait_until(partial.rows, timeout=60)
    query.stop()
    third_produced = produce_keyed(writer, spark_topic, 600, tag="c")
    rest = run_available_now(spark, spark_redis_url, spark_topic, checkpoint, **options)

    # Batch ids continue across restarts, so merging by batch id drops a re-run batch.
    merged = {**partial.batches, **rest.batches}
    later = [row for b in sorted(merged) for row in merged[b]]
    assert 0 < len(partial.rows()) < 1_500
    assert len(later) == 1_500
    assert len({(p, o) for p, o, _ in later}) == 1_500
    everything = by_partition(first.rows() + later)
    for p in range(3):
        want = first_produced.get(p, []) + second_produced.get(p, []) + third_produced.get(p, [])
        assert [o for o, _ in everything.get(p, [])] == want


def raise_hw(fast: TopicWriter, topic: str, state_key: str, url: str, hw: int) -> None:
    """Consume through ``fast`` (no lag allowed: a replica behind for 1 ms leaves the ISR)
    until the stored hw is ``hw``: the log end of the moment."""

    def reached() -> bool:
        fast.consume_all(topic, 0)
        return int(state(url, state_key).get("hw", "-1")) == hw

    wait_until(reached, timeout=10, interval=0.005)


def test_records_above_hw_are_never_read(spark, spark_redis_url, spark_topic, tmp_path) -> None:
    # Replicas that never ack keep the hw down; a store with no lag allowance drops them from
    # the ISR (on its next consume), which is how the hw is advanced here.
    rf3 = TopicDefaults(partitions=1, replication_factor=3, min_insync_replicas=2)
    slow = TopicWriter(spark_redis_url, replica_lag_max_ms=60_000, defaults=rf3)
    fast = TopicWriter(spark_redis_url, replica_lag_max_ms=0, defaults=rf3)
    state_key = slow.keys.partition(spark_topic, 0).state
    checkpoint = tmp_path / "ckpt"
    stream_opts = {"startingOffsets": "earliest"}
    try:
        first = slow.produce(spark_topic, 0, [(b"k", b"a%d" % i) for i in range(50)])
        assert state(spark_redis_url, state_key).get("hw", "-1") == "-1"
        assert batch_df(spark, spark_redis_url, spark_topic).count() == 0
        sink = run_available_now(spark, spark_redis_url, spark_topic, checkpoint, **stream_opts)
        assert sink.rows() == []

        raise_hw(fast, spark_topic, state_key, spark_redis_url, first[-1])
        second = slow.produce(spark_topic, 0, [(b"k", b"b%d" % i) for i in range(50)])
        hash_now = state(spark_redis_url, state_key)
        assert int(hash_now["hw"]) == first[-1] and int(hash_now["log_end"]) == second[-1]

        assert [r.offset for r in batch_df(spark, spark_redis_url, spark_topic).collect()] == first
        sink = run_available_now(spark, spark_redis_url, spark_topic, checkpoint, **stream_opts)
        assert [o for _, o, _ in sink.rows()] == first

        raise_hw(fast, spark_topic, state_key, spark_redis_url, second[-1])
        all_rows = batch_df(spark, spark_redis_url, spark_topic).collect()
        assert [r.offset for r in all_rows] == first + second
        sink = run_available_now(spark, spark_redis_url, spark_topic, checkpoint, **stream_opts)
        assert [o for _, o, _ in sink.rows()] == second
    finally:
        slow.close()
        fast.close()


# --- errors --------------------------------------------------------------------------------


def _fails_before_any_task(spark: Any, load: Any, message: str) -> None:
    group = f"err-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "error check")
    try:
        with pytest.raises(Exception, match=message):
            load()
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []


def test_missing_topic(spark, spark_redis_url) -> None:
    _fails_before_any_task(
        spark,
        lambda: batch_df(spark, spark_redis_url, "no-such-topic").collect(),
        "topic 'no-such-topic' does not exist",
    )
    _fails_before_any_task(
        spark,
        lambda: (
            spark.readStream.format(FORMAT)
            .option("redis.url", spark_redis_url)
            .option("topic", "no-such-topic")
            .load()
        ),
        "topic 'no-such-topic' does not exist",
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingOffsets": "yesterday"}, "option startingOffsets must be"),
        ({"startingOffsets": '{"0": -7}'}, "offset for partition 0 must be"),
        ({"startingOffsets": '{"9": 0}'}, r"names partition\(s\) \[9\]"),
        ({"endingOffsets": "earliest"}, "option endingOffsets must be"),
        ({"startingOffsets": "group:bad name"}, "group name must be"),
        ({"maxRecordsPerPartition": "0"}, "maxRecordsPerPartition must be a positive integer"),
        ({"valueFormat": "avro"}, "valueFormat must be"),
        ({"startingOffset": "earliest"}, "unknown option"),
    ],
)
def test_bad_option(spark, spark_redis_url, writer, spark_topic, options, message) -> None:
    writer.topic(spark_topic)
    _fails_before_any_task(
        spark, lambda: batch_df(spark, spark_redis_url, spark_topic, **options).collect(), message
    )


def test_missing_required_options(spark, spark_redis_url) -> None:
    with pytest.raises(Exception, match="option redis.url is required"):
        spark.read.format(FORMAT).option("topic", "orders").load()
    with pytest.raises(Exception, match="option topic is required"):
        spark.read.format(FORMAT).option("redis.url", spark_redis_url).load()


def test_stream_rejects_batch_only_option(spark, spark_redis_url, writer, spark_topic) -> None:
    writer.topic(spark_topic)
    df = (
        spark.readStream.format(FORMAT)
        .option("redis.url", spark_redis_url)
        .option("topic", spark_topic)
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="endingOffsets applies to batch queries only"):
        query = df.writeStream.format("noop").start()
        try:
            query.awaitTermination(60)
        finally:
            query.stop()


def test_unreachable_redis(spark) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    _fails_before_any_task(
        spark,
        lambda: batch_df(spark, url, "orders", **{"redis.timeout": "1"}).collect(),
        "cannot reach Redis at redis://127.0.0.1",
    )


# --- the example pipeline -----------------------------------------------------------------


def _group_offsets(url: str, writer: TopicWriter, group: str, topic: str) -> dict[int, int]:
    raw = state(url, writer.keys.group(group, topic).offsets)
    return {int(p): int(o) for p, o in raw.items()}


def test_example_pipeline_commits_group_offsets(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    produced = produce_keyed(writer, spark_topic, 2_000)
    config = example_pipeline.PipelineConfig(
        redis_url=spark_redis_url,
        topic=spark_topic,
        group="counts",
        checkpoint=str(tmp_path / "ckpt"),
        max_records_per_trigger=600,
        available_now=True,
        quiet=True,
    )
    summaries: list[example_pipeline.BatchSummary] = []
    query = example_pipeline.start(spark, config, summaries.append)
    assert query.awaitTermination(120) and query.exception() is None
    assert sum(s.records for s in summaries) == 2_000
    assert all(s.records <= 600 for s in summaries)
    assert sum(sum(s.key_counts.values()) for s in summaries) == 2_000
    committed = _group_offsets(spark_redis_url, writer, "counts", spark_topic)
    assert committed == {p: offsets[-1] + 1 for p, offsets in produced.items()}

    # Restart from the checkpoint: only the new records, and the group moves on.
    more = produce_keyed(writer, spark_topic, 500, tag="m")
    summaries.clear()
    query = example_pipeline.start(spark, config, summaries.append)
    assert query.awaitTermination(120) and query.exception() is None
    assert sum(s.records for s in summaries) == 500
    committed = _group_offsets(spark_redis_url, writer, "counts", spark_topic)
    assert committed == {p: offsets[-1] + 1 for p, offsets in more.items()}

    # The commit script only moves forward.
    client = redis.Redis.from_url(spark_redis_url)
    try:
        assert commit_group_offsets(client, writer.keys, "counts", spark_topic, {0: 5}) == {
            0: committed[0]
        }
    finally:
        client.close()


def test_example_pipeline_new_checkpoint_starts_at_group_offsets(
    spark, spark_redis_url, writer, spark_topic, tmp_path
) -> None:
    offsets = writer.produce(spark_topic, 0, [(b"k", b"v%d" % i) for i in range(100)])
    client = redis.Redis.from_url(spark_redis_url)
    try:
        commit_group_offsets(client, writer.keys, "resume", spark_topic, {0: offsets[60]})
    finally:
        client.close()
    config = example_pipeline.PipelineConfig(
        redis_url=spark_redis_url,
        topic=spark_topic,
        group="resume",
        checkpoint=str(tmp_path / "ckpt"),
        available_now=True,
        quiet=True,
    )
    summaries: list[example_pipeline.BatchSummary] = []
    query = example_pipeline.start(spark, config, summaries.append)
    assert query.awaitTermination(120) and query.exception() is None
    assert sum(s.records for s in summaries) == 40
    assert _group_offsets(spark_redis_url, writer, "resume", spark_topic) == {0: offsets[-1] + 1}


def test_example_pipeline_command_line(spark_redis_url, writer, spark_topic, tmp_path) -> None:
    produced = produce_keyed(writer, spark_topic, 300)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run(
        [
            sys.executable, "-m", "spark_connector.example_pipeline",
            "--redis-url", spark_redis_url,
            "--topic", spark_topic,
            "--group", "cli",
            "--checkpoint", str(tmp_path / "ckpt"),
            "--available-now",
            "--master", "local[1]",
            "--output", str(tmp_path / "counts"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batch 0: 300 records" in result.stdout
    counts = [json.loads(line) for f in (tmp_path / "counts").glob("*.json") for line in f.open()]
    assert sum(c["count"] for c in counts) == 300
    committed = _group_offsets(spark_redis_url, writer, "cli", spark_topic)
    assert committed == {p: offsets[-1] + 1 for p, offsets in produced.items()}
