"""Overload (issue 20, item 3): two confluent-kafka producers (idempotence off, acks=1) push
500 k records of 100 bytes as fast as they can into one partition through two pods, one
producer per pod, on one Redis. Every record must be stored exactly once and in each
producer's order, with no error answered to the clients and both pods' memory bounded.

Before backpressure a pod read whatever its producers sent: its next pipeline grew with
everything read while the last one ran, until writing one outlasted the Redis socket
timeout; the appends were answered KAFKA_STORAGE_ERROR ("not written") though Redis ran
them, librdkafka retried, and records came back duplicated and out of order while the pod
held the whole queue in memory. The pods here run with ``--redis-timeout-ms 500`` so that
this shows on a 2-core machine within seconds: before the change each producer here sent
its records 3-5 times over (error answers, retried) and the log held 1.3 M records for 500 k
(with 1000 ms it passed on that machine; with the default 5 s it took librdkafka's test
0038, 1.34 M records, on a 16-core one). A busy Redis must never time out, whatever the
setting: no call waits 500 ms for Redis to make progress now (the largest script here, a
10 k-record batch, takes ~100 ms).

The pods advertise a balancer's address (tests/kafka/balancer.py), as pods behind a load
balancer do, so both serve the partition: each producer's connections are pinned to one pod.
"""

from __future__ import annotations

import json
import multiprocessing
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from tests.kafka.balancer import Balancer
from tests.support.pods import RF1, Pod, start_all

RECORDS_PER_PRODUCER = 250_000
VALUE_SIZE = 100
# Bounded memory: an idle pod takes ~60 MB; the unbounded queue took ~1 GB in this test.
MAX_RSS_MB = 400


def _value(tag: str, index: int) -> bytes:
    head = f"{tag}:{index:09d}:".encode()
    return head + b"x" * (VALUE_SIZE - len(head))


def _produce(bootstrap: str, topic: str, tag: str, ready: Any, go: Any, out: Any) -> None:
    """One producer process: connect (a first record, flushed), say ready, wait for ``go``,
    then produce every record as fast as the client takes them and report what happened."""
    from confluent_kafka import Producer

    stats: list[dict[str, Any]] = []
    failures: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
        "linger.ms": 5, "batch.num.messages": 10_000, "message.timeout.ms": 120_000,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
        "statistics.interval.ms": 200, "stats_cb": lambda text: stats.append(json.loads(text)),
    })  # fmt: skip

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer.produce(topic, value=b"warm-up", partition=0, on_delivery=delivered)
    producer.flush(30)
    ready.set()
    go.wait(60)
    for index in range(RECORDS_PER_PRODUCER):
        while True:
            try:
                producer.produce(topic, _value(tag, index), partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.01)
        if index % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(150)
    producer.poll(0.5)  # statistics events after the last answer
    # records transmitted, counting each time a record is sent again after an error answer
    # (librdkafka retries them without telling the application)
    sent = stats[-1]["txmsgs"] if stats else -1
    out.put({"tag": tag, "left": left, "failures": failures[:5], "failed": len(failures),
             "sent": sent})  # fmt: skip


class BalancedPods:
    """Two pods on one Redis behind tests/kafka/balancer.py, whose address they advertise."""

    def __init__(self, redis_url: str, log_dir: Path) -> None:
        self.prefix = f"overload-{uuid.uuid4().hex[:8]}"
        self.balancer = Balancer(log_dir)
        args = (*RF1, "--key-prefix", self.prefix, "--default-partitions", "1",
                "--no-replicator", "--redis-timeout-ms", "500",
                "--kafka-advertised-listener", self.balancer.address)  # fmt: skip
        self.pods = [Pod(redis_url, *args) for _ in range(2)]

    def start(self) -> None:
        start_all(self.pods)
        try:
            self.balancer.start([pod.kafka_port for pod in self.pods])
        except BaseException:
            for pod in self.pods:
                pod.stop()
            raise

    def pin(self, pod: int | None) -> None:
        """New connections go to ``pod`` (None: round robin)."""
        self.balancer.pin(None if pod is None else self.pods[pod].kafka_port)

    def connections(self) -> list[int]:
        return self.balancer.connections([pod.kafka_port for pod in self.pods])

    def complaints(self) -> list[str]:
        """The pods' log lines above INFO (what went wrong, when something did)."""
        return [
            line
            for pod in self.pods
            for line in pod.log().splitlines()
            if '"WARNING"' in line or '"ERROR"' in line
        ][:20]

    def memory_mb(self, pod: int) -> dict[str, float]:
        """The pod's VmHWM (peak) and VmRSS (now), in MB."""
        process = self.pods[pod].process
        assert process is not None
        status = Path(f"/proc/{process.pid}/status").read_text().splitlines()
        return {
            name: int(line.split()[1]) / 1024
            for line in status
            for name in ("VmHWM", "VmRSS")
            if line.startswith(f"{name}:")
        }

    def stop(self) -> None:
        for pod in self.pods:
            pod.stop()
        self.balancer.stop()


@pytest.fixture
def balanced(tmp_path: Path) -> Iterator[tuple[BalancedPods, redis.Redis]]:
    """A Redis of the test's own (AOF off: the load is the point, not the disk)."""
    with RedisProcess(tmp_path / "redis", appendonly=False) as server:
        pods = BalancedPods(server.url, tmp_path)
        client = redis.Redis.from_url(server.url)
        try:
            pods.start()
            yield pods, client
        finally:
            pods.stop()
            client.close()


def _stored(client: redis.Redis, log: str) -> dict[str, list[int]]:
    """Each producer's record numbers in log order."""
    numbers: dict[str, list[int]] = {}
    start = "-"
    while page := client.xrange(log, start, "+", count=20_000):
        for _, fields in page:
            if fields[b"value"] == b"warm-up":
                continue
            tag, index, _ = fields[b"value"].split(b":", 2)
            numbers.setdefault(tag.decode(), []).append(int(index))
        start = "(" + page[-1][0].decode()
    return numbers


@pytest.mark.slow
def test_overload_through_two_pods_stores_every_record_once_in_order(
    balanced: tuple[BalancedPods, redis.Redis],
) -> None:
    pods, client = balanced
    topic = f"overload-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("spawn")
    go, out = context.Event(), context.Queue()
    producers = []
    for index, tag in enumerate(("p0", "p1")):
        pods.pin(index)  # each producer's connections (bootstrap and broker) on its own pod
        ready = context.Event()
        bootstrap = pods.balancer.address
        process = context.Process(target=_produce, args=(bootstrap, topic, tag, ready, go, out))
        process.start()
        producers.append(process)
        assert ready.wait(60), "a producer did not connect"
    pods.pin(None)
    assert set(pods.connections()) == {0, 1}, pods.connections()
    go.set()
    reports = {report["tag"]: report for report in (out.get(timeout=240) for _ in producers)}
    for process in producers:
        process.join(timeout=30)

    for report in reports.values():
        assert report["left"] == 0 and report["failed"] == 0, report
        sent_once = RECORDS_PER_PRODUCER + 1  # and the warm-up record
        assert report["sent"] == sent_once, (report, pods.complaints())
    log = Keys(pods.prefix).partition(topic, 0).log
    warm_ups = 2
    assert client.xlen(log) == 2 * RECORDS_PER_PRODUCER + warm_ups
    stored = _stored(client, log)
    for tag in reports:
        assert stored[tag] == list(range(RECORDS_PER_PRODUCER)), f"{tag}: duplicates or reordering"
    for pod in range(2):
        memory = pods.memory_mb(pod)
        assert memory["VmHWM"] < MAX_RSS_MB, (pod, memory)
