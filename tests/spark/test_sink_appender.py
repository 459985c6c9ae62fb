"""The sink's Redis side (``spark_connector.appender``) against a real redis-server, without
Spark: the replay markers, partitioning, headers and acks=all waiting of ``spark/sink_append.lua``;
and the sink's option and column checks.
Records are read back through the real consume script (``Partitions.consume``, as V1 CONSUME)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from mapping.core.keys import Keys
from mapping.partition.partition_scripts import LATEST_OFFSET, PartitionHead
from mapping.topic.partitioner import partition_for
from mapping.topic.topic_config import TopicDefaults
from spark_connector.appender import Appender, load_scripts, sequence_bits, spark_sink_append_call
from spark_connector.options import OptionError
from spark_connector.sink_options import SinkOptions, SinkWriteError, parse_sink_options
from spark_connector.sink_records import (
    Record,
    check_sink_schema,
)
from tests.support.topic_writer import TopicWriter
from tests.support.waiting import wait_until


@pytest.fixture
def client(spark_redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(spark_redis_url)
    yield connection
    connection.close()


def sink_options(url: str, topic: str, **extra: str) -> SinkOptions:
    return parse_sink_options(
        {"redis.url": url, "topic": topic, "topic.replicationFactor": "1", **extra}
    )


def write(
    client: redis.Redis,
    opts: SinkOptions,
    records: list[Record],
    *,
    marker: str | None = "w:0",
    epoch: int = 0,
    stop_after: int | None = None,
    append_module: bool | None = None,
) -> int:
    """Run one task's writes; ``stop_after`` = crash after that many flushed records;
    ``append_module`` False: as on a Redis without the streamadapter module."""
    appender = Appender(
        client,
        opts,
        sequence_bits(client, Keys(opts.key_prefix)),
        marker=marker,
        epoch=epoch,
        task_partition=0,
    )
    if append_module is not None:
        appender.append_module = append_module
    for i, record in enumerate(records):
        if stop_after is not None and i == stop_after:
            appender.flush()
            return sum(t.appended for t in appender._targets.values())
        appender.add(record)
    return sum(w.appended for w in appender.finish())


def keyed(n: int, prefix: str = "v") -> list[Record]:
    return [Record(None, None, b"k%d" % (i % 7), b"%s%d" % (prefix.encode(), i)) for i in range(n)]


def all_values(writer: TopicWriter, topic: str) -> list[bytes]:
    config = writer.topic(topic)
    return [v for p in range(config.partitions) for _, v in writer.consume_all(topic, p)]


@pytest.mark.parametrize("module", [True, False], ids=["module", "scripts' XADDs"])
def test_replayed_task_stores_each_record_once(
    client, spark_redis_url, writer, spark_topic, module: bool
) -> None:
    # keyed records: each chunk goes as key, value pairs (spark/sink_append.lua's 'pairs')
    opts = sink_options(spark_redis_url, spark_topic, batchSize="10")
    records = keyed(95)
    # The first attempt dies after 40 records were flushed (several chunks, several
    # partitions); the retry sends everything again with the same marker and epoch.
    assert write(client, opts, records, stop_after=40, append_module=module) == 40
    assert write(client, opts, records, append_module=module) == 55
    # A replay of a finished task stores nothing, whatever its chunking.
    again = sink_options(spark_redis_url, spark_topic, batchSize="3")
    assert write(client, again, records, append_module=module) == 0
    assert sorted(all_values(writer, spark_topic)) == sorted(r.value for r in records)
    # Each record sits in the partition V1 PRODUCE would choose, in the task's order, with
    # V1's fields (mapping/core/records.py: key, value, the append time, the number).
    for p in range(3):
        expected = [r.value for r in records if partition_for(r.key, 3) == p]
        assert [v for _, v in writer.consume_all(spark_topic, p)] == expected
        entries = client.xrange(Keys().partition(spark_topic, p).log)
        assert {tuple(fields) for _, fields in entries} == {(b"key", b"value", b"ts", b"n")}
        assert [int(fields[b"n"]) for _, fields in entries] == list(range(1, len(entries) + 1))


def test_next_epoch_appends_and_older_epoch_is_skipped(
    client, spark_redis_url, writer, spark_topic
) -> None:
    opts = sink_options(spark_redis_url, spark_topic)
    assert write(client, opts, keyed(5, "a"), epoch=3) == 5
    assert write(client, opts, keyed(5, "b"), epoch=4) == 5
    assert write(client, opts, keyed(5, "a"), epoch=3) == 0  # already superseded
    assert write(client, opts, keyed(5, "c"), marker=None) == 5  # no marker: plain appends
    assert write(client, opts, keyed(5, "c"), marker=None) == 5
    assert len(all_values(writer, spark_topic)) == 20


def test_partition_column_null_keys_values_and_headers(
    client, spark_redis_url, writer, spark_topic
) -> None:
    opts = sink_options(spark_redis_url, spark_topic)
    records = [
        Record(None, 1, b"user1", b"pinned", [("h", b"\xff\x00x"), ("n", None)]),  # FNV: 2
        *(Record(None, None, None, b"nokey%d" % i) for i in range(6)),
        Record(None, 0, b"gone", None),  # a tombstone
    ]
    write(client, opts, records)
    # Null keys are spread over the partitions, two each.
    assert [len(writer.consume_all(spark_topic, p)) for p in range(3)] == [3, 3, 2]
    # V1 CONSUME shows a null value as empty.
    assert writer.consume_all(spark_topic, 0)[-1][1] == b""
    entries = {p: client.xrange(Keys().partition(spark_topic, p).log) for p in range(3)}
    # The fields the Kafka front door writes: key/value absent when null, "null" names them,
    # one h:<name> per header (hn:<name> for a null header value), ts as PRODUCE writes it,
    # and n, the entry's number in its partition, as every append writes it (lib/append.lua).
    pinned = entries[1][0][1]
    assert list(pinned) == [b"key", b"value", b"ts", b"h:h", b"hn:n", b"n"]
    assert [e[1][b"n"] for e in entries[1]] == [b"1", b"2", b"3"]
    assert (pinned[b"key"], pinned[b"value"], pinned[b"h:h"]) == (b"user1", b"pinned", b"\xff\x00x")
    no_key = entries[0][0][1]
    assert (b"key" in no_key, no_key[b"value"], no_key[b"null"]) == (False, b"nokey0", b"key")
    tombstone = entries[0][-1][1]
    assert (b"value" in tombstone, tombstone[b"null"]) == (False, b"value")
    with pytest.raises(SinkWriteError, match="partition 3 is outside"):
        write(client, opts, [Record(None, 3, b"k", b"v")])


def test_acks_all_waits_for_replicas_then_times_out_without_them(
    client, spark_redis_url, spark_topic
) -> None:
    # RF 2, min ISR 2, no replicator: the follower (in the ISR within the lag window) must
    # copy the records before hw reaches them.
    rf2 = TopicDefaults(partitions=1, replication_factor=2, min_insync_replicas=2)
    follower = TopicWriter(spark_redis_url, replica_lag_max_ms=60_000, defaults=rf2)
    settings = {"redis.url": spark_redis_url, "topic": spark_topic, "replicaLagMaxMs": "60000"}
    try:
        config = follower.topic(spark_topic)
        # acks=1: done once the leader log has them, whatever the followers.
        leader_only = parse_sink_options({**settings, "acks": "1"})
        assert write(client, leader_only, keyed(2, "early"), marker="t:1") == 2
        impatient = parse_sink_options({**settings, "acks.timeoutMs": "300"})
        with pytest.raises(SinkWriteError, match="REPLICATION_TIMEOUT"):
            write(client, impatient, keyed(3), marker="t:0")
        # The records stay in the log; the retry appends nothing and waits for the follower.
        retried: list[int] = []
        retry = threading.Thread(
            target=lambda: retried.append(
                write(
                    client_of(spark_redis_url), parse_sink_options(settings), keyed(3), marker="t:0"
                )
            )
        )
        retry.start()
        hw_channel = Keys().partition(spark_topic, 0).hw_channel
        wait_until(lambda: client.pubsub_numsub(hw_channel)[0][1] > 0)
        follower._call(follower.partitions.replica_fetch(config, 0, 1, LATEST_OFFSET))
        retry.join(timeout=30)
        assert retried == [0]
        assert len(follower.consume_all(spark_topic, 0)) == 5
    finally:
        follower.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"acks": "2"}, "acks must be 0, 1 or all"),
        ({"batchSize": "0"}, "batchSize must be a positive"),
        ({"acks.timeoutMs": "x"}, "acks.timeoutMs must be a positive"),
        ({"replicaLagMaxMs": "-1"}, "replicaLagMaxMs must be an integer >= 0"),
        ({"batchId": "3"}, "batchId needs option writerId"),
        ({"writerId": "a b"}, "writerId must be 1-249"),
        ({"topic": "a:b"}, "topic must be 1-249"),
        ({"bogus": "1"}, "unknown sink option"),
        ({"redis.url": "http://x"}, "redis.url must be"),
    ],
)
def test_bad_sink_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_sink_options({"redis.url": "redis://localhost:1/0", "topic": "t", **options})


def test_sink_option_defaults() -> None:
    opts = parse_sink_options({"redis.url": "redis://localhost:1/0", "TOPIC": "t"})
    assert (opts.topic, opts.acks, opts.batch_size, opts.writer_id) == ("t", "all", 1000, None)
    # min ISR above the replication factor could never be met: capped, as the pod does
    capped = parse_sink_options(
        {"redis.url": "redis://x:1/0", "topic.replicationFactor": "1", "topic": "t"}
    )
    assert capped.new_topics == TopicDefaults(3, 1, 1)


HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def schema(**columns: DataType) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in columns.items()])


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        (schema(key=StringType(), value=StringType()), None, "needs a topic"),
        (schema(key=StringType(), v=StringType()), "t", "needs a 'value' column"),
        (schema(partition=StringType(), value=StringType()), "t", "'partition' must be int"),
        (schema(topic=IntegerType(), value=StringType()), "t", "'topic' must be string"),
        (schema(headers=ArrayType(StringType()), value=BinaryType()), "t", "'headers' must be"),
    ],
)
def test_bad_sink_columns(columns: StructType, topic: str | None, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        check_sink_schema(columns, topic)


def test_good_sink_columns() -> None:
    columns = schema(
        topic=StringType(),
        partition=IntegerType(),
        key=BinaryType(),
        value=StringType(),
        extra=DoubleType(),  # ignored, as by Kafka's sink
        headers=HEADERS,
    )
    check_sink_schema(columns, None)  # raises on any problem


def client_of(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def test_sink_appends_keep_numbers_and_size_marks_as_produce_does(
    client, spark_redis_url, spark_topic
) -> None:
    """The sink appends through lib/append.lua like PRODUCE: entries numbered in order and the
    value size marks kept, so CONSUME sizes its reads of sink-written records too."""
    opts = sink_options(spark_redis_url, spark_topic)
    write(client, opts, [Record(None, 0, b"k", b"x" * 1000), Record(None, 0, b"k", b"small")])
    partition = Keys().partition(spark_topic, 0)
    entries = client.xrange(partition.log)
    assert [e[1][b"n"] for e in entries] == [b"1", b"2"]
    state = client.hgetall(partition.state)
    last = state[b"log_end"]
    # 1000 bytes is more than 2^7, 2^8 and 2^9 bytes, not more than 2^10.
    assert [state.get(b"size.%d" % k) for k in (7, 8, 9, 10)] == [last, last, last, None]
    assert (state[b"appended"], state[b"size.from"]) == (b"2", b"0")


def test_cluster_wide_broker_configs_apply_to_the_sink(
    client: redis.Redis, spark_redis_url: str, spark_topic: str
) -> None:
    """The cluster-wide message.max.bytes and log.cleanup.policy (the broker configs hash
    the pods read) are the sink's topic defaults too, read once per task."""
    keys = Keys()
    client.hset(
        keys.broker_configs, mapping={"message.max.bytes": "300", "log.cleanup.policy": "compact"}
    )
    try:
        opts = sink_options(spark_redis_url, spark_topic)
        with pytest.raises(SinkWriteError, match="at most 300"):
            write(client, opts, [Record(None, 0, b"k", b"x" * 400)], marker=None)
        with pytest.raises(SinkWriteError, match="is compacted"):
            write(client, opts, [Record(None, 0, None, b"small")], marker=None)
        assert write(client, opts, [Record(None, 0, b"k", b"small")], marker=None) == 1
        # compacted: the append indexed the key
        assert client.hexists(keys.partition(spark_topic, 0).compact_index, "k")
    finally:
        client.delete(keys.broker_configs)
    # without them, the same rows go in
    assert write(client, opts, [Record(None, 0, None, b"x" * 400)], marker=None) == 1


def test_keyed_chunks_go_packed_to_the_module_skipping_what_a_replay_stored(
    client: redis.Redis, spark_topic: str
) -> None:
    """With the module, a chunk of keyed records without headers is one packed argument
    (spark/sink_append.lua's 'packed'); a replayed chunk skips, inside it, the records its
    marker says are stored. Without the module, or on a compacted partition: key, value
    pairs. The script refuses packed records it cannot hand to the module."""
    keys = Keys()
    head = PartitionHead(keys.partition(spark_topic, 0), sequence_bits(client, keys), 1, 10_000)
    markers = keys.sink_markers(spark_topic, 0)
    chunk = [Record(None, 0, b"k%d" % i, b"v%d" % i) for i in range(8)]

    def call(records: list[Record], module: bool = True, compaction: tuple = ()) -> tuple:
        return spark_sink_append_call(head, markers, "w:0", 0, 0, records, compaction, module)

    assert "packed" in call(chunk)
    assert "pairs" in call(chunk, module=False)
    assert "pairs" in call(chunk, compaction=("index", "dirty", "tombstones"))
    load_scripts(client)
    forged = list(call(chunk))
    forged[forged.index("packed") - 1] = "0"  # as if Redis had no module
    with pytest.raises(redis.ResponseError, match="need the module"):
        client.execute_command(*forged)
    assert client.exists(head.keys.log) == 0
    # the first five stored, then the task sends all eight again: three more
    assert client.execute_command(*call(chunk[:5]))[2] == 5
    assert client.execute_command(*call(chunk))[2] == 3
    assert client.execute_command(*call(chunk))[2] == 0
    entries = client.xrange(head.keys.log)
    assert [(f[b"key"], f[b"value"]) for _, f in entries] == [(r.key, r.value) for r in chunk]
