"""The Prometheus endpoint: counters, histograms and consumer lag after real traffic."""

from __future__ import annotations

import json

import redis

from mapping.embedded import free_port
from mapping.keys import Keys
from mapping.topics import alter_configs_sync
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
            changes = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": "0.01"}
            alter_configs_sync(store, Keys(prefix), topic, changes)
        finally:
            store.close()
        # the pod reads the change (pub/sub), then its appends index: 4 superseded of 5
        wait_until(lambda: _indexing(client, topic), timeout=10)
        client.produce_many(topic, [("user1", f"v{i}") for i in range(4)])
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
