"""Transactions as Kafka consumers read them (issue 23, the partition side): transactional
batches written through the Produce API or the KafkaStore path into a transaction that
mapping/partition/partition_txns.py registered (the coordinator's AddPartitionsToTxn), ended by its
markers; read by confluent-kafka with isolation.level read_committed and read_uncommitted, by
a raw Fetch (last stable offset, aborted transactions, control batches), ListOffsets, and
V1 CONSUME."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.record.memory_records import MemoryRecords
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from adapter.kafka import errors
from adapter.kafka.versions import FETCH, LIST_OFFSETS, PRODUCE
from tests.support.kafka import RawKafka, batch, fetch_body, fetched, partition_reply, produce_body
from tests.support.pods import Pod
from tests.support.topic_writer import SINGLE_REPLICA_TOPICS, TopicWriter

FETCH_VERSION = 12


@pytest.fixture
def writer(redis_url: str, pod: Pod) -> Iterator[TopicWriter]:
    """In-process parts on the shared pod's Redis and key prefix (the pod's own topics:
    single-replica)."""
    w = TopicWriter(redis_url, defaults=SINGLE_REPLICA_TOPICS)
    yield w
    w.close()


def _pid() -> int:
    return 1_000_000 + int.from_bytes(os.urandom(3), "big")


def _read(pod: Pod, topic: str, isolation: str, expected: int, seconds: float = 15.0) -> list:
    """Values a confluent-kafka consumer reads from partition 0's start: until ``expected``
    arrived, then a short while more (so anything extra would show)."""
    consumer = Consumer(
        {
            "bootstrap.servers": pod.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    settle: float | None = None
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
            if len(values) >= expected and settle is None:
                settle = time.monotonic() + 1.0
            if settle is not None and time.monotonic() > settle:
                break
    finally:
        consumer.close()
    return values


def _produce_txn(
    raw: RawKafka, topic: str, values: list[bytes], pid: int, epoch: int, seq: int
) -> int:
    data = batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                 transactional=True)  # fmt: skip
    reply = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, data)))
    return reply.error_code if reply.error_code else reply.base_offset


def _produce_plain(raw: RawKafka, topic: str, values: list[bytes]) -> int:
    reply = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch(values))))
    assert reply.error_code == 0
    return reply.base_offset


def _latest(raw: RawKafka, topic: str, isolation: int) -> int:
    request = LIST_OFFSETS.request
    body = request[5](
        replica_id=-1,
        isolation_level=isolation,
        topics=[
            request.ListOffsetsTopic(
                name=topic,
                partitions=[
                    request.ListOffsetsTopic.ListOffsetsPartition(
                        partition_index=0, current_leader_epoch=-1, timestamp=-1
                    )
                ],
            )
        ],
    )
    reply = raw.call(LIST_OFFSETS, 5, body)
    return reply.topics[0].partitions[0].offset


def test_commit_and_abort_as_kafka_consumers_see_them(
    pod: Pod, writer: TopicWriter, topic: str
) -> None:
    writer.topic(topic)
    pid = _pid()
    with RawKafka(pod.kafka_port) as raw:
        a = _produce_plain(raw, topic, [b"a"])
        # not registered yet: refused, as Kafka refuses a partition not in the transaction
        assert _produce_txn(raw, topic, [b"t0"], pid, 0, 0) == errors.INVALID_TXN_STATE
        assert writer.txn_add(topic, 0, pid, 0) == 0
        first = _produce_txn(raw, topic, [b"t1", b"t2"], pid, 0, 0)
        assert first > 0
        _produce_plain(raw, topic, [b"b"])
        # open: read_committed stops before the transaction, where a reader of "a" stands
        assert _latest(raw, topic, 1) == a + 1 < first
        assert _latest(raw, topic, 0) > first
        part, records = fetched(
            raw.call(FETCH, FETCH_VERSION, fetch_body(topic, 0, 0, isolation_level=1))
        )
        assert part.last_stable_offset == a + 1
        assert [r.value for r in records] == [b"a"]
        assert _read(pod, topic, "read_committed", 1) == [b"a"]
        assert _read(pod, topic, "read_uncommitted", 4) == [b"a", b"t1", b"t2", b"b"]

        commit = writer.txn_end(topic, 0, pid, 0, commit=True)
        assert commit is not None
        assert _latest(raw, topic, 1) == commit + 1
        # a second transaction, aborted
        assert writer.txn_add(topic, 0, pid, 0) == 0
        aborted_first = _produce_txn(raw, topic, [b"x1", b"x2"], pid, 0, 2)
        assert aborted_first > commit
        abort = writer.txn_end(topic, 0, pid, 0, commit=False)
        assert abort is not None
        _produce_plain(raw, topic, [b"c"])

        part, records = fetched(
            raw.call(FETCH, FETCH_VERSION, fetch_body(topic, 0, 0, isolation_level=1))
        )
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [
            (pid, aborted_first)
        ]
        assert part.last_stable_offset == part.high_watermark
        # the markers: control batches of the producer, at their offsets
        raw_batches = _batches(part.records)
        controls = [b for b in raw_batches if b.is_control_batch]
        assert [b.base_offset for b in controls] == [commit, abort]
        assert all(b.is_transactional and b.producer_id == pid for b in controls)
        data = [b for b in raw_batches if b.is_transactional and not b.is_control_batch]
        assert [b.base_offset for b in data] == [first, aborted_first]

    expected = [b"a", b"t1", b"t2", b"b", b"c"]
    assert _read(pod, topic, "read_committed", len(expected)) == expected
    assert _read(pod, topic, "read_uncommitted", 7) == [
        b"a", b"t1", b"t2", b"b", b"x1", b"x2", b"c",
    ]  # fmt: skip
    # V1 CONSUME: committed records only, no markers
    with pod.client() as client:
        assert [v for _, v in client.consume(topic, 0, 0).records] == expected


def test_the_kafka_store_path_and_a_fenced_epoch(pod: Pod, writer: TopicWriter, topic: str) -> None:
    pid = _pid()
    writer.topic(topic)
    assert writer.txn_add(topic, 0, pid, 4) == 0
    status, first, _ = writer.txn_append(topic, 0, pid, 4, 0, [(b"k", b"one"), (b"k", b"two")])
    assert status == 0
    with RawKafka(pod.kafka_port) as raw:
        # an older epoch of the producer: fenced
        assert _produce_txn(raw, topic, [b"zombie"], pid, 3, 0) == errors.INVALID_PRODUCER_EPOCH
    assert writer.txn_end(topic, 0, pid, 4, commit=True) is not None
    assert _read(pod, topic, "read_committed", 2) == [b"one", b"two"]


def _batches(data: bytes) -> list[Any]:
    """The RecordBatches of a Fetch answer's records."""
    memory = MemoryRecords(bytes(data or b""))
    out = []
    while memory.has_next():
        out.append(memory.next_batch())
    return out


def _entry(ms: int, *fields: bytes) -> tuple[bytes, list[bytes]]:
    return f"{ms}-0".encode(), list(fields)


def test_fetch_batches_split_per_producer_with_markers_as_control_batches() -> None:
    from adapter.kafka.fetch_reads import encode_entries
    from mapping.topic.topic_config import TopicConfig

    plain = TopicConfig("t", 1, 1, 1)
    pid, epoch = b"77", b"2"
    entries = [
        _entry(1, b"key", b"k", b"value", b"a", b"ts", b"1", b"create_ts", b"5", b"n", b"1"),
        _entry(2, b"key", b"k", b"value", b"t1", b"ts", b"2", b"create_ts", b"5",
               b"pid", pid, b"pe", epoch, b"n", b"2"),
        _entry(3, b"value", b"t2", b"ts", b"2", b"create_ts", b"5", b"null", b"key",
               b"pid", pid, b"pe", epoch, b"n", b"3"),
        _entry(4, b"key", b"k", b"value", b"o", b"ts", b"2", b"create_ts", b"5",
               b"pid", b"78", b"pe", b"0", b"n", b"4"),
        _entry(5, b"ctl", b"commit", b"pid", pid, b"pe", epoch, b"ts", b"6", b"n", b"5"),
        _entry(6, b"key", b"k", b"value", b"b", b"ts", b"7", b"create_ts", b"5", b"n", b"6"),
    ]  # fmt: skip
    batches, taken, _, done, transactional = encode_entries(
        entries, 0, 1 << 40, 1 << 20, True, plain
    )
    assert (taken, done, transactional) == (6, False, True)
    found = _batches(b"".join(batches))
    shape = [
        (b.base_offset, b.is_transactional, b.is_control_batch, b.producer_id, b.producer_epoch)
        for b in found
    ]
    assert shape == [
        (1, False, False, -1, -1),
        (2, True, False, 77, 2),
        (4, True, False, 78, 0),
        (5, True, True, 77, 2),
        (6, False, False, -1, -1),
    ]
    assert all(b.validate_crc() for b in found)
    assert [[r.value for r in b] for b in found[:3]] == [[b"a"], [b"t1", b"t2"], [b"o"]]
    (marker,) = list(found[3])
    # Kafka's ControlRecordType COMMIT (version 0, type 1) and EndTransactionMarker v0
    assert (marker.key, marker.value, marker.timestamp) == (b"\0\0\0\1", b"\0" * 6, 6)


def test_a_read_committed_long_poll_wakes_when_the_transaction_commits(
    pod: Pod, writer: TopicWriter, topic: str
) -> None:
    writer.topic(topic)
    pid = _pid()
    assert writer.txn_add(topic, 0, pid, 0) == 0
    with RawKafka(pod.kafka_port, timeout=30) as raw:
        first = _produce_txn(raw, topic, [b"held"], pid, 0, 0)
        body = fetch_body(topic, 0, first, max_wait_ms=20_000, isolation_level=1)
        raw.send(FETCH, FETCH_VERSION, body)
        time.sleep(0.5)  # (the poll is waiting by now; were it not, it still answers)
        assert writer.txn_end(topic, 0, pid, 0, commit=True) is not None
        part, records = fetched(raw.receive(FETCH, FETCH_VERSION))
        # woken by the marker, not ended by max_wait_ms: the record is in the answer, and
        # the marker's control record after it (clients skip it)
        assert [r.value for r in records] == [b"held", b"\0" * 6]
        assert part.last_stable_offset == part.high_watermark


def _eof_consumer(pod: Pod, topic: str, isolation: str) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": pod.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    return consumer


def _to_eof(consumer: Consumer, seconds: float = 15.0) -> tuple[list[bytes], bool]:
    """The values polled until PARTITION_EOF (True) or ``seconds`` passed (False)."""
    values: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None:
            continue
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            return values, True
        assert error is None, error
        values.append(message.value())
    return values, False


def _position(consumer: Consumer, topic: str) -> int:
    return consumer.position([TopicPartition(topic, 0)])[0].offset


def test_read_committed_reaches_the_end_while_a_transaction_is_open(
    pod: Pod, writer: TopicWriter, topic: str
) -> None:
    """librdkafka's 0098: with ``enable.partition.eof``, a read_committed consumer gets
    PARTITION_EOF once it has read every record before an open transaction (its position
    equals the last stable offset answered), then reads the transaction once committed; a
    read_uncommitted one reads through it to the high watermark."""
    writer.topic(topic)
    pid = _pid()
    committed = _eof_consumer(pod, topic, "read_committed")
    uncommitted = _eof_consumer(pod, topic, "read_uncommitted")
    try:
        with RawKafka(pod.kafka_port) as raw:
            _produce_plain(raw, topic, [b"a", b"b"])
            assert writer.txn_add(topic, 0, pid, 0) == 0
            assert _produce_txn(raw, topic, [b"t1", b"t2"], pid, 0, 0) > 0
            _produce_plain(raw, topic, [b"c"])

            assert _to_eof(committed) == ([b"a", b"b"], True)
            assert _position(committed, topic) == _latest(raw, topic, 1)
            assert _to_eof(uncommitted) == ([b"a", b"b", b"t1", b"t2", b"c"], True)
            assert _position(uncommitted, topic) == _latest(raw, topic, 0)

            assert writer.txn_end(topic, 0, pid, 0, commit=True) is not None
            assert _to_eof(committed) == ([b"t1", b"t2", b"c"], True)
            assert _position(committed, topic) == _latest(raw, topic, 1) == _latest(raw, topic, 0)
    finally:
        committed.close()
        uncommitted.close()
