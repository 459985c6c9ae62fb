"""The batching producer and the group consumer against the shared pod (real TCP, real
Redis): commit last + 1, resume from committed offsets, rejoin on GENERATION_MISMATCH,
LEAVE on close."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import confluent_kafka
import pytest
import redis

from adapter.client import GroupAssignment, RequestFailed
from adapter.client.group_consumer import GroupConsumer, Record
from adapter.client.producer import Producer, ProducerClosed
from tests.support.pods import Pod
from tests.support.v1 import KEYS
from tests.support.waiting import wait_until


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


# --- producer -------------------------------------------------------------------------------


def test_producer_batches_and_answers_every_record(pod: Pod, topic: str) -> None:
    with Producer("127.0.0.1", pod.port, linger_s=0.05, max_batch=64) as producer:
        futures = [producer.send(topic, f"k{i % 7}", f"v{i}") for i in range(500)]
        producer.flush()
        assert all(f.done() for f in futures)
        replies = [f.result() for f in futures]
    by_partition: dict[int, list[int]] = {}
    for reply in replies:
        by_partition.setdefault(reply.partition, []).append(reply.offset)
    for offsets in by_partition.values():  # one connection, in order: offsets increase
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    with pod.client() as client:
        seen = []
        for partition in range(3):
            seen += [v for _, v in client.consume(topic, partition, 0).records]
    assert sorted(seen) == sorted(f"v{i}".encode() for i in range(500))


def test_producer_failure_stays_with_its_record(pod: Pod, topic: str) -> None:
    producer = Producer("127.0.0.1", pod.port)
    good = producer.send(topic, "a", "1")
    bad = producer.send("bad/topic", "a", "2")
    also_good = producer.send(topic, b"k:\x00", b"bytes \xff|,%")
    producer.close()  # sends what is queued first
    assert good.result().offset >= 0
    with pytest.raises(RequestFailed) as failure:
        bad.result()
    assert failure.value.code == "BAD_REQUEST"
    reply = also_good.result()
    with pod.client() as client:
        records = client.consume(topic, reply.partition, reply.offset).records
    assert records[0] == (reply.offset, b"bytes \xff|,%")
    with pytest.raises(ProducerClosed):
        producer.send(topic, "a", "3")


def test_producer_acks_all(pod: Pod, topic: str) -> None:
    with Producer("127.0.0.1", pod.port, acks="all") as producer:
        reply = producer.send(topic, "k", "v").result(timeout=30)
    assert reply.high_watermark >= reply.offset


# --- group consumer ---------------------------------------------------------------------------


class Collector:
    """A callback that remembers what it was handed, per partition."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.lock = threading.Lock()

    def __call__(self, record: Record) -> None:
        with self.lock:
            self.records.append(record)

    def values(self) -> set[bytes]:
        with self.lock:
            return {r.value for r in self.records}


@pytest.fixture
def running() -> Iterator[list[tuple[GroupConsumer, threading.Thread]]]:
    """Consumers started with ``start`` run in threads and are closed after the test."""
    started: list[tuple[GroupConsumer, threading.Thread]] = []
    yield started
    for consumer, thread in started:
        consumer.stop()
        thread.join(timeout=30)
        consumer.close()


def start(
    running: list, consumer: GroupConsumer, callback: Collector
) -> tuple[GroupConsumer, threading.Thread]:
    thread = threading.Thread(target=consumer.run, args=(callback,), daemon=True)
    thread.start()
    running.append((consumer, thread))
    return consumer, thread


def produce(pod: Pod, topic: str, count: int, tag: str) -> dict[int, int]:
    """``count`` records; returns partition -> last offset."""
    last: dict[int, int] = {}
    with pod.client() as client:
        for reply in client.produce_many(topic, [(f"k{i}", f"{tag}{i}") for i in range(count)]):
            last[reply.partition] = max(last.get(reply.partition, -1), reply.offset)
    return last


def test_consumer_handles_everything_commits_last_plus_1_and_leaves(
    pod: Pod, topic: str, group: str, redis_url: str, running: list
) -> None:
    last = produce(pod, topic, 200, "a")
    collector = Collector()
    consumer = GroupConsumer(group, topic, "solo", port=pod.port, idle_wait_s=0.02)
    start(running, consumer, collector)
    wait_until(lambda: len(collector.values()) == 200, timeout=30)
    with pod.client() as client:
        wait_until(
            lambda: all(client.committed(group, topic, p) == o + 1 for p, o in last.items()),
            timeout=30,
        )
    assert consumer.assignment == [0, 1, 2] and consumer.generation == 1
    consumer.stop()
    running[0][1].join(timeout=30)
    consumer.close()  # LEAVE
    keys = KEYS.group(group, topic)
    with redis.Redis.from_url(redis_url) as r:
        assert r.hlen(keys.members) == 0
        assert r.hget(keys.meta, "generation") == b"2"

    # A new member resumes at the committed offsets: only new records.
    produce(pod, topic, 20, "b")
    later = Collector()
    start(running, GroupConsumer(group, topic, "next", port=pod.port), later)
    wait_until(lambda: len(later.values()) == 20, timeout=30)
    assert later.values() == {f"b{i}".encode() for i in range(20)}


def test_consumer_rejoins_on_generation_mismatch(
    pod: Pod, topic: str, group: str, running: list
) -> None:
    assignments: list[GroupAssignment] = []
    collector = Collector()
    consumer = GroupConsumer(
        group,
        topic,
        "a",
        port=pod.port,
        heartbeat_interval_s=0.05,
        idle_wait_s=0.02,
        on_assign=assignments.append,
    )
    start(running, consumer, collector)
    wait_until(lambda: consumer.generation == 1)
    with pod.client() as other:
        joined = other.join(group, topic, "b")  # generation 2: a's heartbeat is now stale
        assert (joined.generation, joined.assigned) == (2, [1])
        wait_until(lambda: consumer.generation == 2, timeout=30)
        assert consumer.assignment == [0, 2]
        produce(pod, topic, 60, "x")
        # a handles only its own partitions; b (idle here) holds partition 1.
        wait_until(lambda: collector.values() and all(r.partition != 1 for r in collector.records))
        other.leave(group, topic, "b", 2)
        wait_until(lambda: consumer.generation == 3, timeout=30)
        assert consumer.assignment == [0, 1, 2]
        wait_until(lambda: len(collector.values()) == 60, timeout=30)
    assert [a.generation for a in assignments] == [1, 2, 3]


def test_commit_after_the_group_moved_on_is_refused(pod: Pod, topic: str, group: str) -> None:
    consumer = GroupConsumer(group, topic, "a", port=pod.port, heartbeat_interval_s=60)
    try:
        assert consumer.join().generation == 1
        with pod.client() as other:
            other.join(group, topic, "b")
        assert consumer.commit(0, 5) is False  # stale generation: refused, rejoin scheduled
        assert consumer.poll() == []  # JOINs again first
        assert consumer.generation == 2 and consumer.assignment == [0, 2]
        assert consumer.commit(0, 5) is True
        assert consumer.commit(1, 5) is False  # b's partition
        with pod.client() as client:
            assert client.committed(group, topic, 0) == 5
            assert client.committed(group, topic, 1) == 0
    finally:
        consumer.close()


def test_callback_failure_commits_nothing_past_it_and_retries(
    pod: Pod, topic: str, group: str
) -> None:
    produce(pod, topic, 30, "r")
    consumer = GroupConsumer(group, topic, "a", port=pod.port, idle_wait_s=0.02)
    handed: list[Record] = []

    def fail_on_tenth(record: Record) -> None:
        if len(handed) == 9:
            raise RuntimeError("boom")
        handed.append(record)

    try:
        with pytest.raises(RuntimeError, match="boom"):
            consumer.run(fail_on_tenth)
        assert len(handed) == 9
        with pod.client() as client:
            for partition in range(3):  # nothing committed past what the callback finished
                done = [r.offset for r in handed if r.partition == partition]
                assert client.committed(group, topic, partition) <= max(done, default=-1) + 1
        # Running again hands out everything not yet handled, the failed record included.
        again = Collector()
        thread = threading.Thread(target=consumer.run, args=(again,), daemon=True)
        thread.start()
        wait_until(
            lambda: (
                {r.value for r in handed} | again.values() == {f"r{i}".encode() for i in range(30)}
            )
        )
        consumer.stop()
        thread.join(timeout=30)
    finally:
        consumer.close()


def test_records_carry_the_append_time_and_neither_key_nor_headers(
    pod: Pod, topic: str, group: str, redis_url: str
) -> None:
    """V1 CONSUME gives offset:value: the key (sent by V1 PRODUCE, or by a Kafka producer
    with headers and a CreateTime of its own) is not in the reply, and the timestamp is the
    append time, the stream entry id's millisecond."""
    with pod.client() as client:
        produced = client.produce(topic, "user1", "from v1")
    kafka = confluent_kafka.Producer({"bootstrap.servers": pod.bootstrap})
    create_time = 1_000_000_000_000  # 2001: far from the append time
    kafka.produce(
        topic,
        key=b"user1",
        value=b"from kafka",
        headers=[("src", b"web")],
        partition=produced.partition,
        timestamp=create_time,
    )
    assert kafka.flush(30) == 0
    consumer = GroupConsumer(group, topic, "a", port=pod.port, heartbeat_interval_s=60)
    records: list[Record] = []

    def polled_both() -> bool:
        records.extend(consumer.poll())
        return len(records) >= 2

    try:
        wait_until(polled_both, timeout=30)
    finally:
        consumer.close()
    with redis.Redis.from_url(redis_url) as r:
        entries = r.xrange(KEYS.partition(topic, produced.partition).log)
    assert [(r.partition, r.value, r.key, r.headers) for r in records] == [
        (produced.partition, b"from v1", None, ()),
        (produced.partition, b"from kafka", None, ()),
    ]
    assert records[0].offset == produced.offset
    assert [r.timestamp for r in records] == [int(e.split(b"-")[0]) for e, _ in entries]
    assert records[1].timestamp != create_time
