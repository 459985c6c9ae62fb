"""Kafka transactions over the wire, on the shared pods: the coordinator's APIs with real
clients (confluent-kafka's transactional producer, aiokafka's, kafka-python's admin client)
and a raw one; commit and abort; send_offsets_to_transaction; a zombie fenced; a producer
SIGKILLed inside its transaction aborted by the timeout; what V1 CONSUME shows of
transactions. (Through SIGKILLs of clients and pods: test_exactly_once.py.)"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from kafka.admin import KafkaAdminClient

from adapter.client import Client
from adapter.kafka import errors
from adapter.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
)
from tests.support.kafka import RawKafka, read_committed
from tests.support.pods import Pod
from tests.support.v1 import consume_values


@pytest.fixture
def txn_id() -> str:
    return f"tx-{uuid.uuid4().hex[:10]}"


def init(raw: RawKafka, txn_id: str, version: int = 4, timeout_ms: int = 60_000, **expected: int):
    body = INIT_PRODUCER_ID.request[version](
        transactional_id=txn_id, transaction_timeout_ms=timeout_ms, **expected
    )
    return raw.call(INIT_PRODUCER_ID, version, body)


def add_offsets(raw: RawKafka, txn_id: str, pid: int, epoch: int, version: int = 3) -> int:
    body = ADD_OFFSETS_TO_TXN.request[version](
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, group_id="g"
    )
    return raw.call(ADD_OFFSETS_TO_TXN, version, body).error_code


def end(raw: RawKafka, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    body = END_TXN.request[version](
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return raw.call(END_TXN, version, body).error_code


@pytest.fixture
def admin(kafka_pods: tuple[Pod, Pod]) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kafka_pods[0].kafka_port}")
    try:
        yield client
    finally:
        client.close()


def test_init_transactions_with_confluent_kafka(
    kafka_pods: tuple[Pod, Pod], txn_id: str, admin: KafkaAdminClient
) -> None:
    producer = Producer({
        "bootstrap.servers": f"127.0.0.1:{kafka_pods[1].kafka_port}",
        "transactional.id": txn_id,
        "transaction.timeout.ms": 30_000,
    })  # fmt: skip
    producer.init_transactions(20)
    described = admin.describe_transactions([txn_id])[txn_id]
    assert described.state.value == "Empty"
    assert described.producer_epoch == 0 and described.producer_id >= 0
    assert described.transaction_timeout_ms == 30_000 and not described.topic_partitions
    listed = [t for ts in admin.list_transactions().values() for t in ts]
    assert [(t.producer_id, t.state.value) for t in listed if t.transactional_id == txn_id] == [
        (described.producer_id, "Empty")
    ]
    assert not [t for t in admin.list_transactions(state_filters=["Ongoing"]).values() if
                any(x.transactional_id == txn_id for x in t)]  # fmt: skip


def test_each_session_bumps_the_epoch_and_fences_the_last(
    kafka_pods: tuple[Pod, Pod], txn_id: str
) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw, RawKafka(kafka_pods[1].kafka_port) as other:
        first = init(raw, txn_id)
        assert (first.error_code, first.producer_epoch) == (errors.NONE, 0)
        second = init(other, txn_id)  # through the other pod: the state is in Redis
        assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
        pid = first.producer_id
        # the first session is a zombie now: its requests are fenced (older clients: epoch)
        assert add_offsets(raw, txn_id, pid, 0, version=3) == errors.PRODUCER_FENCED
        assert add_offsets(raw, txn_id, pid, 0, version=0) == errors.INVALID_PRODUCER_EPOCH
        assert end(raw, txn_id, pid, 0, True, version=2) == errors.PRODUCER_FENCED
        assert end(raw, txn_id, pid, 0, True, version=1) == errors.INVALID_PRODUCER_EPOCH
        assert add_offsets(raw, txn_id, pid + 1, 1) == errors.INVALID_PRODUCER_ID_MAPPING
        # nothing open: EndTxn is out of turn
        assert end(other, txn_id, pid, 1, True) == errors.INVALID_TXN_STATE


@pytest.mark.parametrize("version", range(INIT_PRODUCER_ID.min_version, 6))
def test_init_producer_id_versions(kafka_pods: tuple[Pod, Pod], txn_id: str, version: int) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        reply = init(raw, txn_id, version)
        assert (reply.error_code, reply.producer_epoch) == (errors.NONE, 0)
        too_long = init(raw, txn_id, version, timeout_ms=900_001)
        assert too_long.error_code == errors.INVALID_TRANSACTION_TIMEOUT
        assert init(raw, "", version).error_code == errors.INVALID_REQUEST
        if version >= 3:  # KIP-360: resume with the id and epoch held; a stranger is fenced
            resumed = init(raw, txn_id, version, producer_id=reply.producer_id, producer_epoch=0)
            assert (resumed.error_code, resumed.producer_epoch) == (errors.NONE, 1)
            stranger = init(raw, txn_id, version, producer_id=reply.producer_id + 99,
                            producer_epoch=1)  # fmt: skip
            fenced = errors.PRODUCER_FENCED if version >= 4 else errors.INVALID_PRODUCER_EPOCH
            assert stranger.error_code == fenced
            half = init(raw, txn_id, version, producer_id=reply.producer_id, producer_epoch=-1)
            assert half.error_code == errors.INVALID_REQUEST


def test_describe_and_list_over_the_wire(kafka_pods: tuple[Pod, Pod], txn_id: str) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        session = init(raw, txn_id)
        body = DESCRIBE_TRANSACTIONS.request[0](transactional_ids=[txn_id, "nobody-" + txn_id, ""])
        states = raw.call(DESCRIBE_TRANSACTIONS, 0, body).transaction_states
        assert [(s.transactional_id, s.error_code) for s in states] == [
            (txn_id, errors.NONE),
            ("nobody-" + txn_id, errors.TRANSACTIONAL_ID_NOT_FOUND),
            ("", errors.INVALID_REQUEST),
        ]
        assert (states[0].producer_id, states[0].transaction_state) == (
            session.producer_id, "Empty"
        )  # fmt: skip
        listed: dict[str, tuple[int, str]] = {}
        for pod in kafka_pods:  # each pod lists the transactions it coordinates
            with RawKafka(pod.kafka_port) as each:
                body = LIST_TRANSACTIONS.request[1](
                    state_filters=["Empty", "Nonsense"], producer_id_filters=[], duration_filter=-1
                )
                reply = each.call(LIST_TRANSACTIONS, 1, body)
                assert reply.unknown_state_filters == ["Nonsense"]
                for t in reply.transaction_states:
                    assert t.transactional_id not in listed  # listed once in all
                    listed[t.transactional_id] = (t.producer_id, t.transaction_state)
        assert listed[txn_id] == (session.producer_id, "Empty")


def test_add_partitions_of_unknown_topics(kafka_pods: tuple[Pod, Pod], txn_id: str) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        session = init(raw, txn_id)
        request = ADD_PARTITIONS_TO_TXN.request[3]
        body = request(
            v3_and_below_transactional_id=txn_id,
            v3_and_below_producer_id=session.producer_id,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[request.AddPartitionsToTxnTopic(name="no-such-topic-" + txn_id,
                                                                 partitions=[0])],
        )  # fmt: skip
        reply = raw.call(ADD_PARTITIONS_TO_TXN, 3, body)
        codes = [p.partition_error_code for t in reply.results_by_topic_v3_and_below
                 for p in t.results_by_partition]  # fmt: skip
        assert codes == [errors.UNKNOWN_TOPIC_OR_PARTITION]


# --- transactions end to end ------------------------------------------------------------


CLIENT = {"socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000}


def _bootstrap(pods: tuple[Pod, Pod]) -> str:
    return ",".join(pod.bootstrap for pod in pods)


def _producer(pod: Pod, txn_id: str, timeout_ms: int = 30_000) -> Producer:
    return Producer({
        "bootstrap.servers": f"127.0.0.1:{pod.kafka_port}",
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
    })  # fmt: skip


def _read_committed(pod: Pod, topic: str, expected: int, seconds: float = 20.0) -> list[bytes]:
    consumer = Consumer({
        "bootstrap.servers": f"127.0.0.1:{pod.kafka_port}",
        "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and len(values) < expected:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        # a little longer: nothing beyond what is expected may show up
        end_at = time.monotonic() + 1.0
        while time.monotonic() < end_at:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def test_commit_and_abort_with_confluent_kafka(
    kafka_pods: tuple[Pod, Pod], txn_id: str, topic: str, admin: KafkaAdminClient
) -> None:
    producer = _producer(kafka_pods[0], txn_id)
    producer.init_transactions(20)
    producer.begin_transaction()
    for n in range(5):
        producer.produce(topic, key=b"k%d" % n, value=b"kept-%d" % n)
    producer.commit_transaction(20)
    producer.begin_transaction()
    for n in range(5):
        producer.produce(topic, key=b"k%d" % n, value=b"dropped-%d" % n)
    producer.flush(10)
    ongoing = admin.describe_transactions([txn_id])[txn_id]
    assert ongoing.state.value == "Ongoing" and ongoing.topic_partitions
    producer.abort_transaction(20)
    values = _read_committed(kafka_pods[1], topic, 5)
    assert sorted(values) == sorted(b"kept-%d" % n for n in range(5))
    assert admin.describe_transactions([txn_id])[txn_id].state.value == "CompleteAbort"


def test_send_offsets_to_transaction(kafka_pods: tuple[Pod, Pod], txn_id: str, topic: str) -> None:
    """consume-transform-produce: the input's offsets are committed with the output."""
    source = f"{topic}-in"
    seed = Producer({"bootstrap.servers": f"127.0.0.1:{kafka_pods[0].kafka_port}"})
    for n in range(4):
        seed.produce(source, value=b"in-%d" % n)
    seed.flush(10)
    group = f"copier-{txn_id}"
    consumer = Consumer({
        "bootstrap.servers": f"127.0.0.1:{kafka_pods[0].kafka_port}", "group.id": group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed",
    })  # fmt: skip
    consumer.subscribe([source])
    producer = _producer(kafka_pods[1], txn_id)
    producer.init_transactions(20)
    copied = 0
    deadline = time.monotonic() + 30
    try:
        while copied < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            producer.begin_transaction()
            producer.produce(topic, value=message.value().replace(b"in", b"out"))
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 10
            )
            producer.commit_transaction(20)
            copied += 1
        committed = consumer.committed(consumer.assignment(), 10)
    finally:
        consumer.close()
    assert copied == 4
    assert sum(tp.offset > 0 for tp in committed) >= 1
    assert sorted(_read_committed(kafka_pods[0], topic, 4)) == [b"out-%d" % n for n in range(4)]


def test_zombie_is_fenced(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """A second producer with the same transactional id fences the first: the first's open
    transaction is aborted (its marker carries the bumped epoch), so the zombie's next batch
    is refused as fenced (INVALID_PRODUCER_EPOCH, fatal for the client) and read_committed
    sees the second's records only."""
    bootstrap = _bootstrap(kafka_pods)
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
    assert read_committed(bootstrap, topic, 1, 1)[0] == [b"fresh"]


# librdkafka requires socket.timeout.ms <= transaction.timeout.ms + 100
ABANDON = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[3],
                     "transaction.timeout.ms": 2000, "socket.timeout.ms": 2000})
producer.init_transactions(30)
producer.begin_transaction()
producer.produce(sys.argv[2], value=b"abandoned", partition=0)
assert producer.flush(15) == 0
print("ready", flush=True)
time.sleep(600)
"""


def test_abandoned_transaction_is_aborted_by_timeout(
    kafka_pods: tuple[Pod, Pod], topic: str, admin: KafkaAdminClient
) -> None:
    """A producer SIGKILLed inside its transaction: once transaction.timeout.ms passed, a pod
    aborts it (state CompleteAbort, reason timeout), so read_committed moves past it (a later
    committed record shows) and never shows the abandoned record."""
    bootstrap = _bootstrap(kafka_pods)
    txn_id = f"abandon-{topic}"
    child = subprocess.Popen(
        [sys.executable, "-c", ABANDON, bootstrap, topic, txn_id], stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(10)
    later = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"later-{topic}",
                      **CLIENT})  # fmt: skip
    later.init_transactions(30)
    later.begin_transaction()
    later.produce(topic, value=b"after", partition=0)
    later.commit_transaction(30)
    assert read_committed(bootstrap, topic, 1, 1, timeout=60)[0] == [b"after"]
    assert admin.describe_transactions([txn_id])[txn_id].state.value == "CompleteAbort"


def test_aiokafka_transactional_producer(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """aiokafka's transactional producer: committed transactions are read by a read_committed
    aiokafka consumer, an aborted one between them is not."""
    bootstrap = _bootstrap(kafka_pods)

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
            # a little longer: the aborted record must not follow
            got += [m.value for ms in (await consumer.getmany(timeout_ms=1000)).values()
                    for m in ms]  # fmt: skip
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(body()) == [b"kept-1", b"kept-2"]


def test_v1_consume_skips_aborted_records_and_stops_at_the_lso(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """V1 CONSUME (read committed, always): the records of an aborted transaction
    (confluent-kafka's abort_transaction) never show, markers never show, and while a
    transaction is open nothing at or after its first record is served (nor the records
    written after it), until it commits."""
    bootstrap = _bootstrap(kafka_pods)
    plain = Producer({"bootstrap.servers": bootstrap, **CLIENT})
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"v1-{topic}", **CLIENT}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(5):
        producer.produce(topic, value=b"aborted-%d" % n, partition=0)
    assert producer.flush(15) == 0
    producer.abort_transaction(30)
    plain.produce(topic, value=b"plain-1", partition=0)
    assert plain.flush(15) == 0
    producer.begin_transaction()
    producer.produce(topic, value=b"open", partition=0)
    assert producer.flush(15) == 0
    plain.produce(topic, value=b"plain-2", partition=0)  # behind the open transaction
    assert plain.flush(15) == 0
    with Client("127.0.0.1", kafka_pods[1].port, timeout=20) as client:
        assert consume_values(client, topic, 1) == {b"plain-1"}
        producer.commit_transaction(30)
        assert consume_values(client, topic, 1) == {b"plain-1", b"open", b"plain-2"}
    assert read_committed(bootstrap, topic, 1, 3)[0] == [b"plain-1", b"open", b"plain-2"]
