"""Kafka clients through a Redis outage: a transactional producer whose commit's last step
(CompleteCommit, after the markers) met the outage goes on with its next transactions, and
read_committed readers see every committed transaction once and nothing aborted; Metadata
keeps listing the brokers it knew while Redis cannot be read (stopped or paused), never
fewer, and FindCoordinator keeps naming the same coordinator."""

from __future__ import annotations

import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from urllib.parse import urlparse

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka import errors
from adapter.kafka.versions import FIND_COORDINATOR, METADATA
from mapping.connection.embedded import RedisProcess
from mapping.txn.transactions import TXN_COORD_COMPLETE
from tests.support.kafka import RawKafka, read_committed
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]
TIMEOUT = ("--redis-timeout-ms", "1000")
PARTITIONS = 3
CLIENT = {"socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000}


class OutageProxy:
    """A TCP proxy in front of Redis. Once armed, the first client chunk that carries
    ``trigger`` is not forwarded: every connection through the proxy is cut and new ones are
    refused for ``outage_s`` (Redis out of reach at exactly that step), then it forwards
    again."""

    def __init__(self, redis_port: int, trigger: bytes, outage_s: float) -> None:
        self.redis_port, self.trigger, self.outage_s = redis_port, trigger, outage_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cut = threading.Event()  # the trigger was seen and the outage began
        self.down_until = 0.0
        self.lock = threading.Lock()
        self.sockets: set[socket.socket] = set()
        self.closing = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self) -> OutageProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        self._cut_all()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if time.monotonic() < self.down_until:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.redis_port))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, watched: bool) -> None:
        tail = b""  # the trigger may straddle two chunks
        try:
            while chunk := source.recv(65536):
                if watched and self.armed.is_set() and self.trigger in tail + chunk:
                    self.armed.clear()
                    self.down_until = time.monotonic() + self.outage_s
                    self.cut.set()
                    self._cut_all()
                    return
                tail = chunk[-len(self.trigger) :]
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                _shut(end)

    def _cut_all(self) -> None:
        with self.lock:
            cut, self.sockets = self.sockets, set()
        for end in cut:
            _shut(end)


def _shut(end: socket.socket) -> None:
    try:
        end.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    end.close()


@pytest.mark.slow
def test_a_commit_whose_last_step_met_an_outage_does_not_block_its_producer(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    """The pod writes the commit's markers, then loses Redis before CompleteCommit: it
    answers the commit (the outcome is persisted), and the producer's next
    AddPartitionsToTxn, once Redis is back, finishes that transaction and goes on, well
    before the transaction timeout that would otherwise abort it (fatal to the producer)."""
    redis_port = urlparse(redis_url).port
    assert redis_port is not None
    proxy = OutageProxy(redis_port, TXN_COORD_COMPLETE.sha.encode(), outage_s=1.5).start()
    try:
        prefix = ("--key-prefix", f"txo-{uuid.uuid4().hex[:8]}")
        pod = start_pod(proxy.url, *RF1, *TIMEOUT, *prefix)
        admin = AdminClient({"bootstrap.servers": pod.bootstrap, **CLIENT})
        for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
            future.result(20)
        producer = Producer({
            "bootstrap.servers": pod.bootstrap, "transactional.id": f"txo-{topic}",
            "transaction.timeout.ms": 20_000, **CLIENT,
        })  # fmt: skip
        producer.init_transactions(20)
        committed: list[bytes] = []

        def transaction(name: str, commit: bool, armed: bool = False) -> None:
            producer.begin_transaction()
            values = [f"{name}-{i}".encode() for i in range(PARTITIONS * 2)]
            for i, value in enumerate(values):
                producer.produce(topic, value=value, partition=i % PARTITIONS)
            assert producer.flush(20) == 0
            if armed:
                proxy.armed.set()
            if commit:
                producer.commit_transaction(30)  # raises when the producer is stuck or fatal
                committed.extend(values)
            else:
                producer.abort_transaction(30)

        transaction("before", commit=True)
        transaction("cut", commit=True, armed=True)
        assert proxy.cut.is_set(), "the outage never met the commit's last step"
        transaction("after", commit=True)
        transaction("dropped", commit=False)
        transaction("last", commit=True)

        found = read_committed(pod.bootstrap, topic, PARTITIONS, len(committed), timeout=60)
        seen = [v for values in found.values() for v in values]
        assert sorted(seen) == sorted(committed)  # each once, nothing aborted
        assert "finishing the previous transaction" in pod.log()
    finally:
        proxy.close()


def _brokers(port: int) -> set[int]:
    with RawKafka(port, timeout=20) as raw:
        reply = raw.call(METADATA, 12, METADATA.request[12](topics=[]))
    return {broker.port for broker in reply.brokers}


def _coordinator(port: int, group: str) -> tuple[int, int]:
    with RawKafka(port, timeout=20) as raw:
        reply = raw.call(FIND_COORDINATOR, 3, FIND_COORDINATOR.request[3](key=group, key_type=0))
    assert reply.error_code == errors.NONE
    return reply.node_id, reply.port


@pytest.mark.slow
def test_metadata_keeps_the_brokers_it_knew_while_redis_is_out_of_reach(
    start_pod: StartPod, own_redis: RedisProcess
) -> None:
    prefix = ("--key-prefix", f"mo-{uuid.uuid4().hex[:8]}")
    pods = [start_pod(own_redis.url, *RF1, *TIMEOUT, *prefix) for _ in range(2)]
    ports = {pod.kafka_port for pod in pods}
    for pod in pods:
        wait_until(lambda pod=pod: _brokers(pod.kafka_port) == ports, timeout=20)
    groups = [f"group-{n}" for n in range(4)]  # some coordinated by each pod
    coordinators = {g: _coordinator(pods[0].kafka_port, g) for g in groups}
    assert {port for _, port in coordinators.values()} == ports

    assert own_redis.process is not None
    own_redis.process.send_signal(signal.SIGSTOP)  # paused: every read times out (1 s each)
    try:
        for pod in pods:
            assert _brokers(pod.kafka_port) == ports
        assert {g: _coordinator(pods[1].kafka_port, g) for g in groups} == coordinators
    finally:
        own_redis.process.send_signal(signal.SIGCONT)

    own_redis.stop()  # stopped: every read is refused
    for pod in pods:
        assert _brokers(pod.kafka_port) == ports
        assert {g: _coordinator(pod.kafka_port, g) for g in groups} == coordinators
