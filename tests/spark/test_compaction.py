"""A compacted topic through the Spark connector: the sink refuses rows without a key and
keeps the compaction index as every writer does; after compaction the batch reader returns
exactly what Kafka's rules keep (gaps in the offsets, tombstones as null values), the active
segment and what only it supersedes untouched."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mapping.core import codec
from mapping.core.keys import Keys
from spark_connector.sink_options import SinkWriteError
from spark_connector.sink_records import Record
from tests.spark.test_sink_appender import sink_options, write
from tests.spark.test_spark_connector import batch_df
from tests.support.cli import CliTarget
from tests.support.compaction import (
    compact_now,
    compacted_topic,
    kafka_keeps,
    roll_segment,
    scripted_records,
)


@pytest.fixture
def target(spark_redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(spark_redis_url)
    yield CliTarget(spark_redis_url, Keys(), client)
    client.close()


def _sink_write(
    target: CliTarget, topic: str, records: list[tuple[bytes, bytes | None]]
) -> list[int]:
    """``records`` through the sink; their offsets."""
    opts = sink_options(target.url, topic)
    write(target.client, opts, [Record(None, None, k, v) for k, v in records], marker=None)
    stored = _stored(target, topic)[-len(records) :]
    assert [r for _, r in stored] == records
    return [o for o, _ in stored]


def _sink_rows(target: CliTarget, topic: str) -> list[tuple[int, tuple[bytes, bytes | None]]]:
    """The scripted records through the sink, then a roll of the segment (every record
    written is then in a closed segment); (offset, (key, value)) as stored."""
    records = scripted_records()
    written = list(zip(_sink_write(target, topic, records), records, strict=True))
    return written + roll_segment(lambda rolled: _sink_write(target, topic, rolled))


def test_the_sink_refuses_rows_without_a_key(target: CliTarget, spark_topic: str) -> None:
    compacted_topic(target.client, target.keys, spark_topic)
    opts = sink_options(target.url, spark_topic)
    with pytest.raises(SinkWriteError, match="compacted .* needs a non-null key"):
        write(target.client, opts, [Record(None, None, None, b"no key")])
    assert target.client.xlen(target.keys.partition(spark_topic, 0).log) == 0


def test_sink_written_records_compact_as_kafka_keeps(target: CliTarget, spark_topic: str) -> None:
    compacted_topic(target.client, target.keys, spark_topic, min_cleanable_dirty_ratio="0.1")
    written = _sink_rows(target, spark_topic)
    compact_now(target, spark_topic)
    assert _stored(target, spark_topic) == kafka_keeps(written)


def _stored(target: CliTarget, topic: str) -> list[tuple[int, tuple[bytes, bytes | None]]]:
    return [
        (codec.offset_of(i), (f[b"key"], f.get(b"value")))
        for i, f in target.client.xrange(target.keys.partition(topic, 0).log)
    ]


@pytest.mark.spark
def test_the_batch_reader_reads_what_compaction_keeps(
    spark: Any, target: CliTarget, spark_topic: str
) -> None:
    compacted_topic(target.client, target.keys, spark_topic, min_cleanable_dirty_ratio="0.1")
    written = _sink_rows(target, spark_topic)
    # k5 once more, in the active segment: k5's previous record stays (the cleaner keeps the
    # newest record of each key in the closed segments)
    late = [(b"k5", b"late")]
    active = list(zip(_sink_write(target, spark_topic, late), late, strict=True))
    assert "removed=" in compact_now(target, spark_topic)
    kept = sorted(kafka_keeps(written) + active)
    rows = batch_df(spark, target.url, spark_topic, maxRecordsPerPartition="5").collect()
    got = sorted((r.offset, (r.key.encode(), r.value and r.value.encode())) for r in rows)
    assert [r.partition for r in rows] == [0] * len(rows)
    # a tombstone reads as null (or empty: the reader's string column)
    assert [(o, (k, v or None)) for o, (k, v) in got] == kept
