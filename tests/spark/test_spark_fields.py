"""The Spark connector's reader (spark_connector.records.to_batch, no Spark session needed)
turns Kafka-made entries into rows: null key and null value as nulls, the append time."""

from __future__ import annotations

import pytest

from adapter.kafka import errors
from adapter.kafka.versions import METADATA, PRODUCE
from mapping.core.keys import Keys
from tests.support.kafka import (
    KAFKA_PODS_PREFIX,
    RawKafka,
    Record,
    encode_batch,
    partition_reply,
    produce_body,
)
from tests.support.pods import Pod

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


def test_spark_rows_of_kafka_records(kafka_pods: tuple[Pod, Pod], topic: str, redis_client) -> None:
    from spark_connector.records import arrow_schema, source_schema, to_batch

    a, _ = kafka_pods
    sent = [
        Record(b"k", b"v", 1_700_000_000_000, [("h", b"x")]),
        Record(None, b"no key", 1_700_000_000_001, []),
        Record(b"gone", None, 1_700_000_000_002, []),
    ]
    with RawKafka(a.kafka_port) as raw:
        raw.call(METADATA, 12, METADATA.request[12](
            topics=[METADATA.request.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=True,
        ))  # fmt: skip
        reply = raw.call(PRODUCE, 9, produce_body(topic, 0, encode_batch(sent)))
        assert partition_reply(reply).error_code == errors.NONE
    entries = redis_client.xrange(Keys(KAFKA_PODS_PREFIX).partition(topic, 0).log)
    batch = to_batch(entries, topic, 0, 10, True, arrow_schema(source_schema(binary=True)))
    rows = batch.to_pylist()
    assert [(r["key"], r["value"]) for r in rows] == [
        (b"k", b"v"),
        (None, b"no key"),
        (b"gone", None),
    ]
    assert all(r["timestamp"] is not None for r in rows)  # the append time
