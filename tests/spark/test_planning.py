"""The source's planning on the driver, without a SparkSession: records counted by their
entry numbers (spark_connector.planning) on logs the produce script wrote, Spark's
proportional maxOffsetsPerTrigger split and minPartitions task counts, the streaming
offsets' JSON (and the one-topic form of older checkpoints), the options' errors, and what
the stream reader plans for a topic that appears, a topic that is gone and minPartitions."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from mapping.core.keys import Keys
from spark_connector import offsets
from spark_connector.errors import DataLoss, OptionError
from spark_connector.options import parse_options
from spark_connector.planning import (
    cut_after,
    proportional_quotas,
    range_sizes,
    task_counts,
)
from spark_connector.records import source_schema
from spark_connector.source import RedisTopicsStreamReader
from tests.support.topic_writer import TopicWriter

BITS = 10
PAGE = 4


@pytest.fixture
def client(spark_redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(spark_redis_url)
    yield connection
    connection.close()


def sparse_records(writer: TopicWriter, topic: str, rounds: int = 6) -> list[int]:
    """Partition 0's offsets of a few produce calls milliseconds apart: runs of consecutive
    offsets with gaps between them."""
    produced: list[int] = []
    for r in range(rounds):
        produced += writer.produce(topic, 0, [(b"k", b"r%d-%d" % (r, i)) for i in range(r + 1)])
        time.sleep(0.003)
    return produced


def test_counts_and_cuts_by_entry_numbers(
    client: redis.Redis, writer: TopicWriter, spark_topic: str
) -> None:
    produced = sparse_records(writer, spark_topic)
    log = Keys().partition(spark_topic, 0).log
    assert len(produced) == 21 and produced[-1] - produced[0] > 1_000  # gaps of whole ms
    # starts on a record and in the gap before it, ends just past a record or mid-gap
    for i in (0, 3, 9):
        for j in (i, 10, 20):
            for start in (produced[i], produced[i - 1] + 1 if i else 0):
                for end in (produced[j] + 1, produced[j + 1] if j + 1 < 21 else produced[j] + 9):
                    size = range_sizes(client, Keys(), {(spark_topic, 0): (start, end)}, BITS, PAGE)
                    assert size == {(spark_topic, 0): j - i + 1}
                    for k in {1, 2, j - i, j - i + 1, j - i + 5} - {0}:
                        # right after the k-th record; the end when no record follows it
                        want = produced[i + k - 1] + 1 if i + k <= j else end
                        assert cut_after(client, log, start, end, k, BITS, PAGE) == want
    empty = range_sizes(client, Keys(), {(spark_topic, 0): (produced[2] + 1, produced[3])}, BITS, 4)
    assert empty == {(spark_topic, 0): 0}
    assert cut_after(client, log, produced[5], produced[9], 0, BITS, PAGE) == produced[5]


def test_a_log_written_before_numbering_is_counted_by_reading(client: redis.Redis) -> None:
    """Entries without an ``n`` field (appended before entries were numbered) are counted one
    by one: the same answers, and a cap where one is given."""
    topic = f"legacy-{uuid.uuid4().hex[:8]}"
    log = Keys().partition(topic, 0).log
    ids = [f"{1_000 + ms}-{seq}" for ms in range(0, 50, 7) for seq in range(3)]
    for entry_id in ids:
        client.xadd(log, {"key": "k", "value": "v", "ts": entry_id.split("-")[0]}, id=entry_id)
    offsets_ = [(int(ms) << BITS) | int(seq) for ms, seq in (i.split("-") for i in ids)]
    whole = (offsets_[0], offsets_[-1] + 1)
    assert range_sizes(client, Keys(), {(topic, 0): whole}, BITS, PAGE) == {(topic, 0): len(ids)}
    assert range_sizes(client, Keys(), {(topic, 0): whole}, BITS, PAGE, cap=5) == {(topic, 0): 5}
    assert cut_after(client, log, *whole, 7, BITS, PAGE) == offsets_[6] + 1
    assert cut_after(client, log, *whole, 99, BITS, PAGE) == whole[1]


def test_proportional_quotas_as_spark_splits_max_offsets_per_trigger() -> None:
    a, b, c = ("t", 0), ("t", 1), ("u", 0)
    assert proportional_quotas(100, {a: 100, b: 200, c: 700}) == {a: 10, b: 20, c: 70}
    # Spark gives a share below one record one record: here too, within the cap
    assert proportional_quotas(10, {a: 1, b: 1_000}) == {a: 1, b: 9}
    # three equal shares of 2/3 record: Spark would read 3; the cap holds at 2
    quotas = proportional_quotas(2, {a: 5, b: 5, c: 5})
    assert sum(quotas.values()) == 2 and set(quotas.values()) == {0, 1}
    # rounding leftovers go to the largest remainders
    assert proportional_quotas(10, {a: 13, b: 17, c: 70}) == {a: 1, b: 2, c: 7}
    assert proportional_quotas(50, {a: 13, b: 17}) == {a: 13, b: 17}  # all of it fits


def test_task_counts_as_spark_divides_ranges() -> None:
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    big = 10**9
    assert task_counts({a: 5, b: 7}, big, None) == {a: 1, b: 1}
    assert task_counts({a: 5, b: 0}, big, None) == {a: 1}  # no task for an empty range
    assert task_counts({a: 250, b: 100}, 100, None) == {a: 3, b: 1}  # maxRecordsPerPartition
    assert task_counts({a: 5, b: 7}, big, 2) == {a: 1, b: 1}  # already enough
    # Spark's minPartitions: ranges whose share is one task stay whole, the others share the
    # remaining tasks in proportion (KafkaOffsetRangeCalculator)
    assert task_counts({a: 10, b: 90}, big, 10) == {a: 1, b: 9}
    assert task_counts({a: 1, b: 1, c: 1_000}, big, 6) == {a: 1, b: 1, c: 4}
    assert task_counts({a: 40}, big, 4) == {a: 4}
    # both: the pieces of maxRecordsPerPartition, then minPartitions over them
    assert task_counts({a: 400, b: 10}, 200, 8) == {a: 8, b: 1}


def test_streaming_offsets_json(spark_redis_url: str) -> None:
    one = parse_options({"redis.url": spark_redis_url, "topic": "a"})
    two = parse_options({"redis.url": spark_redis_url, "subscribe": "a,b"})
    positions = {("a", 0): 5, ("a", 1): 7, ("b", 0): 9}
    assert offsets.to_json(positions) == {"a": {"0": 5, "1": 7}, "b": {"0": 9}}
    assert offsets.from_json(offsets.to_json(positions), two) == positions
    # a checkpoint this connector wrote before it read several topics
    assert offsets.from_json({"0": 5, "1": 7}, one) == {("a", 0): 5, ("a", 1): 7}
    with pytest.raises(OptionError, match="reads a, b, not one topic"):
        offsets.from_json({"0": 5}, two)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "option topic is required"),
        ({"topic": "a", "subscribe": "b"}, "only one of the options topic, subscribe"),
        ({"subscribe": " , "}, "option subscribe names no topic"),
        ({"subscribe": "a,b c"}, "a topic name is 1-249 characters"),
        ({"subscribePattern": "a("}, "not a Python regular expression"),
        ({"subscribePattern": " "}, "option subscribePattern is empty"),
        ({"subscribe": "a,b", "startingOffsets": '{"0": 1}'}, "name each partition's topic"),
        ({"topic": "a", "startingOffsets": '{"a": 3}'}, "'a' is not a partition number"),
        ({"topic": "a", "startingOffsets": '{"a": {"0": -3}}'}, "offset for partition 0 must"),
        ({"topic": "a", "startingTimestamp": "soon"}, "startingTimestamp must be a timestamp"),
        ({"topic": "a", "startingTimestamp": "-1"}, "startingTimestamp must be a timestamp"),
        ({"topic": "a", "endingTimestamp": "1.5"}, "endingTimestamp must be a timestamp"),
        ({"topic": "a", "startingOffsetsByTimestamp": "1000"}, "must be JSON like"),
        (
            {"topic": "a", "startingOffsetsByTimestamp": '{"a": {"0": -5}}'},
            "timestamp for partition 0 must be an integer >= 0",
        ),
        (
            {"topic": "a", "endingOffsetsByTimestamp": '{"a": {"x": 5}}'},
            "'x' is not a partition number",
        ),
        ({"topic": "a", "startingOffsetsByTimestampStrategy": "first"}, "must be 'error' or"),
        # a lower-preference option is checked too, although the timestamp wins
        ({"topic": "a", "startingTimestamp": "5", "startingOffsets": "x"}, "startingOffsets must"),
        ({"topic": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a positive"),
        (
            {"topic": "a", "maxOffsetsPerTrigger": "5", "maxRecordsPerTrigger": "6"},
            "are one setting",
        ),
        ({"topic": "a", "minPartitions": "-2"}, "minPartitions must be a positive integer"),
        ({"topic": "a", "includeHeaders": "yes"}, "includeHeaders must be 'true' or 'false'"),
    ],
)
def test_option_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options({"redis.url": "redis://127.0.0.1:1/0", **options})


def test_option_names_and_preferences() -> None:
    base = {"redis.url": "redis://127.0.0.1:1/0", "subscribe": " a, b,,a "}
    opts = parse_options(
        {
            **base,
            "startingTimestamp": "5",
            "startingOffsetsByTimestamp": '{"a": {"0": 7}}',
            "startingOffsets": "earliest",
            "maxRecordsPerTrigger": "9",
        }
    )
    assert opts.subscription.names == ("a", "b")
    assert opts.starting is not None and opts.starting.timestamp == 5  # Spark's preference
    assert opts.max_records_per_trigger == 9  # the former name of maxOffsetsPerTrigger
    by_partition = parse_options({**base, "startingOffsetsByTimestamp": '{"a": {"0": 7}}'})
    assert by_partition.starting is not None
    assert by_partition.starting.as_dict() == {("a", 0): 7}


def _reader(url: str, **options: str) -> RedisTopicsStreamReader:
    opts = parse_options({"redis.url": url, **options})
    return RedisTopicsStreamReader(opts, source_schema())


def test_stream_reader_reads_new_topics_from_their_start(
    spark_redis_url: str, writer: TopicWriter
) -> None:
    """A pattern's topic created after the query started is in the next micro-batch's end
    offset and read from its first record."""
    tag = uuid.uuid4().hex[:8]
    first, later = f"pat-{tag}-a", f"pat-{tag}-b"
    writer.produce(first, 1, [(b"k", b"a1")])
    reader = _reader(spark_redis_url, subscribePattern=f"pat-{tag}-.*", startingOffsets="latest")
    try:
        start = reader.initialOffset()
        assert set(start) == {first}
        sent = writer.produce(later, 2, [(b"k", b"b1"), (b"k", b"b2")])
        writer.produce(f"other-pat-{tag}-c", 0, [(b"k", b"no")])  # the whole name must match
        end = reader.latestOffset(start, ReadAllAvailable())
        assert set(end) == {first, later}
        assert end[later]["2"] == sent[-1] + 1
        tasks = reader.partitions(start, end)
        assert [(t.topic, t.partition, t.start, t.end) for t in tasks] == [
            (later, 2, 0, sent[-1] + 1)
        ]
    finally:
        reader.stop()


def test_stream_reader_reports_a_deleted_topic(
    spark_redis_url: str, writer: TopicWriter, spark_topic: str
) -> None:
    """A topic of the last offsets the topics no longer have: data loss (failOnDataLoss),
    as Spark reports a partition that is gone."""
    sent = writer.produce(spark_topic, 0, [(b"k", b"v")])
    start = {spark_topic: {"0": sent[0]}, "deleted-topic": {"0": 5, "1": 0}}
    end = {spark_topic: {"0": sent[0] + 1}}
    strict = _reader(spark_redis_url, subscribe=f"{spark_topic},deleted-topic")
    with pytest.raises(DataLoss, match="topic 'deleted-topic' partition 0 is gone"):
        strict.partitions(start, end)
    lenient = _reader(
        spark_redis_url, subscribe=f"{spark_topic},deleted-topic", failOnDataLoss="false"
    )
    tasks = lenient.partitions(start, end)
    assert [(t.topic, t.partition, t.start, t.end) for t in tasks] == [
        (spark_topic, 0, sent[0], sent[0] + 1)
    ]
    strict.stop()
    lenient.stop()


def test_stream_reader_plans_min_partitions_and_the_cap(
    spark_redis_url: str, writer: TopicWriter, spark_topic: str
) -> None:
    sent = writer.produce(spark_topic, 0, [(b"k", b"v%d" % i) for i in range(40)])
    writer.produce(spark_topic, 1, [(b"k", b"w%d" % i) for i in range(20)])
    reader = _reader(
        spark_redis_url,
        topic=spark_topic,
        startingOffsets="earliest",
        minPartitions="6",
        maxOffsetsPerTrigger="30",
    )
    try:
        start = reader.initialOffset()
        assert reader.getDefaultReadLimit() == ReadMaxRows(30)
        end = reader.latestOffset(start, ReadMaxRows(30))
        # 20 of partition 0's 40 records, 10 of partition 1's 20
        assert end[spark_topic]["0"] == sent[19] + 1
        tasks = reader.partitions(start, end)
        # 30 records over at least 6 tasks: partition 0's 20 in 4, partition 1's 10 in 2
        assert [(t.partition, t.end) for t in tasks if t.partition == 0] == [
            (0, sent[4] + 1), (0, sent[9] + 1), (0, sent[14] + 1), (0, sent[19] + 1),
        ]  # fmt: skip
        assert len([t for t in tasks if t.partition == 1]) == 2
    finally:
        reader.stop()
