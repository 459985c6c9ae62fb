"""Idempotent producers across a Redis failover that lost acknowledged records (pods without
--redis-wait-replicas, docs/durability.md): the replica's link cut (SIGSTOP) while
confluent-kafka producers write, the primary SIGKILLed and the lagging replica promoted by
the sentinels. The promoted replica lacks the producers' last batches and their sequence
state; every producer must go on (no fatal error), and what it wrote must read back with no
duplicate and in its order, the lost records a gap (mapping/partition/sequence_fence.py,
kafka/produce.lua)."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.deploy.sentinels import SentinelDeployment
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

PRODUCERS = 3
PARTITIONS = 2
# detection (down-after 2 s), the vote and the promotion take 3-4 s on loopback
FAILOVER_BOUND_S = 20.0


class WritingProducer:
    """One idempotent producer writing "<name>-<n>" (n counting up) to every partition in
    turn on its own thread, until stopped; what the broker acknowledged and any error."""

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        self.topic = topic
        self.name = name
        self.fatal: list[str] = []
        self.failed: list[str] = []
        self.acked: list[tuple[int, bytes]] = []  # (partition, value), in acknowledgment order
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "error_cb": self._error,
        })  # fmt: skip
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._write, name=f"producer-{name}")

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.append(str(error))

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self.failed.append(str(error))
        else:
            self.acked.append((message.partition(), message.value()))  # type: ignore[attr-defined]

    def _write(self) -> None:
        n = 0
        while not self.stopping.is_set() and not self.fatal:
            try:
                self.producer.produce(
                    self.topic,
                    value=f"{self.name}-{n:06d}".encode(),
                    partition=n % PARTITIONS,
                    on_delivery=self._delivered,
                )
                self.producer.poll(0.005)
            except KafkaException as exc:  # a fatal error is raised by the calls after it
                self.fatal.append(str(exc))
            n += 1

    def start(self) -> WritingProducer:
        self.thread.start()
        return self

    def acked_count(self) -> int:
        return len(self.acked)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        if not self.fatal:
            self.producer.flush(60)


def _log_in_order(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """Every partition's values in offset order, read to the end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_uncommitted",
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    values: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                continue
            values[message.partition()].append(message.value())
    finally:
        consumer.close()
    assert len(at_end) == PARTITIONS, "the log was not read to its end"
    return values


@pytest.mark.slow
def test_idempotent_producers_outlive_a_failover_that_lost_their_last_batches(
    deployment: SentinelDeployment,
) -> None:
    topic = f"p-{uuid.uuid4().hex[:10]}"
    pod = Pod(
        None, *deployment.options, "--log-format", "text", *RF1,
        "--default-partitions", str(PARTITIONS),
    ).start()  # fmt: skip
    primary, replica = deployment.primary, deployment.replica
    producers = [WritingProducer(pod.bootstrap, topic, f"w{i}") for i in range(PRODUCERS)]
    try:
        for producer in producers:
            producer.start()
        wait_until(lambda: all(p.acked_count() >= 50 for p in producers), timeout=30)
        deployment.wait_in_sync()

        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)  # the replica's link is cut
        try:
            # more than the sockets' buffers hold: what follows stays in the primary's output
            # buffer, and the killed primary takes it with it
            with deployment.data_client(primary.port) as admin:
                admin.set("filler", b"x" * (32 << 20))
            acked_before_cut = [p.acked_count() for p in producers]
            # every producer has batches acknowledged that the replica will never have
            wait_until(
                lambda: all(
                    p.acked_count() >= n + 50
                    for p, n in zip(producers, acked_before_cut, strict=True)
                ),
                timeout=30,
            )
            primary.kill()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        deployment.wait(lambda: deployment.master_port() == replica.port, FAILOVER_BOUND_S)

        # every producer goes on: many more acknowledged after the failover
        acked_at_failover = [p.acked_count() for p in producers]
        wait_until(
            lambda: (
                any(p.fatal for p in producers)
                or all(
                    p.acked_count() >= n + 100
                    for p, n in zip(producers, acked_at_failover, strict=True)
                )
            ),
            timeout=60,
        )
        for producer in producers:
            producer.stop()
        assert [p.fatal for p in producers] == [[]] * PRODUCERS
        assert [p.failed for p in producers] == [[]] * PRODUCERS

        log = _log_in_order(pod.bootstrap, topic)
        lost = 0
        for partition, values in log.items():
            for producer in producers:
                prefix = f"{producer.name}-".encode()
                written = [v for v in values if v.startswith(prefix)]
                # no duplicate, the producer's order kept
                numbers = [int(v[len(prefix) :]) for v in written]
                assert numbers == sorted(set(numbers)), (producer.name, partition)
                acked = {v for p, v in producer.acked if p == partition}
                lost += len(acked - set(written))
        for producer, at_failover in zip(producers, acked_at_failover, strict=True):
            # acknowledged by the promoted replica: all there
            after = {(p, v) for p, v in producer.acked[at_failover:]}
            assert {(p, v) for p, v in after if v not in log[p]} == set(), producer.name
        # the scenario took acknowledged records back (else it proves nothing)
        assert lost > 0
        print(f"acknowledged records the failover took back: {lost}")
        assert pod.process is not None and pod.process.poll() is None
    finally:
        for producer in producers:
            producer.stopping.set()
            if producer.thread.is_alive():
                producer.thread.join(10)
        producers.clear()  # the clients go before the pod, not reconnecting to it meanwhile
        pod.stop()
