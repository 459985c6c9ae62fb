"""Kafka transactions through SIGKILLs (issue 23), on two pods of their own under a fresh key
prefix (they are killed): a confluent-kafka consume-transform-produce loop
(send_offsets_to_transaction) copying a topic while it and a pod are SIGKILLed gives exactly
the input, in order per partition, to read_committed consumers; a pod SIGKILLed during EndTxn
leaves the transaction all or nothing, completed by the other pod; a producer starting while a
dead pod is still registered is not told to wait on it. (Zombies, timeouts and
aiokafka's producer: test_transactions.py, on the shared pods.)"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from redis import Redis

from adapter.kafka.context import coordinator_of
from mapping.core.keys import Keys
from mapping.topic.brokers import KAFKA_REGISTER
from tests.support import ROOT
from tests.support.kafka import fetch_offsets, read_committed
from tests.support.pods import RF1, Pod, start_all
from tests.support.waiting import wait_until

PARTITIONS = 3
PER_PARTITION = 40
CLIENT = {"socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000}


@pytest.fixture(scope="module")
def txn_pods(redis_url: str) -> Iterator[list[Pod]]:
    prefix = f"eos-{uuid.uuid4().hex[:8]}"
    pods = [
        Pod(
            redis_url,
            *RF1,
            "--key-prefix",
            prefix,
            "--kafka-group-initial-rebalance-delay-ms",
            "200",
        )
        for _ in range(2)
    ]
    start_all(pods)
    try:
        yield pods
    finally:
        for pod in pods:
            pod.stop()


def _bootstrap(pods: list[Pod]) -> str:
    return ",".join(pod.bootstrap for pod in pods)


def _create(bootstrap: str, *topics: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT})
    futures = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in topics])
    for future in futures.values():
        future.result(15)


def _start_copier(
    bootstrap: str, group: str, source: str, sink: str, txn_id: str, log: Path
) -> subprocess.Popen:
    """The copier as a child process, its output appended to ``log`` (for a failure to tell
    what it said)."""
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.kafka.txn_copier", bootstrap, group, source, sink,
             txn_id],
            cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


@pytest.mark.slow
def test_copy_is_exactly_once_through_sigkills(
    txn_pods: list[Pod], redis_url: str, tmp_path: Path
) -> None:
    """The copier is SIGKILLed three times mid-stream and one pod once (a new pod takes
    its place); the sink read with read_committed is the source exactly, in order per
    partition."""
    bootstrap = _bootstrap(txn_pods)
    tag = uuid.uuid4().hex[:8]
    source, sink, group, txn_id = f"src-{tag}", f"dst-{tag}", f"copy-{tag}", f"copier-{tag}"
    _create(bootstrap, source, sink)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **CLIENT})
    expected = {p: [f"{p}-{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    for p, values in expected.items():
        for value in values:
            producer.produce(source, value=value, partition=p)
    assert producer.flush(15) == 0

    def committed() -> list[int]:
        answered = fetch_offsets(txn_pods[-1], group, source, list(range(PARTITIONS)), 8)
        return [p.committed_offset for p in answered]

    log = tmp_path / "copier.log"
    copier = _start_copier(bootstrap, group, source, sink, txn_id, log)
    try:
        for round_ in range(4):
            before = committed()
            try:
                wait_until(lambda before=before: committed() != before, timeout=60)
            except AssertionError as exc:
                said = log.read_bytes()[-4000:].decode(errors="replace")
                state = "runs" if copier.poll() is None else f"exited {copier.returncode}"
                raise AssertionError(
                    f"round {round_}: the group's offsets stayed {before}; the copier {state},"
                    f" its output's end:\n{said}"
                ) from exc
            if round_ == 3:
                break
            _kill(copier)
            if round_ == 1:  # a pod dies too; another one joins
                txn_pods[0].kill()
                replacement = Pod(redis_url, *txn_pods[1].args)
                replacement.start()
                txn_pods[0] = replacement
                bootstrap = _bootstrap(txn_pods)
            copier = _start_copier(bootstrap, group, source, sink, txn_id, log)
        total = PARTITIONS * PER_PARTITION
        assert read_committed(bootstrap, sink, PARTITIONS, total, timeout=120) == expected
    finally:
        _kill(copier)


def test_pod_killed_during_end_txn(txn_pods: list[Pod], redis_url: str, topic: str) -> None:
    """The pod a producer's EndTxn goes to is SIGKILLed while it commits: the transaction
    ends all or nothing (another pod completes or aborts it), and read_committed moves on."""
    bootstrap = _bootstrap(txn_pods)
    _create(bootstrap, topic)
    victim = txn_pods[0]
    producer = Producer(
        {"bootstrap.servers": victim.bootstrap, "transactional.id": f"endtxn-{topic}", **CLIENT}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    values = [f"txn-{i}".encode() for i in range(30)]
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    committing = threading.Thread(target=_commit_quietly, args=(producer,), daemon=True)
    committing.start()
    victim.kill()
    committing.join(60)
    replacement = Pod(redis_url, *txn_pods[1].args)
    replacement.start()
    txn_pods[0] = replacement

    survivor = txn_pods[1].bootstrap
    marker = Producer(
        {"bootstrap.servers": survivor, "transactional.id": f"mark-{topic}", **CLIENT}
    )
    marker.init_transactions(30)
    marker.begin_transaction()
    for p in range(PARTITIONS):
        marker.produce(topic, value=b"marker", partition=p)
    marker.commit_transaction(30)
    found = read_committed(survivor, topic, PARTITIONS, PARTITIONS, timeout=90)
    seen = [v for vs in found.values() for v in vs if v != b"marker"]
    assert sorted(seen) in ([], sorted(values))
    assert all(vs[-1:] == [b"marker"] for vs in found.values())


def test_a_registered_broker_that_no_longer_answers(
    txn_pods: list[Pod], redis_url: str, topic: str
) -> None:
    """A transactional producer that starts while a pod that no longer answers is still in
    the broker registry (a pod SIGKILLed a moment ago stays there for the TTL; this one for
    two minutes) gets a live transaction coordinator. librdkafka looks a transaction
    coordinator up again only after its connection to it was once up: told of the dead pod,
    as a hash over the registry could tell it, init_transactions waits on it until the
    registration expires. The transactional id is one that hash puts on the dead pod."""
    bootstrap = _bootstrap(txn_pods)
    _create(bootstrap, topic)
    args = txn_pods[0].args
    registry_keys = Keys(prefix=args[args.index("--key-prefix") + 1]).kafka_brokers
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead_port = unused.getsockname()[1]
    redis = Redis.from_url(redis_url)
    script = KAFKA_REGISTER.command(registry_keys, ["dead-pod", f"127.0.0.1:{dead_port}", 120_000])
    redis.execute_command(*script)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT})
        metadata = admin.list_topics(topic, timeout=10)
        registry = sorted((b.id, b.host, b.port) for b in metadata.brokers.values())
        assert dead_port in [port for _, _, port in registry]
        txn_id = next(
            f"late-{topic}-{i}"
            for i in range(1000)
            if coordinator_of(registry, f"late-{topic}-{i}")[2] == dead_port
        )
        dead_node = next(node for node, _, port in registry if port == dead_port)
        partition = next(
            p.id for p in metadata.topics[topic].partitions.values() if p.leader != dead_node
        )
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **CLIENT})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"beside a dead broker", partition=partition)
        producer.commit_transaction(30)
    finally:
        redis.zrem(registry_keys[0], "dead-pod")
        redis.hdel(registry_keys[1], "dead-pod")
        redis.close()
    found = read_committed(bootstrap, topic, PARTITIONS, 1, timeout=60)
    assert found[partition] == [b"beside a dead broker"]


def _commit_quietly(producer: Producer) -> None:
    try:
        producer.commit_transaction(30)
    except KafkaException:
        pass  # the pod died under it: the outcome is read back from the log
