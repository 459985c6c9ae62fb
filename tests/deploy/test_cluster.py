"""The adapter on a real 3-node Redis Cluster (``redis+cluster://``): every command through
pods, scripts on all three nodes, the built-in replicator, and pub/sub across nodes."""

from __future__ import annotations

import uuid

import pytest

from mapping.cluster import connect_sync
from mapping.keys import Keys

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
    pod = start_pod(cluster_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    with pod.client() as client:
        joined = client.request("JOIN", f"g1 {topic} m1")
        if not joined.ok and joined.code == "UNKNOWN_COMMAND":
            pytest.skip("consumer groups (JOIN/SYNC/COMMIT) have not landed on this branch yet")
        assert joined.ok, joined
        generation = joined.fields()["generation"]
        reply = client.produce(topic, "user1", "v")
        committed = client.request(
            "COMMIT", f"g1 {topic} m1 {generation} {reply.partition} {reply.offset + 1}"
        )
        assert committed.ok, committed
        offset = client.request("OFFSET", f"g1 {topic} {reply.partition}")
        assert offset.payload == f"offset={reply.offset + 1}"
