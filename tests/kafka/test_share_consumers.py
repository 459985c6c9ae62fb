"""Share groups (KIP-932) as applications use them: confluent-kafka ShareConsumers on two
pods sharing one Redis, through a member SIGKILLed while it holds records, more members than
partitions, explicit release/reject with a delivery count limit, a member closing with
records it never acknowledged, and a pod SIGKILLed under its consumers. Every record is
followed by (partition, offset); Redis (the share group's consumer group ``share:<group>``
on each partition's log) says what is still in flight.

Locks are set to 15 s, the shortest Kafka's group.share.min.record.lock.duration.ms allows,
so a lock expiry costs seconds, not the default 30."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from confluent_kafka import Message, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from mapping.core.codec import entry_offset
from mapping.core.keys import Keys
from tests.kafka.group_helpers import GROUP_PREFIX, POD_ARGS, produce
from tests.kafka.test_share_groups import share_pods
from tests.support.pods import Pod
from tests.support.share_groups import group_configs, killed_holder, share_consumer
from tests.support.waiting import wait_until

LOCK_MS = 15_000  # Kafka's group.share.min.record.lock.duration.ms
ACCEPT, RELEASE, REJECT = 1, 2, 3
Record = tuple[int, int]  # (partition, offset)
__all__ = ["share_pods"]  # the fixture, shared with test_share_groups.py


@dataclass(frozen=True)
class Delivery:
    consumer: int
    delivery_count: int
    value: bytes


def _create_topic(pod: Pod, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)


def _records(consumer: ShareConsumer, timeout: float) -> list[Message]:
    return [m for m in consumer.poll(timeout) if m.error() is None]


def _log_records(redis_url: str, topic: str, partitions: int) -> set[Record]:
    """Every record of the topic's logs, read from Redis."""
    keys = Keys(GROUP_PREFIX)
    client = redis.Redis.from_url(redis_url)
    try:
        return {
            (p, entry_offset(entry_id))
            for p in range(partitions)
            for entry_id, _ in client.xrange(keys.partition(topic, p).log)
        }
    finally:
        client.close()


def _in_flight(redis_url: str, topic: str, partitions: int, group: str) -> dict[Record, int]:
    """The share group's records in flight (acquired, or released and not yet taken again):
    (partition, offset) -> the delivery count Redis keeps."""
    keys = Keys(GROUP_PREFIX)
    client = redis.Redis.from_url(redis_url)
    pending: dict[Record, int] = {}
    try:
        for p in range(partitions):
            entries = client.xpending_range(
                keys.partition(topic, p).log, keys.share_consumer_group(group), "-", "+", 100_000
            )
            for entry in entries:
                pending[(p, entry_offset(entry["message_id"]))] = entry["times_delivered"]
    finally:
        client.close()
    return pending


def _all_taken(redis_url: str, topic: str, partitions: int, group: str) -> bool:
    """Each partition's log was read to its end by the share group and nothing is in flight:
    every record acknowledged (or archived)."""
    keys = Keys(GROUP_PREFIX)
    client = redis.Redis.from_url(redis_url)
    try:
        for p in range(partitions):
            log = keys.partition(topic, p).log
            last = client.xrevrange(log, count=1)
            groups = {g["name"]: g for g in client.xinfo_groups(log)}
            state = groups.get(keys.share_consumer_group(group).encode())
            if state is None or state["pending"] != 0:
                return False
            if last and state["last-delivered-id"] != last[0][0]:
                return False
    finally:
        client.close()
    return True


def _poll_round(
    consumers: list[ShareConsumer],
    deliveries: dict[Record, list[Delivery]],
    on_message: Callable[[ShareConsumer, Message], None] | None = None,
) -> None:
    """One poll of every consumer, each delivery noted (and handed to ``on_message``)."""
    for index, consumer in enumerate(consumers):
        for m in _records(consumer, 0.2):
            delivery = Delivery(index, m.delivery_count(), m.value())
            deliveries.setdefault((m.partition(), m.offset()), []).append(delivery)
            if on_message is not None:
                on_message(consumer, m)


def _collect(
    consumers: list[ShareConsumer],
    deliveries: dict[Record, list[Delivery]],
    done: Callable[[], bool],
    timeout: float = 90.0,
    on_message: Callable[[ShareConsumer, Message], None] | None = None,
) -> None:
    """Poll rounds until ``done``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not done after {timeout}s: {_summary(deliveries)}")
        _poll_round(consumers, deliveries, on_message)


def _summary(deliveries: dict[Record, list[Delivery]]) -> str:
    return f"{len(deliveries)} records, {sum(map(len, deliveries.values()))} deliveries"


def _close(consumers: list[ShareConsumer]) -> None:
    for consumer in consumers:
        consumer.close()


def _never_twice_at_once(deliveries: dict[Record, list[Delivery]]) -> None:
    """A record handed out again carries a higher delivery count: two deliveries with one
    count would be one acquisition given to two consumers."""
    for record, seen in deliveries.items():
        counts = [d.delivery_count for d in seen]
        assert counts == sorted(set(counts)), (record, seen)


def test_records_a_killed_member_held_go_to_the_others_after_the_lock(
    share_pods: list[Pod], topic: str, redis_url: str, tmp_path: Path
) -> None:
    """A member SIGKILLed while it holds records (no acknowledgement, no leave): once their
    lock expires, the members on the other pod get exactly those records again, with
    delivery count 2; every other record once, with delivery count 1. One partition, so
    the dead member's assignment (kept until its session expires) takes none from them."""
    group = f"s-{topic}"
    group_configs(share_pods[0], group, share_auto_offset_reset="earliest",
               share_record_lock_duration_ms=str(LOCK_MS))  # fmt: skip
    _create_topic(share_pods[0], topic, 1)
    produce(share_pods[0].bootstrap, topic, 1, 20)
    polled = killed_holder(share_pods[0], group, topic, tmp_path / "held")
    assert polled and set(polled.values()) == {1}
    held = _in_flight(redis_url, topic, 1, group)  # what it acquired, fetched ahead included
    assert set(polled) <= set(held) and set(held.values()) == {1}
    everything = _log_records(redis_url, topic, 1)
    consumers = [share_consumer(share_pods[1], group) for _ in range(2)]
    deliveries: dict[Record, list[Delivery]] = {}
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        _collect(consumers, deliveries, lambda: set(deliveries) >= everything)
        _poll_round(consumers, deliveries)  # one more round: nothing else comes
    finally:
        _close(consumers)
    assert set(deliveries) == everything
    assert all(len(d) == 1 for d in deliveries.values()), deliveries
    redelivered = {r for r, d in deliveries.items() if d[0].delivery_count == 2}
    assert redelivered == set(held)
    assert {d[0].delivery_count for r, d in deliveries.items() if r not in held} <= {1}
    wait_until(lambda: _all_taken(redis_url, topic, 1, group), timeout=30)


def test_more_members_than_partitions_share_every_partition(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    """Five members on a three-partition topic, spread over both pods: each gets records,
    every record is delivered once (implicit acknowledgements), none to two members."""
    partitions, members = 3, 5
    group = f"s-{topic}"
    group_configs(share_pods[0], group, share_auto_offset_reset="earliest")
    _create_topic(share_pods[0], topic, partitions)
    consumers = [
        share_consumer(share_pods[i % 2], group, **{"max.poll.records": 2}) for i in range(members)
    ]
    deliveries: dict[Record, list[Delivery]] = {}
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        # rounds of records while the members join and fetch, until each member had some
        for round_ in range(15):
            produce(share_pods[round_ % 2].bootstrap, topic, partitions, 10, tag=f"r{round_}-")
            expected = 10 * partitions * (round_ + 1)
            _collect(consumers, deliveries, lambda wanted=expected: len(deliveries) >= wanted)
            receivers = {d.consumer for seen in deliveries.values() for d in seen}
            if len(receivers) == members:
                break
        _poll_round(consumers, deliveries)
    finally:
        _close(consumers)
    receivers = {d.consumer for seen in deliveries.values() for d in seen}
    assert receivers == set(range(members))
    assert set(deliveries) == _log_records(redis_url, topic, partitions)
    assert all(len(d) == 1 for d in deliveries.values()), _summary(deliveries)
    wait_until(lambda: _all_taken(redis_url, topic, partitions, group), timeout=30)


def test_explicit_release_reject_and_the_delivery_count_limit(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    """Explicit acknowledgements under share.delivery.count.limit=2, by value: rejected
    records never come back; records released once come back (to either member) with
    delivery count 2 and are accepted then; records released every time are delivered
    twice, then archived: never a third time."""
    partitions, per_partition = 3, 6
    group = f"s-{topic}"
    group_configs(share_pods[0], group, share_auto_offset_reset="earliest",
               share_delivery_count_limit="2")  # fmt: skip
    _create_topic(share_pods[0], topic, partitions)
    produce(share_pods[0].bootstrap, topic, partitions, per_partition)

    def policy(value: bytes) -> str:
        return ("reject", "release once", "release always")[int(value.split(b"-")[1]) % 3]

    def acknowledge(consumer: ShareConsumer, m: Message) -> None:
        kind = policy(m.value())
        if kind == "reject":
            consumer.acknowledge(m, REJECT)
        elif kind == "release once" and m.delivery_count() > 1:
            consumer.acknowledge(m, ACCEPT)
        else:
            consumer.acknowledge(m, RELEASE)

    explicit = {"share.acknowledgement.mode": "explicit"}
    consumers = [share_consumer(pod, group, **explicit) for pod in share_pods]
    deliveries: dict[Record, list[Delivery]] = {}
    everything = _log_records(redis_url, topic, partitions)

    def complete() -> bool:
        for consumer in consumers:  # the acknowledgements of this round go out
            consumer.commit_sync(10)
        wanted = {r: 1 if policy(d[0].value) == "reject" else 2 for r, d in deliveries.items()}
        return set(deliveries) == everything and all(
            len(deliveries[r]) >= n for r, n in wanted.items()
        )

    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        _collect(consumers, deliveries, complete, on_message=acknowledge)
        for _ in range(3):  # more rounds: nothing is delivered again
            _poll_round(consumers, deliveries, acknowledge)
            complete()
    finally:
        _close(consumers)
    _never_twice_at_once(deliveries)
    for record, seen in deliveries.items():
        counts = [d.delivery_count for d in seen]
        assert counts == ([1] if policy(seen[0].value) == "reject" else [1, 2]), (record, seen)
    # the twice-released are archived by the acquisition that would deliver them a third time
    wait_until(lambda: _all_taken(redis_url, topic, partitions, group), timeout=30)


def test_records_a_closed_member_held_are_released_at_once(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    """An explicit-mode member closes holding records it never acknowledged: Kafka makes
    them available again as its share session closes (their delivery count kept, so they
    come back with delivery count 2), long before their lock, here 60 s, would expire."""
    group = f"s-{topic}"
    group_configs(share_pods[0], group, share_auto_offset_reset="earliest",
               share_record_lock_duration_ms="60000")  # fmt: skip
    _create_topic(share_pods[0], topic, 1)
    produce(share_pods[0].bootstrap, topic, 1, 10)
    leaving = share_consumer(share_pods[0], group, **{"share.acknowledgement.mode": "explicit",
                                                "max.poll.records": 3})  # fmt: skip
    leaving.subscribe([topic])
    held: list[Message] = []
    try:
        wait_until(lambda: held.extend(_records(leaving, 0.5)) or held, timeout=60)
    finally:
        leaving.close()  # nothing acknowledged
    everything = _log_records(redis_url, topic, 1)
    consumers = [share_consumer(share_pods[1], group)]
    deliveries: dict[Record, list[Delivery]] = {}
    try:
        consumers[0].subscribe([topic])
        _collect(consumers, deliveries, lambda: set(deliveries) >= everything, timeout=25)
    finally:
        _close(consumers)
    again = {r for r, d in deliveries.items() if d[0].delivery_count == 2}
    assert again == {(m.partition(), m.offset()) for m in held}


@pytest.mark.slow
def test_a_pod_killed_under_share_consumers(start_pod, redis_url: str, topic: str) -> None:
    """Two pods of their own, two members bootstrapped on each; the pod of two of them is
    SIGKILLed after a third of the records: its partitions move to the other pod, every
    member goes on there, and in the end every record is acknowledged (the share group's
    consumer groups read to the end, nothing in flight). A record whose acknowledgement the
    dead pod lost comes back after its lock, with a higher delivery count: never to two
    members at once."""
    partitions, per_partition = 3, 100
    pods = [start_pod(redis_url, *POD_ARGS) for _ in range(2)]
    victim, survivor = pods
    group = f"s-{topic}"
    group_configs(survivor, group, share_auto_offset_reset="earliest",
               share_record_lock_duration_ms=str(LOCK_MS))  # fmt: skip
    _create_topic(survivor, topic, partitions)
    produce(survivor.bootstrap, topic, partitions, per_partition)
    total = partitions * per_partition
    consumers = [
        share_consumer(
            pods[i % 2], group, **{"max.poll.records": 5, "reconnect.backoff.max.ms": 500}
        )
        for i in range(4)
    ]
    deliveries: dict[Record, list[Delivery]] = {}
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        _collect(consumers, deliveries, lambda: len(deliveries) >= total // 3)
        victim.kill()
        _collect(
            consumers,
            deliveries,
            lambda: _all_taken(redis_url, topic, partitions, group),
            timeout=180,
        )
    finally:
        _close(consumers)
    assert set(deliveries) == _log_records(redis_url, topic, partitions)
    _never_twice_at_once(deliveries)
