"""Records removed by retention before the Spark source read them: the query fails with a
clear error, or with ``failOnDataLoss=false`` goes on from the log start, as Spark's Kafka
source does. "earliest" means the log start, so a trimmed topic is no data loss for it.
Retention is applied as a pod applies it (mapping.operations.retention,
partition/retention_trim.lua)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from mapping.core.keys import Keys
from spark_connector.offsets import RangePartition
from spark_connector.options import DataLoss, parse_options
from spark_connector.records import read_partition, source_schema
from tests.spark.test_spark_connector import Collector, batch_df, run_available_now, start_stream
from tests.support.topic_writer import TopicWriter

pytestmark = pytest.mark.spark

LOST = "were removed by retention before this query read them"


def _values(rows: list[Any]) -> list[str]:
    return [row.value for row in sorted(rows, key=lambda r: (r.partition, r.offset))]


def _records(writer: TopicWriter, topic: str, tag: str, count: int) -> list[int]:
    return writer.produce(topic, 0, [(b"k", f"{tag}{i}".encode()) for i in range(count)])


@pytest.mark.slow
def test_batch_read_below_the_log_start(
    spark: Any, spark_redis_url: str, writer: TopicWriter, spark_topic: str
) -> None:
    old = _records(writer, spark_topic, "old", 5)
    writer.trim_committed(spark_topic)
    _records(writer, spark_topic, "new", 3)

    # earliest (the default) starts at the log start: nothing lost
    assert _values(batch_df(spark, spark_redis_url, spark_topic).collect()) == [
        "new0", "new1", "new2",
    ]  # fmt: skip
    # explicitly from a removed offset: the query fails and says what to do
    from_old = f'{{"0": {old[2]}}}'
    with pytest.raises(Exception, match=LOST) as failure:
        batch_df(spark, spark_redis_url, spark_topic, startingOffsets=from_old).collect()
    assert "failOnDataLoss=false" in str(failure.value)
    assert f"partition 0 from offset {old[2]} up to {old[-1] + 1}" in str(failure.value)
    # a group whose committed offset was trimmed away: the same
    client = redis.Redis.from_url(spark_redis_url)
    client.hset(Keys().group("slow", spark_topic).offsets, "0", old[1])
    client.close()
    with pytest.raises(Exception, match=LOST):
        batch_df(spark, spark_redis_url, spark_topic, startingOffsets="group:slow").collect()
    # failOnDataLoss=false: from the log start
    lenient = batch_df(
        spark, spark_redis_url, spark_topic, startingOffsets=from_old, failOnDataLoss="false"
    )
    assert _values(lenient.collect()) == ["new0", "new1", "new2"]


@pytest.mark.slow
def test_stream_resumed_after_retention_removed_unread_records(
    spark: Any, spark_redis_url: str, writer: TopicWriter, spark_topic: str, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    _records(writer, spark_topic, "a", 3)
    first = run_available_now(
        spark, spark_redis_url, spark_topic, checkpoint, startingOffsets="earliest"
    )
    assert [value for _, _, value in first.rows()] == ["a0", "a1", "a2"]
    # While the query is down, records it has not read are produced and trimmed.
    _records(writer, spark_topic, "b", 3)
    writer.trim_committed(spark_topic)
    _records(writer, spark_topic, "c", 2)

    sink = Collector()
    query = start_stream(spark, spark_redis_url, spark_topic, checkpoint, sink, available_now=True)
    with pytest.raises(Exception, match=LOST):  # StreamingQueryException
        query.awaitTermination(120)
    assert sink.rows() == []

    lenient = run_available_now(
        spark, spark_redis_url, spark_topic, checkpoint, failOnDataLoss="false"
    )
    assert [value for _, _, value in lenient.rows()] == ["c0", "c1"]


def test_task_detects_a_trim_after_planning(
    spark_redis_url: str, writer: TopicWriter, spark_topic: str
) -> None:
    """The executor's own check: the driver planned [start, end), retention removed part of
    it before the task read it."""
    offsets = _records(writer, spark_topic, "x", 4)
    planned = RangePartition(0, offsets[0], offsets[-1] + 1, sequence_bits=10)
    options = {"redis.url": spark_redis_url, "topic": spark_topic}
    schema = source_schema()
    before = list(read_partition(parse_options(options), schema, planned))
    assert sum(batch.num_rows for batch in before) == 4  # nothing trimmed yet: no error
    writer.trim_committed(spark_topic)
    with pytest.raises(DataLoss, match=LOST):
        list(read_partition(parse_options(options), schema, planned))
    lenient = parse_options({**options, "failOnDataLoss": "false"})
    assert list(read_partition(lenient, schema, planned)) == []


def test_fail_on_data_loss_option_is_checked() -> None:
    options = {"redis.url": "redis://127.0.0.1:1/0", "topic": "t"}
    assert parse_options(options).fail_on_data_loss is True
    assert parse_options({**options, "failondataloss": "FALSE"}).fail_on_data_loss is False
    with pytest.raises(ValueError, match="failOnDataLoss must be 'true' or 'false'"):
        parse_options({**options, "failOnDataLoss": "maybe"})
