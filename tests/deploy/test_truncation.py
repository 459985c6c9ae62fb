"""A lossy Redis failover as Kafka consumers see it (KIP-320,
mapping/replication/leader_epochs.py): the
primary SIGKILLed while its replica's link was cut, so the promoted replica lacks the last
records, which a consumer had already read. The new primary is a new leader epoch: the
consumer's next fetch is fenced, it learns the epoch from Metadata, asks
OffsetForLeaderEpoch where its epoch ended and finds its position past that end: the
truncation is reported (``auto.offset.reset=error``), never read past in silence."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from mapping.core.keys import DEFAULT_PREFIX, Keys
from tests.deploy.sentinels import SentinelDeployment
from tests.support.cluster import LoopbackCluster
from tests.support.pods import RF1, Pod

FAILOVER_BOUND_S = 20.0


def _produce(bootstrap: str, topic: str, values: list[bytes], timeout_s: float = 30.0) -> None:
    """``values`` to partition 0, each acknowledged (librdkafka retries through a failover)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "message.timeout.ms": int(timeout_s * 1000)})  # fmt: skip
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(error)

    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=delivered)
    assert producer.flush(timeout_s) == 0
    assert not failed, failed


def _poll(consumer: Consumer, count: int, timeout_s: float = 15.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    return values


@pytest.mark.slow
def test_a_consumer_past_the_new_log_end_is_told_of_the_truncation(
    deployment: SentinelDeployment,
) -> None:
    topic = f"trunc-{uuid.uuid4().hex[:8]}"
    pod = Pod(None, *deployment.options, *RF1).start()
    consumer = Consumer(
        {
            "bootstrap.servers": pod.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # a truncation reaches the application
        }
    )
    primary, replica = deployment.primary, deployment.replica
    try:
        kept = [f"kept{i}".encode() for i in range(3)]
        _produce(pod.bootstrap, topic, kept)
        deployment.wait_in_sync()
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert _poll(consumer, len(kept)) == kept

        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)  # the replica's link is cut
        try:
            # more than the sockets' buffers hold: what follows stays in the primary's
            # output buffer, so the killed primary takes it with it
            with deployment.data_client(primary.port) as admin:
                admin.set("filler", b"x" * (32 << 20))
            lost = [f"lost{i}".encode() for i in range(2)]
            _produce(pod.bootstrap, topic, lost)
            assert _poll(consumer, len(lost)) == lost  # read, then taken back
            primary.kill()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        deployment.wait(lambda: deployment.master_port() == replica.port, FAILOVER_BOUND_S)
        _produce(pod.bootstrap, topic, [b"after"])

        told = None
        read_on: list[bytes] = []
        deadline = time.monotonic() + 30
        while told is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                told = message.error()
            else:
                read_on.append(message.value())
        assert told is not None, f"no truncation reported; read on: {read_on}"
        assert told.code() == KafkaError._AUTO_OFFSET_RESET, told
        assert "truncation" in told.str(), told
        assert read_on == []  # nothing read past the truncation first
    finally:
        consumer.close()
        pod.stop()


def _told(consumer: Consumer, timeout_s: float = 40.0) -> tuple[KafkaError | None, list[bytes]]:
    """Poll until the consumer reports an error: (that error, the values read before it)."""
    read_on: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            return message.error(), read_on
        read_on.append(message.value())
    return None, read_on


@pytest.mark.slow
def test_a_cluster_node_failover_is_told_as_a_truncation(failover_cluster: LoopbackCluster) -> None:
    """The same on a Redis Cluster: every primary is registered in the one registry (a node
    without it through the cluster client), so the promoted replica of partition 0's node is
    a new epoch and the consumer past its new log end is told."""
    topic = f"trunc-{uuid.uuid4().hex[:8]}"
    keys = Keys(DEFAULT_PREFIX)
    pod = Pod(failover_cluster.url, *RF1).start()
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "error"})  # fmt: skip
    try:
        kept = [f"kept{i}".encode() for i in range(3)]
        _produce(pod.bootstrap, topic, kept)
        with redis.RedisCluster.from_url(failover_cluster.url.replace("+cluster", "")) as admin:
            registry = admin.lrange(keys.kafka_leader_epochs, 0, -1)
        assert len(registry) >= 1, registry  # the primaries the pod reached so far
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        assert _poll(consumer, len(kept)) == kept

        primary = failover_cluster.primary_of(keys.partition(topic, 0).state)
        replica = failover_cluster.replica_of(primary)
        filler = next(k for k in (f"filler{{{i}}}" for i in range(10_000))
                      if failover_cluster.primary_of(k) is primary)  # fmt: skip
        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)  # the replica's link is cut
        try:
            with redis.Redis(port=primary.port, socket_timeout=10) as admin:
                admin.set(filler, b"x" * (32 << 20))  # what follows stays in the output buffer
            lost = [f"lost{i}".encode() for i in range(2)]
            _produce(pod.bootstrap, topic, lost)
            assert _poll(consumer, len(lost)) == lost  # read, then taken back
            failover_cluster.kill(primary)
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        failover_cluster.wait_promoted(replica, timeout=20)
        failover_cluster.restart(primary)
        failover_cluster.wait_ok(timeout=20)
        _produce(pod.bootstrap, topic, [b"after"], timeout_s=40)

        told, read_on = _told(consumer)
        assert told is not None, f"no truncation reported; read on: {read_on}"
        assert told.code() == KafkaError._AUTO_OFFSET_RESET and "truncation" in told.str(), told
        assert read_on == []  # nothing read past the truncation first
    finally:
        consumer.close()
        pod.stop()
