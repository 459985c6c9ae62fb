"""Metadata's replicas and ISR (adapter/kafka/metadata.py reported_replicas): one broker id
per replica of the topic, as many as the replication factor ``inspect`` shows, the ISR the
brokers of the replicas in the partition's ISR, the leader first (docs/kafka.md)."""

from __future__ import annotations

import redis
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka.metadata import reported_replicas
from mapping.core.keys import Keys
from mapping.operations import inspection
from mapping.topic.brokers import partition_replicas
from tests.support.kafka import KAFKA_PODS_PREFIX, produce_delivered
from tests.support.pods import Pod
from tests.support.waiting import wait_until

BROKERS = [(1, "h", 1), (2, "h", 2), (3, "h", 3)]


def test_one_broker_id_per_replica_the_leader_first() -> None:
    ring, _ = partition_replicas(BROKERS, "t", 0, 3)
    leader = ring[0]
    # more replicas than live pods: ids repeat around the ring
    assert reported_replicas(BROKERS[:1], "t", 0, 3, [0, 1, 2]) == ([1, 1, 1], [1, 1, 1])
    assert reported_replicas(BROKERS, "t", 0, 3, [0, 1, 2]) == (ring, ring)
    assert reported_replicas(BROKERS, "t", 0, 1, [0]) == ([leader], [leader])
    # replica 1 out of sync: its broker is left out of the ISR, the leader stays first
    assert reported_replicas(BROKERS, "t", 0, 3, [0, 2]) == (ring, [leader, ring[2]])
    # assigned replicas: reported as assigned, the ISR their live, in-sync ones
    assert reported_replicas(BROKERS, "t", 0, 2, [0, 1], [3, 1]) == ([3, 1], [3, 1])
    assert reported_replicas(BROKERS, "t", 0, 2, [0], [3, 1]) == ([3, 1], [3])
    assert reported_replicas(BROKERS, "t", 0, 2, [0, 1], [9, 2]) == ([9, 2], [2])


def test_list_topics_agrees_with_inspect(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_url: str
) -> None:
    """confluent-kafka's list_topics for topics of replication factor 3 and 1 over two
    pods: as many replicas as inspect's replication_factor, every one in sync once the
    built-in replicator has caught up, as inspect's ISR says."""
    a, _ = kafka_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "socket.timeout.ms": 5000})
    names = {3: f"{topic}-rf3", 1: f"{topic}-rf1"}
    created = admin.create_topics(
        [NewTopic(n, 2, rf, config={"min.insync.replicas": "1"}) for rf, n in names.items()],
        request_timeout=10,
    )
    for future in created.values():
        assert future.result(10) is None
    brokers = sorted(admin.list_topics(timeout=10).brokers)
    for name in names.values():
        produce_delivered(a.bootstrap, name, [(p, b"k", b"v", []) for p in range(2)])
    keys = Keys(KAFKA_PODS_PREFIX)
    with redis.Redis.from_url(redis_url) as client:
        for rf, name in names.items():

            def in_sync(name: str = name, rf: int = rf) -> bool:
                view = inspection.topic(client, keys, name)
                return view is not None and all(len(p.isr) == rf for p in view.partition_views)

            wait_until(in_sync)
            view = inspection.topic(client, keys, name)
            assert view is not None and view.replication_factor == rf
            listed = admin.list_topics(name, timeout=10).topics[name].partitions
            for p, partition in sorted(listed.items()):
                assert len(partition.replicas) == rf
                assert len(partition.isrs) == len(view.partition_views[p].isr) == rf
                assert partition.replicas[0] == partition.isrs[0] == partition.leader
                assert set(partition.replicas) <= set(brokers)
                # two pods: both serve replicas of a topic with three
                assert len(set(partition.replicas)) == min(rf, len(brokers))
