"""Kafka transactions end to end with real clients (issue 23), on two pods under a fresh key
prefix: a confluent-kafka consume-transform-produce loop (send_offsets_to_transaction)
copying a topic while it and a pod are SIGKILLed gives exactly the input, in order per
partition, to read_committed consumers; a zombie producer is fenced; an abandoned
transaction is aborted by its timeout; a pod SIGKILLed during EndTxn leaves the transaction
all or nothing, completed by the other pod; aiokafka's transactional producer commits and
aborts.

The module skips while the pods refuse transactions: the probe is an InitProducerId with a
transactional id, answered with an error by a pod without a transaction coordinator."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ROOT
from tests.support.kafka import fetch_offsets, transactions_supported
from tests.support.pods import RF1, Pod
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
    for pod in pods:
        pod.start()
    try:
        if not transactions_supported(pods[0].kafka_port):
            pytest.skip("the pods refuse transactional producers (no transaction coordinator)")
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


def read_committed(
    bootstrap: str, topic: str, expected: int, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """Every partition's values, read with isolation.level=read_committed from the start
    until ``expected`` records arrived (then a little longer, so duplicates would show)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **CLIENT,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    found: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + timeout
    extra_until: float | None = None
    try:
        while time.monotonic() < (extra_until or deadline):
            for message in consumer.consume(100, 0.5):
                if message.error() is None:
                    found[message.partition()].append(message.value())
            if extra_until is None and sum(map(len, found.values())) >= expected:
                extra_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return found


def _start_copier(
    bootstrap: str, group: str, source: str, sink: str, txn_id: str
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.txn_copier", bootstrap, group, source, sink, txn_id],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(10)


@pytest.mark.slow
def test_copy_is_exactly_once_through_sigkills(txn_pods: list[Pod], redis_url: str) -> None:
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

    copier = _start_copier(bootstrap, group, source, sink, txn_id)
    try:
        for round_ in range(4):
            before = committed()
            wait_until(lambda before=before: committed() != before, timeout=60)
            if round_ == 3:
                break
            _kill(copier)
            if round_ == 1:  # a pod dies too; another one joins
                txn_pods[0].kill()
                replacement = Pod(redis_url, *txn_pods[1].args)
                replacement.start()
                txn_pods[0] = replacement
                bootstrap = _bootstrap(txn_pods)
            copier = _start_copier(bootstrap, group, source, sink, txn_id)
        total = PARTITIONS * PER_PARTITION
        assert read_committed(bootstrap, sink, total, timeout=120) == expected
    finally:
        _kill(copier)


def test_zombie_is_fenced(txn_pods: list[Pod], topic: str) -> None:
    """A second producer with the same transactional id fences the first: the first's open
    transaction is aborted and its commit fails as fenced; read_committed sees the second's
    records only."""
    bootstrap = _bootstrap(txn_pods)
    _create(bootstrap, topic)
    txn_id = f"zombie-{topic}"
    config = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, **CLIENT}
    zombie = Producer(config)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    assert zombie.flush(15) == 0

    fresh = Producer(config)
    fresh.init_transactions(30)
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh", partition=0)
    fresh.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-2", partition=0)
        zombie.commit_transaction(30)
    failure: KafkaError = raised.value.args[0]
    assert failure.fatal() or failure.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), failure
    assert read_committed(bootstrap, topic, 1)[0] == [b"fresh"]


ABANDON = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3],
                     "transaction.timeout.ms": 3000, "socket.timeout.ms": 5000})
producer.init_transactions(30)
producer.begin_transaction()
producer.produce(sys.argv[2], value=b"abandoned", partition=0)
assert producer.flush(15) == 0
print("ready", flush=True)
time.sleep(600)
"""


def test_abandoned_transaction_is_aborted_by_timeout(txn_pods: list[Pod], topic: str) -> None:
    """A producer SIGKILLed inside its transaction: once transaction.timeout.ms passed, a pod
    aborts it, so read_committed moves past it (a later committed record shows) and never
    shows the abandoned record."""
    bootstrap = _bootstrap(txn_pods)
    _create(bootstrap, topic)
    child = subprocess.Popen(
        [sys.executable, "-c", ABANDON, bootstrap, topic, f"abandon-{topic}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        _kill(child)
    later = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"later-{topic}", **CLIENT}
    )
    later.init_transactions(30)
    later.begin_transaction()
    later.produce(topic, value=b"after", partition=0)
    later.commit_transaction(30)
    assert read_committed(bootstrap, topic, 1, timeout=90)[0] == [b"after"]


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
    found = read_committed(survivor, topic, PARTITIONS, timeout=90)
    seen = [v for vs in found.values() for v in vs if v != b"marker"]
    assert sorted(seen) in ([], sorted(values))
    assert all(vs[-1:] == [b"marker"] for vs in found.values())


def _commit_quietly(producer: Producer) -> None:
    try:
        producer.commit_transaction(30)
    except KafkaException:
        pass  # the pod died under it: the outcome is read back from the log


def test_aiokafka_transactional_producer(txn_pods: list[Pod], topic: str) -> None:
    """aiokafka's transactional producer: committed transactions are read by a read_committed
    aiokafka consumer, an aborted one is not."""
    bootstrap = _bootstrap(txn_pods)
    _create(bootstrap, topic)

    async def body() -> list[bytes]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=f"aio-{topic}", enable_idempotence=True
        )
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept-1", partition=0)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"dropped", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait(topic, b"kept-2", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            consumer.assign([AioPartition(topic, 0)])
            got: list[bytes] = []
            deadline = asyncio.get_running_loop().time() + 30
            while len(got) < 2 and asyncio.get_running_loop().time() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += [m.value for ms in batches.values() for m in ms]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(body()) == [b"kept-1", b"kept-2"]
