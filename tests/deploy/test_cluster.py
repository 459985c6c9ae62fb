"""The adapter on a real 3-node Redis Cluster (``redis+cluster://``): every command through
pods, scripts on all three nodes, the built-in replicator, and pub/sub across nodes."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid

import pytest

from mapping.connection.client import connect
from mapping.connection.cluster import connect_sync
from mapping.connection.embedded import free_port
from mapping.connection.startup import check_redis
from mapping.core.errors import ConfigurationError
from mapping.core.keys import Keys
from tests.support.pods import scrape_metrics

pytestmark = pytest.mark.slow


def _topics(count: int) -> list[str]:
    return [f"c-{uuid.uuid4().hex[:10]}" for _ in range(count)]


def test_produce_consume_on_every_node(cluster_url: str, start_pod) -> None:
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    topics = _topics(6)  # 18 partitions: their slots spread over the three nodes
    with pod.client() as client:
        replies = {}
        for topic in topics:
            for key in ("a", "b", "c", "user1"):
                replies[(topic, key)] = client.produce(topic, key, f"{topic}-{key}")
        for (topic, key), reply in replies.items():
            consumed = client.consume(topic, reply.partition, reply.offset)
            assert consumed.records[0] == (reply.offset, f"{topic}-{key}".encode())
    # The partitions' logs really are spread over the nodes.
    cluster = connect_sync(cluster_url)
    try:
        keys = Keys()
        nodes = {
            cluster.get_node_from_key(keys.partition(topic, p).log).name
            for topic in topics
            for p in range(3)
        }
    finally:
        cluster.close()
    assert len(nodes) == 3


def test_acks_all_with_the_builtin_replicator(cluster_url: str, start_pod) -> None:
    """Two pods share the replicator leases; acks=all answers once followers copied."""
    pods = [start_pod(cluster_url), start_pod(cluster_url)]
    topics = _topics(3)
    for i, topic in enumerate(topics):
        with pods[i % 2].client() as client:
            for key in ("a", "b", "c"):
                reply = client.produce(topic, key, "v", acks="all")
                assert reply.high_watermark >= reply.offset
                fetched = client.consume(topic, reply.partition, reply.offset)
                assert fetched.records[0][0] == reply.offset
    cluster = connect_sync(cluster_url, decode_responses=True)
    try:
        keys = Keys()
        state = cluster.hgetall(keys.partition(topics[0], 0).state)
        assert state["isr"] == "0 1 2"
    finally:
        cluster.close()


def test_scripts_reload_after_script_flush(cluster_url: str, start_pod, topic: str) -> None:
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    with pod.client() as client:
        first = client.produce(topic, "k", "one")
        cluster = connect_sync(cluster_url)
        try:
            for node in cluster.get_nodes():
                cluster.get_redis_connection(node).script_flush()
        finally:
            cluster.close()
        second = client.produce(topic, "k", "two")
        assert second.offset > first.offset
        assert [v for _, v in client.consume(topic, first.partition, 0).records] == [
            b"one",
            b"two",
        ]


def test_groups_on_the_cluster(cluster_url: str, start_pod, topic: str) -> None:
    metrics_port = free_port()
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1",
                    "--metrics-port", str(metrics_port))  # fmt: skip
    with pod.client() as client:
        joined = client.request("JOIN", f"g1 {topic} m1")
        assert joined.ok, joined
        generation = joined.fields()["generation"]
        reply = client.produce(topic, "user1", "v")
        committed = client.request(
            "COMMIT", f"g1 {topic} m1 {generation} {reply.partition} {reply.offset + 1}"
        )
        assert committed.ok, committed
        offset = client.request("OFFSET", f"g1 {topic} {reply.partition}")
        assert offset.payload == f"offset={reply.offset + 1}"
        client.produce_many(topic, [("user1", "later"), ("user1", "later")])
    # the metrics read the cluster too (scripts one call each: no EVALSHA in a cluster pipeline)
    samples = scrape_metrics(metrics_port)
    where = {"topic": topic, "partition": str(reply.partition)}
    lag = ("kafka_consumergroup_lag", tuple(sorted({"consumergroup": "g1", **where}.items())))
    assert samples[lag] == 2
    assert samples[("kafka_consumergroup_members", (("consumergroup", "g1"),))] == 1
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=10) as ready:
        assert ready.status == 200


def test_operations_cli_and_retention_on_the_cluster(cluster_url: str, start_pod) -> None:
    from click.testing import CliRunner

    from adapter.cli import main

    topic = _topics(1)[0]
    base = ["--redis-url", cluster_url]

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, *base])
        assert result.exit_code == 0, result.output
        return result.output

    cli("topic", "create", topic, "--replication-factor", "1", "--min-insync-replicas", "1")
    pod = start_pod(cluster_url)
    with pod.client() as client:
        sent = client.produce_many(topic, [("user1", f"v{i}") for i in range(4)])
    partition = sent[0].partition
    described = cli("inspect", "topic", topic).splitlines()
    assert described[1 + partition].startswith(
        f"partition={partition} role=leader last_offset={sent[-1].offset} "
        f"log_end_offset={sent[-1].offset + 1} hw={sent[-1].offset}"
    )
    assert f"topic={topic} partitions=3" in cli("inspect", "topics")
    cluster = connect_sync(cluster_url)
    try:
        cluster.sadd(Keys().groups, f"g {topic}")
        cluster.hset(Keys().group("g", topic).offsets, str(partition), sent[2].offset)
    finally:
        cluster.close()
    assert cli("inspect", "group", "g", topic).splitlines()[1 + partition].endswith("lag=2")
    cli("topic", "alter", topic, "--retention-ms", "0")
    trimmed = cli("topic", "trim", topic).splitlines()[partition]
    assert trimmed == (
        f"topic={topic} partition={partition} trimmed=2 first_offset={sent[2].offset}"
    )


def test_topic_ids_on_the_cluster(cluster_url: str, start_pod) -> None:
    """Topic ids on a cluster: the id is written with the topic hash, the id index lives in
    another slot; CreateTopics answers the id, Metadata and DeleteTopics find the topic by
    it, a topic made again has a new one and the old id is unknown from then on. The CLI
    and the Spark sink's creations are indexed alike."""
    from click.testing import CliRunner

    from adapter.cli import main
    from adapter.kafka import errors
    from adapter.kafka.versions import CREATE_TOPICS, DELETE_TOPICS, METADATA
    from mapping.topic.topics import TopicDefaults
    from spark_connector.appender import ensure_topic
    from tests.support.kafka import RawKafka

    topic, by_cli, by_spark = _topics(3)
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    create, delete, metadata = CREATE_TOPICS.request, DELETE_TOPICS.request, METADATA.request

    def created(raw: RawKafka) -> uuid.UUID:
        body = create[7](topics=[create.CreatableTopic(
            name=topic, num_partitions=2, replication_factor=1, assignments=[], configs=[],
        )], timeout_ms=5000, validate_only=False)  # fmt: skip
        (result,) = raw.call(CREATE_TOPICS, 7, body).topics
        assert result.error_code == errors.NONE
        return result.topic_id

    def by_id(raw: RawKafka, topic_id: uuid.UUID) -> tuple[int, str | None]:
        body = metadata[12](topics=[metadata.MetadataRequestTopic(name="", topic_id=topic_id)],
                            allow_auto_topic_creation=False)  # fmt: skip
        (answer,) = raw.call(METADATA, 12, body).topics
        return answer.error_code, answer.name

    with RawKafka(pod.kafka_port) as raw:
        first = created(raw)
        assert first is not None and first.int and by_id(raw, first) == (errors.NONE, topic)
        body = delete[6](topics=[delete[6].DeleteTopicState(name=None, topic_id=first)],
                         timeout_ms=5000)  # fmt: skip
        (deleted,) = raw.call(DELETE_TOPICS, 6, body).responses
        assert (deleted.name, deleted.error_code) == (topic, errors.NONE)
        second = created(raw)
        assert second.int and second != first
        assert by_id(raw, first) == (errors.UNKNOWN_TOPIC_ID, None)
        assert by_id(raw, second) == (errors.NONE, topic)

        args = ["--replication-factor", "1", "--min-insync-replicas", "1"]
        made = CliRunner().invoke(
            main, ["topic", "create", by_cli, *args, "--redis-url", cluster_url]
        )
        assert made.exit_code == 0, made.output
        cluster = connect_sync(cluster_url)
        try:
            spark = ensure_topic(cluster, Keys(), by_spark, TopicDefaults(1, 1, 1))
            for name in (by_cli, by_spark):
                topic_id = cluster.hget(Keys().topic(name), "topic_id").decode()
                assert cluster.hget(Keys().topic_ids, topic_id) == name.encode()
                assert by_id(raw, uuid.UUID(topic_id)) == (errors.NONE, name)
            assert spark.topic_id == cluster.hget(Keys().topic(by_spark), "topic_id").decode()
        finally:
            cluster.close()


def test_spark_connector_reads_and_commits_on_the_cluster(cluster_url: str, start_pod) -> None:
    """The connector's Redis side (what Spark's driver and executors call) on a cluster."""
    from spark_connector import offsets
    from spark_connector.group_commit import commit_group_offsets
    from spark_connector.options import parse_options
    from spark_connector.records import read_partition, source_schema

    topic = _topics(1)[0]
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    with pod.client() as client:
        sent = client.produce_many(topic, [(f"k{i}", f"v{i}") for i in range(12)])
    opts = parse_options({"redis.url": cluster_url, "topic": topic})
    keys = Keys()
    driver = offsets.connect(opts)
    try:
        info = offsets.describe_topic(driver, keys, topic)
        ends = offsets.end_positions(driver, keys, topic, info.partitions)
        read: dict[bytes, int] = {}
        for p in range(info.partitions):
            split = offsets.RangePartition(p, 0, ends[p], info.sequence_bits)
            for batch in read_partition(opts, source_schema(), split):
                for row in batch.to_pylist():
                    read[row["value"].encode()] = row["offset"]
        assert read == {f"v{i}".encode(): r.offset for i, r in enumerate(sent)}
        stored = commit_group_offsets(driver, keys, "spark", topic, ends)
        assert stored == ends
        assert f"spark {topic}".encode() in driver.smembers(keys.groups)  # inspect lists it
        assert offsets.group_positions(driver, keys, "spark", topic, info.partitions) == ends
    finally:
        driver.close()


def test_one_evicting_primary_refuses_the_cluster(cluster_url: str) -> None:
    """The eviction check reads every primary, not just the node the URL names."""
    cluster = connect_sync(cluster_url)
    last = sorted(cluster.get_primaries(), key=lambda node: node.port)[-1]
    url = f"redis+cluster://127.0.0.1:{min(n.port for n in cluster.get_primaries())}"

    async def check() -> None:
        client = connect(url)
        try:
            await check_redis(client, Keys(), sequence_bits=10, require_aof=False, url=url)
        finally:
            await client.aclose()

    asyncio.run(check())  # all noeviction
    cluster.config_set("maxmemory-policy", "volatile-lru", target_nodes=last)
    try:
        with pytest.raises(ConfigurationError, match="maxmemory-policy volatile-lru"):
            asyncio.run(check())
    finally:
        cluster.config_set("maxmemory-policy", "noeviction", target_nodes=last)
        cluster.close()
