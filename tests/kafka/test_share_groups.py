"""Share groups (KIP-932) with confluent-kafka's ShareConsumer on two pods sharing one Redis:
records handed out one member at a time, acknowledged (implicitly, or explicitly: accept,
release, reject)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from adapter.kafka.share_fetch import acquired_ranges
from mapping.core.keys import Keys
from tests.kafka.group_helpers import GROUP_PREFIX, POD_ARGS, produce
from tests.support.pods import Pod, start_all

PARTITIONS = 3
PER_PARTITION = 10
ACCEPT, RELEASE, REJECT = 1, 2, 3


@pytest.fixture(scope="module")
def share_pods(redis_url: str) -> Iterator[list[Pod]]:
    pods = [Pod(redis_url, *POD_ARGS) for _ in range(2)]
    start_all(pods)
    yield pods
    for pod in pods:
        pod.stop()


def _topic(pods: list[Pod], topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)
    produce(pods[0].bootstrap, topic, PARTITIONS, PER_PARTITION)
    return topic


def _earliest(pod: Pod, group: str) -> None:
    """The group starts at the log's start: share.auto.offset.reset=earliest, set as Kafka's
    clients set it (IncrementalAlterConfigs on the group resource)."""
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)
        ],
    )  # fmt: skip
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(timeout=15)
    assert entries["share.auto.offset.reset"].value == "earliest"
    assert entries["share.delivery.count.limit"].value == "5"


def _consumer(pod: Pod, group: str, **config: object) -> ShareConsumer:
    return ShareConsumer(
        {"bootstrap.servers": pod.bootstrap, "group.id": group, "socket.timeout.ms": 5000,
         **config}
    )  # fmt: skip


def _poll(consumer: ShareConsumer, timeout: float = 0.5) -> list:
    return [m for m in consumer.poll(timeout) if m.error() is None]


def _values(messages: list) -> list[bytes]:
    return [m.value() for m in messages]


def _expected() -> list[bytes]:
    return sorted(f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION))


def test_one_share_consumer_gets_every_record_once(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = _consumer(share_pods[0], group)
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            got += _values(_poll(consumer))
            if len(got) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(3):  # nothing more comes: implicitly accepted, never redelivered
            got += _values(_poll(consumer))
    finally:
        consumer.close()
    assert sorted(got) == _expected()


def test_two_share_consumers_on_two_pods_split_the_records(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumers = [_consumer(pod, group) for pod in share_pods]
    got: list[list[bytes]] = [[], []]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        for _ in range(60):
            for i, consumer in enumerate(consumers):
                got[i] += _values(_poll(consumer, 0.3))
            if len(got[0]) + len(got[1]) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(2):
            for i, consumer in enumerate(consumers):
                got[i] += _values(_poll(consumer, 0.3))
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(got[0] + got[1]) == _expected()  # each record to one of them, once
    assert not set(got[0]) & set(got[1])


def _explicit(pod: Pod, group: str) -> ShareConsumer:
    return _consumer(pod, group, **{"share.acknowledgement.mode": "explicit"})


def test_released_records_come_back_with_a_higher_delivery_count(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = _explicit(share_pods[0], group)
    counts: dict[bytes, list[int]] = {}
    try:
        consumer.subscribe([topic])
        for _ in range(80):
            messages = _poll(consumer)
            for m in messages:
                counts.setdefault(m.value(), []).append(m.delivery_count())
                # each record released on its first delivery, accepted on its second
                consumer.acknowledge(m, RELEASE if len(counts[m.value()]) == 1 else ACCEPT)
            if messages:
                consumer.commit_sync(10)
            if len(counts) == PARTITIONS * PER_PARTITION and all(
                len(c) == 2 for c in counts.values()
            ):
                break
    finally:
        consumer.close()
    assert sorted(counts) == _expected()
    assert {tuple(c) for c in counts.values()} == {(1, 2)}


def test_rejected_records_are_never_delivered_again(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = _explicit(share_pods[1], group)
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            messages = _poll(consumer)
            for m in messages:
                seen.append(m.value())
                consumer.acknowledge(m, REJECT)
            if messages:
                consumer.commit_sync(10)
            if len(seen) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(3):
            seen += _values(_poll(consumer))
    finally:
        consumer.close()
    assert sorted(seen) == _expected()  # each once: rejected, archived
    client = redis.Redis.from_url(redis_url)
    keys = Keys(GROUP_PREFIX)
    for p in range(PARTITIONS):  # nothing of the group is in flight
        pending = client.xpending(keys.partition(topic, p).log, keys.share_consumer_group(group))
        assert pending["pending"] == 0
    client.close()


def test_acquired_ranges_never_span_offsets_between_records() -> None:
    pairs = [(10, 1), (11, 1), (12, 2), (20, 2), (21, 2)]
    assert acquired_ranges(pairs) == [(10, 11, 1), (12, 12, 2), (20, 21, 2)]
