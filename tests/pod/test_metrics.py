"""The Prometheus endpoint: counters, histograms and consumer lag after real traffic."""

from __future__ import annotations

import json
import time

import redis
from confluent_kafka import Consumer, TopicPartition

from mapping.connection.embedded import free_port
from mapping.core.keys import Keys
from mapping.topic.topics import alter_configs_sync, ensure_topic_sync
from tests.support.pods import RF1, scrape_metrics
from tests.support.waiting import wait_until


def test_metrics_after_traffic(redis_url: str, start_pod, topic: str) -> None:
    port = free_port()
    pod = start_pod(redis_url, "--metrics-port", str(port), "--metrics-host", "127.0.0.1", *RF1)
    with pod.client() as client:
        replies = client.produce_many(topic, [("user1", f"v{i}") for i in range(10)])
        client.consume(topic, 2, 0)
        bad = client.request("CONSUME", f"{topic} 9 0")
        assert not bad.ok and bad.code == "BAD_REQUEST"
        # A group with a committed offset in the documented layout (written the way the
        # group scripts and the Spark connector write it): 4 of the 10 records consumed.
        keys = Keys()
        store = redis.Redis.from_url(redis_url)
        group = f"g-{topic}"
        try:
            store.sadd(keys.groups, f"{group} {topic}")
            store.hset(keys.group(group, topic).offsets, "2", replies[4].offset)
        finally:
            store.close()
        samples = scrape_metrics(port)
    assert samples[("adapter_requests_total", (("command", "PRODUCE"),))] == 10
    assert samples[("adapter_requests_total", (("command", "CONSUME"),))] == 2
    assert samples[("adapter_errors_total", (("code", "BAD_REQUEST"), ("command", "CONSUME")))] == 1
    assert samples[("adapter_request_seconds_count", (("command", "PRODUCE"),))] == 10
    assert samples[("adapter_redis_round_trips_total", ())] >= 1
    assert samples[("adapter_redis_batch_size_sum", ())] >= 12
    assert samples[("adapter_connections", ())] == 1  # the test client, still open
    # backpressure: nothing in flight or waiting once everything was answered
    assert samples[("adapter_append_bytes_in_flight", ())] == 0
    assert samples[("adapter_connections_waiting", ())] == 0
    lag = ("group", group), ("partition", "2"), ("topic", topic)
    assert samples[("adapter_consumer_lag_records", lag)] == 6
    assert samples[("adapter_consumer_committed_offset", lag)] == replies[4].offset
    # the standard process metrics (prometheus-client's collectors)
    assert samples[("process_resident_memory_bytes", ())] > 0
    assert ("process_cpu_seconds_total", ()) in samples
    assert ("process_open_fds", ()) in samples
    assert [key for key in samples if key[0] == "python_info"]
    assert ("python_gc_objects_collected_total", (("generation", "0"),)) in samples


def _key(name: str, **labels: str) -> tuple[str, tuple]:
    return name, tuple(sorted(labels.items()))


def test_lag_in_records_under_kafka_exporters_names(redis_url: str, start_pod, topic: str) -> None:
    """A V1 group 6 records behind and a Kafka group 3 behind show exactly that under the
    adapter's name and kafka_exporter's; members of both protocols; partitions' offsets,
    replicas and leaders; one broker (a key prefix of the test's own: only this pod)."""
    port = free_port()
    prefix = f"kafka-names-{port}"
    pod = start_pod(
        redis_url, "--metrics-port", str(port), "--key-prefix", prefix, *RF1,
        "--no-replicator", "--replica-lag-max-ms", "0",
    )  # fmt: skip
    replicated = f"{topic}-rf3"
    store = redis.Redis.from_url(redis_url)
    ensure_topic_sync(store, Keys(prefix), replicated, 1, 3, 1)
    kafka_group = f"k-{topic}"
    consumer = Consumer({
        "bootstrap.servers": pod.bootstrap, "group.id": kafka_group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })  # fmt: skip
    with pod.client() as client:
        replies = client.produce_many(topic, [("user1", f"v{i}") for i in range(10)])
        assert {reply.partition for reply in replies} == {2}

        def followers_left() -> bool:
            """Followers that never fetch (no replicator) leave the ISR at the first append
            in a later millisecond than the one they were last caught up in."""
            client.produce(replicated, "k", "v")
            return store.hget(Keys(prefix).partition(replicated, 0).state, "isr") == b"0"

        try:
            wait_until(followers_left)
        finally:
            store.close()
        member = client.join("billing", topic, "c1")
        client.commit("billing", topic, "c1", member.generation, 2, replies[4].offset)
        try:
            consumer.subscribe([topic])

            def joined() -> bool:
                consumer.poll(0.2)
                return bool(consumer.assignment())

            wait_until(joined, timeout=30)
            consumer.commit(
                offsets=[TopicPartition(topic, 2, replies[7].offset)], asynchronous=False
            )
            samples = scrape_metrics(port)
        finally:
            consumer.close()  # LeaveGroup
        left = scrape_metrics(port)

    p2, p0 = {"topic": topic, "partition": "2"}, {"topic": topic, "partition": "0"}
    assert samples[_key("kafka_consumergroup_lag", consumergroup="billing", **p2)] == 6
    assert samples[_key("adapter_consumer_lag_records", group="billing", **p2)] == 6
    assert samples[_key("kafka_consumergroup_lag", consumergroup=kafka_group, **p2)] == 3
    assert samples[_key("adapter_consumer_lag_records", group=kafka_group, **p2)] == 3
    assert samples[_key("kafka_consumergroup_lag_sum", consumergroup="billing", topic=topic)] == 6
    current = _key("kafka_consumergroup_current_offset", consumergroup="billing", **p2)
    assert samples[current] == replies[4].offset
    # partition 0: nothing committed there (kafka_exporter's -1)
    assert samples[_key("kafka_consumergroup_lag", consumergroup="billing", **p0)] == -1
    assert samples[_key("kafka_consumergroup_members", consumergroup="billing")] == 1
    assert samples[_key("kafka_consumergroup_members", consumergroup=kafka_group)] == 1
    assert left[_key("kafka_consumergroup_members", consumergroup=kafka_group)] == 0

    assert samples[_key("kafka_topic_partitions", topic=topic)] == 3
    assert samples[_key("kafka_topic_partition_current_offset", **p2)] == replies[-1].offset + 1
    assert samples[_key("kafka_topic_partition_oldest_offset", **p2)] == replies[0].offset
    assert samples[_key("kafka_topic_partition_current_offset", **p0)] == 0  # empty
    assert samples[_key("kafka_topic_partition_oldest_offset", **p0)] == 0
    assert samples[_key("kafka_topic_partition_replicas", **p2)] == 1
    assert samples[_key("kafka_topic_partition_under_replicated_partition", **p2)] == 0
    lagging = {"topic": replicated, "partition": "0"}
    assert samples[_key("kafka_topic_partition_replicas", **lagging)] == 3
    assert samples[_key("kafka_topic_partition_in_sync_replica", **lagging)] == 1
    assert samples[_key("kafka_topic_partition_under_replicated_partition", **lagging)] == 1

    assert samples[_key("kafka_brokers")] == 1
    [(_, info)] = [key for key in samples if key[0] == "kafka_broker_info"]
    node = dict(info)
    assert node["address"] == pod.bootstrap
    for p in ("0", "1", "2"):
        assert samples[_key("kafka_topic_partition_leader", topic=topic, partition=p)] == int(
            node["id"]
        )


def test_json_logs(redis_url: str, start_pod) -> None:
    pod = start_pod(redis_url)
    line = wait_until(lambda: next(iter(pod.log().splitlines()), None))
    record = json.loads(line)
    assert record["level"] == "INFO" and record["logger"] == "adapter.server"
    assert "serving V1" in record["message"] and record["pod"]


def test_compaction_metrics(redis_url: str, start_pod, topic: str) -> None:
    """Records compaction removed (a counter of the lease holder's runs) and the dirty
    records of each compacted partition (read on scrape)."""
    port = free_port()
    # a prefix of its own: the retention lease (which runs compaction) is then this pod's,
    # not another test's pod's on the same Redis
    prefix = f"compaction-metrics-{port}"
    pod = start_pod(
        redis_url, "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
        "--retention-interval-ms", "100", "--key-prefix", prefix, *RF1,
    )  # fmt: skip
    with pod.client() as client:
        client.produce_many(topic, [("user1", "first")])  # the topic appears
        store = redis.Redis.from_url(redis_url)
        try:
            # a small segment.ms: the record after them rolls the segment (docs/compaction.md)
            changes = {
                "cleanup_policy": "compact",
                "min_cleanable_dirty_ratio": "0.01",
                "segment_ms": "1",
            }
            alter_configs_sync(store, Keys(prefix), topic, changes)
        finally:
            store.close()
        # the pod reads the change (pub/sub), then its appends index: 4 superseded of 5
        wait_until(lambda: _indexing(client, topic), timeout=10)
        client.produce_many(topic, [("user1", f"v{i}") for i in range(4)])
        time.sleep(0.01)  # not a synchronisation: the next record's append time past segment.ms
        client.produce_many(topic, [("user2", "roll")])  # user2: user1's partition, 2
        removed = ("adapter_compaction_removed_records_total",
                   (("kind", "superseded"), ("topic", topic)))  # fmt: skip
        wait_until(lambda: scrape_metrics(port).get(removed, 0) >= 4, timeout=10)
        samples = scrape_metrics(port)
    dirty = ("adapter_compaction_dirty_records", (("partition", "2"), ("topic", topic)))
    assert samples[dirty] == 0
    assert samples[removed] == 4  # "first" (indexed by the cursor) and v0..v2


def _indexing(client, topic: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether the pod refuses a keyless V1 record on the topic: it holds the new config."""
    reply = client.request("PRODUCE", f"{topic} :value")
    return not reply.ok
