"""ListOffsets on a live pod as Kafka 3.9 answers it: each special timestamp from the version
that knows it (-3 max timestamp v7, -4 earliest local v8, -5 latest tiered v9; without
tiered storage -4 is earliest and -5 none), and what a reader may fetch bounding the
answers (Partition.fetchOffsetForTimestamp): below the high watermark, under read_committed
below the last stable offset, so a record found by time in an open transaction is "none".
With the raw client (a transaction opened through mapping/partition/partition_txns.py, as
AddPartitionsToTxn opens it) and with confluent-kafka's transactional producer and
offsets_for_times."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from adapter.kafka import errors
from adapter.kafka.versions import LIST_OFFSETS, PRODUCE
from tests.support.kafka import RawKafka, batch, partition_reply, produce_body
from tests.support.pods import Pod
from tests.support.topic_writer import SINGLE_REPLICA_TOPICS, TopicWriter

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


@pytest.fixture
def writer(redis_url: str, pod: Pod) -> Iterator[TopicWriter]:
    """In-process parts on the shared pod's Redis and key prefix."""
    w = TopicWriter(redis_url, defaults=SINGLE_REPLICA_TOPICS)
    yield w
    w.close()


def list_offsets(
    raw: RawKafka,
    topic: str,
    spec: int,
    isolation: int = 0,
    version: int = LIST_OFFSETS.max_version,
) -> tuple[int, int, int, int]:
    """(error, timestamp, offset, leader epoch) of partition 0."""
    request = LIST_OFFSETS.request
    partition = request.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=spec
    )
    body = request[version](
        replica_id=-1,
        isolation_level=isolation,
        topics=[request.ListOffsetsTopic(name=topic, partitions=[partition])],
    )
    (answer,) = raw.call(LIST_OFFSETS, version, body).topics[0].partitions
    return answer.error_code, answer.timestamp, answer.offset, answer.leader_epoch


def produce(raw: RawKafka, topic: str, values: list[bytes], **txn: int) -> int:
    """The batch's base offset; then a pause, so that the next append has a later ms."""
    transactional = bool(txn)
    data = batch(values, transactional=transactional, **txn)
    reply = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, data)))
    assert reply.error_code == errors.NONE
    time.sleep(0.005)
    return reply.base_offset


def test_special_timestamps_by_version(pod: Pod, writer: TopicWriter, topic: str) -> None:
    writer.topic(topic)
    with RawKafka(pod.kafka_port) as raw:
        first = produce(raw, topic, [b"a"])
        last = produce(raw, topic, [b"b", b"c"]) + 1
        # by time: the first record; its leader epoch, the pods' Redis primary's
        _, appended, _, epoch = list_offsets(raw, topic, 0)
        assert epoch > 0
        for version in (8, 9):
            assert list_offsets(raw, topic, EARLIEST_LOCAL, version=version) == (
                errors.NONE, -1, first, epoch,
            )  # fmt: skip
            assert list_offsets(raw, topic, EARLIEST, version=version)[2] == first
        assert list_offsets(raw, topic, LATEST_TIERED, version=9) == (errors.NONE, -1, -1, -1)
        assert list_offsets(raw, topic, LATEST)[2] == last + 1
        assert list_offsets(raw, topic, 0) == (errors.NONE, appended, first, epoch)
        error, _, offset, found_epoch = list_offsets(raw, topic, MAX_TIMESTAMP, version=7)
        assert (error, offset, found_epoch) == (errors.NONE, last, epoch)
        # a special timestamp its version does not know (Kafka's timestampMinSupportedVersion)
        for spec, version in [
            (MAX_TIMESTAMP, 6), (EARLIEST_LOCAL, 7), (LATEST_TIERED, 8), (-6, 9), (-99, 1),
        ]:  # fmt: skip
            assert list_offsets(raw, topic, spec, version=version) == (
                errors.UNSUPPORTED_VERSION, -1, -1, -1,
            )  # fmt: skip
        # a time past every record: none
        assert list_offsets(raw, topic, appended + 3_600_000) == (errors.NONE, -1, -1, -1)
        missing = list_offsets(raw, f"{topic}-none", LATEST_TIERED, version=9)
        assert missing == (errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1)


def test_read_committed_answers_only_below_the_last_stable_offset(
    pod: Pod, writer: TopicWriter, topic: str
) -> None:
    writer.topic(topic)
    pid = 2_000_000 + int.from_bytes(os.urandom(3), "big")
    with RawKafka(pod.kafka_port) as raw:
        plain = produce(raw, topic, [b"a"])
        assert writer.txn_add(topic, 0, pid, 0) == 0
        first = produce(raw, topic, [b"t1", b"t2"], producer_id=pid, producer_epoch=0,
                        base_sequence=0)  # fmt: skip
        after = produce(raw, topic, [b"b"])
        _, at, found, _ = list_offsets(raw, topic, first >> 10)  # (default sequence bits)
        assert found == first

        # read_uncommitted: below the high watermark
        assert list_offsets(raw, topic, at, 0)[2] == first
        assert list_offsets(raw, topic, MAX_TIMESTAMP, 0)[2] == after
        assert list_offsets(raw, topic, LATEST, 0)[2] == after + 1
        # read_committed: the last stable offset is where a reader of everything before the
        # transaction stands (offsets are sparse: the transaction's first lies further on)
        assert list_offsets(raw, topic, LATEST, 1)[2] == plain + 1 < first
        assert list_offsets(raw, topic, at, 1) == (errors.NONE, -1, -1, -1)
        assert list_offsets(raw, topic, MAX_TIMESTAMP, 1) == (errors.NONE, -1, -1, -1)
        assert list_offsets(raw, topic, 0, 1)[2] == plain  # found below it: answered
        assert list_offsets(raw, topic, EARLIEST, 1)[2] == plain  # never bounded
        assert list_offsets(raw, topic, EARLIEST_LOCAL, 1)[2] == plain

        marker = writer.txn_end(topic, 0, pid, 0, commit=True)
        assert marker is not None
        assert list_offsets(raw, topic, at, 1)[:3] == (errors.NONE, at, first)
        assert list_offsets(raw, topic, LATEST, 1)[2] == marker + 1
        newest = list_offsets(raw, topic, MAX_TIMESTAMP, 0)
        assert newest[2] == marker and list_offsets(raw, topic, MAX_TIMESTAMP, 1) == newest


def test_offsets_for_times_of_confluent_kafka_in_an_open_transaction(pod: Pod, topic: str) -> None:
    """A transactional producer's records, written and not committed yet: a read_committed
    consumer's offsets_for_times finds none (-1) until the commit, a read_uncommitted one
    finds the first at once."""
    producer = Producer({
        "bootstrap.servers": pod.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:10]}",
        "transaction.timeout.ms": 30_000,
    })  # fmt: skip
    producer.init_transactions(20)
    since = int(time.time() * 1000) - 1
    producer.begin_transaction()
    for value in (b"t1", b"t2"):
        producer.produce(topic, value, partition=0)
    assert producer.flush(20) == 0  # written, the transaction open

    def offset_for(isolation: str) -> int:
        consumer = Consumer({
            "bootstrap.servers": pod.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
        })  # fmt: skip
        try:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, since)], 10)
            assert found.error is None
            return found.offset
        finally:
            consumer.close()

    first = offset_for("read_uncommitted")
    assert first >= 0
    assert offset_for("read_committed") == -1
    producer.commit_transaction(20)
    assert offset_for("read_committed") == first
