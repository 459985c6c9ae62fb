"""Kafka transactions over the wire: the coordinator's APIs with real clients (confluent-kafka's
transactional producer, aiokafka's, kafka-python's admin client) and a raw one.

Tests marked ``needs_partition_side`` need the partition side of transactions
(mapping/partition_txns.py: registration, transactional Produce, markers, read_committed
Fetch) and, for ``send_offsets_to_transaction``, the group side (TxnOffsetCommit,
``KafkaGroups.end_txn_offsets``); they skip until both are in."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kafka.admin import KafkaAdminClient

from adapter.kafka import errors
from adapter.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
)
from mapping.kafka_groups import KafkaGroups
from tests.support import ROOT
from tests.support.kafka import RawKafka
from tests.support.pods import Pod

needs_partition_side = pytest.mark.skipif(
    not (ROOT / "mapping" / "partition_txns.py").exists(),
    reason="the partition side of transactions (mapping/partition_txns.py) is not merged",
)
needs_group_side = pytest.mark.skipif(
    not hasattr(KafkaGroups, "end_txn_offsets"),
    reason="the group side of transactions (TxnOffsetCommit) is not merged",
)


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


# --- with the partition side (the lead runs these after the merge) -----------------------


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


@needs_partition_side
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


@needs_partition_side
def test_a_zombie_producer_is_fenced(kafka_pods: tuple[Pod, Pod], txn_id: str, topic: str) -> None:
    zombie = _producer(kafka_pods[0], txn_id)
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(10)
    successor = _producer(kafka_pods[1], txn_id)
    successor.init_transactions(30)  # aborts the zombie's transaction first
    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(20)
    with pytest.raises(KafkaException) as failure:
        zombie.commit_transaction(20)
    assert failure.value.args[0].fatal() or failure.value.args[0].txn_requires_abort()
    assert _read_committed(kafka_pods[0], topic, 1) == [b"successor"]


@needs_partition_side
def test_a_timeout_aborts_an_abandoned_transaction(
    kafka_pods: tuple[Pod, Pod], txn_id: str, topic: str, admin: KafkaAdminClient
) -> None:
    abandoned = _producer(kafka_pods[0], txn_id, timeout_ms=1500)
    abandoned.init_transactions(20)
    abandoned.begin_transaction()
    abandoned.produce(topic, value=b"never")
    abandoned.flush(10)
    deadline = time.monotonic() + 20
    while admin.describe_transactions([txn_id])[txn_id].state.value != "CompleteAbort":
        assert time.monotonic() < deadline, "the completer never aborted it"
        time.sleep(0.2)
    later = _producer(kafka_pods[1], f"{txn_id}-2")
    later.init_transactions(20)
    later.begin_transaction()
    later.produce(topic, value=b"after")
    later.commit_transaction(20)
    assert _read_committed(kafka_pods[1], topic, 1) == [b"after"]


@needs_partition_side
def test_aiokafka_transactional_producer(
    kafka_pods: tuple[Pod, Pod], txn_id: str, topic: str
) -> None:
    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=f"127.0.0.1:{kafka_pods[0].kafka_port}", transactional_id=txn_id
        )
        await producer.start()
        try:
            async with producer.transaction():
                for n in range(3):
                    await producer.send_and_wait(topic, b"a%d" % n)
            await producer.begin_transaction()
            await producer.send_and_wait(topic, b"aborted")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(main())
    assert sorted(_read_committed(kafka_pods[1], topic, 3)) == [b"a0", b"a1", b"a2"]


@needs_partition_side
@needs_group_side
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
