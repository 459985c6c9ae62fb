"""Share groups (KIP-932) across a topic's life: a topic deleted and created again under the
same name starts its share-partitions anew (``share.auto.offset.reset`` applies, never an
old position), and retention deleting records in flight takes them out of the share group
(Kafka: retention wins) without stopping the next acquisitions; with confluent-kafka's
ShareConsumer and AdminClient against a real pod."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.kafka import produce_delivered
from tests.support.pods import RF1, Pod
from tests.support.share_groups import earliest, killed_holder, share_consumer
from tests.support.waiting import wait_until

PARTITIONS = 2


@pytest.fixture(scope="module")
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"slife{uuid.uuid4().hex[:8]}"), client)
    client.close()


@pytest.fixture(scope="module")
def pod(target: CliTarget) -> Iterator[Pod]:
    # retention runs only when a test asks for it (``topic trim``)
    started = Pod(target.url, "--key-prefix", target.keys.prefix, *RF1,
                  "--retention-interval-ms", "0")  # fmt: skip
    started.start()
    yield started
    started.stop()


def admin(pod: Pod) -> AdminClient:
    return AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})


def create_topic(pod: Pod, topic: str, partitions: int) -> None:
    client = admin(pod)  # (kept until the answer: a destroyed handle fails its futures)
    futures = client.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)


def delete_topic(pod: Pod, topic: str) -> None:
    client = admin(pod)
    client.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)


def initialised(target: CliTarget, topic: str, partitions: int, group: str) -> bool:
    """Whether every partition's log has the share group's Redis consumer group."""
    name = Keys.share_consumer_group(group).encode()
    for p in range(partitions):
        log = target.keys.partition(topic, p).log
        if not target.client.exists(log):
            return False
        if name not in [g["name"] for g in target.client.xinfo_groups(log)]:
            return False
    return True


def poll_values(consumer: ShareConsumer, expected: int, timeout: float = 30) -> list[bytes]:
    """Values polled until ``expected`` came, then a few polls more (each poll accepts the
    records of the one before)."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
    for _ in range(3):
        got += [m.value() for m in consumer.poll(0.3) if m.error() is None]
    return sorted(got)


def described(target: CliTarget, group: str) -> dict:
    return json.loads(target.cli("group", "describe", group, "--json"))


def produce(pod: Pod, topic: str, partitions: int, tag: str, count: int) -> list:
    records = [(p, None, f"{tag}{p}-{i}".encode(), []) for p in range(partitions)
               for i in range(count)]  # fmt: skip
    return produce_delivered(pod.bootstrap, topic, records)


def test_a_topic_created_again_starts_its_share_partitions_anew(
    target: CliTarget, pod: Pod, topic: str
) -> None:
    group = f"life-{uuid.uuid4().hex[:8]}"  # share.auto.offset.reset: latest (the default)
    create_topic(pod, topic, PARTITIONS)
    produce(pod, topic, PARTITIONS, "seed", 1)  # (a share-partition starts on a log)
    consumer = share_consumer(pod, group, [topic])
    try:  # latest: the share-partitions start at the end, then the records come
        wait_until(lambda: len(consumer.poll(0.2)) == 0 and initialised(target, topic,
                   PARTITIONS, group), timeout=30)  # fmt: skip
        produce(pod, topic, PARTITIONS, "old", 2)
        assert poll_values(consumer, 2 * PARTITIONS) == sorted(
            f"old{p}-{i}".encode() for p in range(PARTITIONS) for i in range(2)
        )
    finally:
        consumer.close()
    before = {p["partition"]: p["start_offset"] for p in described(target, group)["partitions"]}
    assert all(offset > 0 for offset in before.values())

    delete_topic(pod, topic)
    # the logs went, and the share group's Redis consumer groups with them
    wait_until(lambda: not any(target.client.exists(target.keys.partition(topic, p).log)
                               for p in range(PARTITIONS)), timeout=15)  # fmt: skip
    assert all(p["start_offset"] == -1 for p in described(target, group)["partitions"])

    create_topic(pod, topic, PARTITIONS)
    early = produce(pod, topic, PARTITIONS, "early", 2)  # before any member fetches
    assert not initialised(target, topic, PARTITIONS, group)
    consumer = share_consumer(pod, group, [topic])
    try:  # no state on the new logs: latest applies, the early records are not delivered
        wait_until(lambda: len(consumer.poll(0.2)) == 0 and initialised(target, topic,
                   PARTITIONS, group), timeout=30)  # fmt: skip
        rows = {p["partition"]: p for p in described(target, group)["partitions"]}
        for p in range(PARTITIONS):
            last_early = max(m.offset() for m in early if m.partition() == p)
            assert rows[p]["start_offset"] == last_early + 1 and rows[p]["lag"] == 0
        produce(pod, topic, PARTITIONS, "new", 2)
        assert poll_values(consumer, 2 * PARTITIONS) == sorted(
            f"new{p}-{i}".encode() for p in range(PARTITIONS) for i in range(2)
        )
    finally:
        consumer.close()


def hold_records(pod: Pod, group: str, topic: str, status: Path) -> list[tuple[int, int]]:
    """A member (a child process) that acquired records and then died holding them: its
    records stay in flight (their lock runs, its session too)."""
    return list(killed_holder(pod, group, topic, status))


def test_retention_deletes_records_in_flight_and_the_next_member_reads_on(
    target: CliTarget, pod: Pod, topic: str, tmp_path: Path
) -> None:
    group = f"life-{uuid.uuid4().hex[:8]}"
    earliest(pod, group)
    create_topic(pod, topic, 1)
    old = produce(pod, topic, 1, "old", 6)
    held = hold_records(pod, group, topic, tmp_path / "held")
    assert held and {o for _, o in held} <= {m.offset() for m in old}
    [row] = described(target, group)["partitions"]
    assert row["in_flight"] >= len(held) and row["lag"] == 6

    # retention deletes every record, those in flight included (Kafka: retention wins)
    target.cli("topic", "alter", topic, "--retention-ms", "0")
    target.cli("topic", "trim", topic)
    target.cli("topic", "alter", topic, "--retention-ms", "-1")
    assert target.client.xlen(target.keys.partition(topic, 0).log) == 0

    new = produce(pod, topic, 1, "new", 3)
    # the deleted records are neither in flight nor lag any more: the new ones are the lag
    [row] = described(target, group)["partitions"]
    assert (row["in_flight"], row["lag"], row["available"]) == (0, 3, 3)
    consumer = share_consumer(pod, group, [topic])
    try:  # at once (the dead member's deleted records hold nothing back), and only them
        assert poll_values(consumer, 3) == [b"new0-0", b"new0-1", b"new0-2"]
    finally:
        consumer.close()
    # the deleted records left the records in flight with the first acquisition after the
    # trim; the start offset is past everything read
    [row] = described(target, group)["partitions"]
    assert (row["in_flight"], row["lag"], row["available"]) == (0, 0, 0)
    assert row["start_offset"] == max(m.offset() for m in new) + 1
