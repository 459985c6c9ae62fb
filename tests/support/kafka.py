"""Kafka clients in tests: a raw client, one request at a time over a socket, through the
pod's own sans-I/O core (so error paths the real clients never take can be provoked), the
requests it sends, and confluent-kafka readers (read_committed among them)."""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

from adapter.kafka import errors, protocol
from adapter.kafka.records import NO_PRODUCER_ID
from adapter.kafka.versions import (
    FETCH,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    Api,
)
from mapping.core.records import Header, StoredRecord
from mapping.partition.record_walk import MAX_OFFSET_DELTA

if TYPE_CHECKING:
    from tests.support.pods import Pod

# The key prefix of the ``kafka_pods`` fixture's pods: their broker registry lists only them
# (a pod another test kills with the default prefix stays registered until its TTL runs out).
KAFKA_PODS_PREFIX = "kafkatests"


@dataclass(slots=True)
class Record:
    """A record as a producer sends it."""

    key: bytes | None
    value: bytes | None
    timestamp: int  # CreateTime as the producer set it (ms)
    headers: list[Header]


def encode_batch(
    records: list[Record],
    *,
    compression: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """One batch as a producer sends it (``transactional``: with the transactional bit)."""
    builder = DefaultRecordBatchBuilder(
        2, compression, int(transactional), producer_id, producer_epoch, base_sequence, 1 << 31
    )
    for delta, r in enumerate(records):
        builder.append(delta, r.timestamp, r.key, r.value, r.headers)
    return bytes(builder.build())


def encode_message_set(records: list[Record], *, magic: int, compression: int = 0) -> bytes:
    """A magic 0 or 1 MessageSet as an old producer sends it (offsets 0, 1, ...; headers and,
    in magic 0, timestamps left out: the format has none)."""
    builder = LegacyRecordBatchBuilder(magic, compression, 1 << 30)
    for offset, r in enumerate(records):
        builder.append(offset, r.timestamp, r.key, r.value)
    return bytes(builder.build())


def encode_stored(records: list[StoredRecord]) -> bytes:
    """Uncompressed batches holding the pod's ``records`` (offsets increasing) at their
    offsets, as a Fetch answers them."""
    out: list[bytes] = []
    i = 0
    while i < len(records):
        base = records[i].offset
        builder = DefaultRecordBatchBuilder(2, 0, 0, NO_PRODUCER_ID, -1, -1, 1 << 31)
        while i < len(records) and records[i].offset - base <= MAX_OFFSET_DELTA:
            r = records[i]
            builder.append(r.offset - base, r.timestamp, r.key, r.value, r.headers)
            i += 1
        batch = builder.build()
        struct.pack_into(">q", batch, 0, base)  # the base offset: not covered by the CRC
        out.append(bytes(batch))
    return b"".join(out)


class RawKafka:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api: Api, version: int, body: Any) -> int:
        self.correlation_id += 1
        self.sock.sendall(
            protocol.encode_request(api, version, body, self.correlation_id, "raw-test")
        )
        return self.correlation_id

    def receive(self, api: Api, version: int) -> Any:
        (size,) = struct.unpack(">i", self._read(4))
        return api.response.decode(self._read(size), version=version, header=True)

    def call(self, api: Api, version: int, body: Any) -> Any:
        correlation_id = self.send(api, version, body)
        reply = self.receive(api, version)
        assert reply.header.correlation_id == correlation_id
        return reply

    def raw_exchange(self, payload: bytes) -> bytes:
        """A bare frame out, one back: SaslHandshake v0's SASL tokens (no request header)."""
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def closed_by_peer(self) -> bool:
        """True when the pod closed the connection (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the pod")
            data += chunk
        return data


def batch(
    values: list[bytes | None],
    *,
    key: bytes | None = b"k",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    compression: int = 0,
    transactional: bool = False,
) -> bytes:
    return encode_batch(
        [Record(key, v, 1_700_000_000_000, []) for v in values],
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
    )


def produce_body(topic: str, partition: int, data: bytes, acks: int = 1, version: int = 9) -> Any:
    request = PRODUCE.request
    return request[version](
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[
            request.TopicProduceData(
                name=topic,
                partition_data=[
                    request.TopicProduceData.PartitionProduceData(index=partition, records=data)
                ],
            )
        ],
    )


def partition_reply(response: Any) -> Any:
    return response.responses[0].partition_responses[0]


def produce_values(raw: RawKafka, topic: str, partition: int, *values: bytes) -> int:
    """``values`` appended to one partition by a raw Produce v9; the first one's offset."""
    reply = partition_reply(
        raw.call(PRODUCE, 9, produce_body(topic, partition, batch(list(values))))
    )
    assert reply.error_code == errors.NONE
    return reply.base_offset


def fetch_body(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    version: int = 12,
    isolation_level: int = 0,
) -> Any:
    request = FETCH.request
    return request[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=-1,
        topics=[
            request.FetchTopic(
                topic=topic,
                partitions=[
                    request.FetchTopic.FetchPartition(
                        partition=partition,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def partition_records(part: Any) -> list[Any]:
    """The records of one partition of a Fetch response, decoded by aiokafka."""
    from aiokafka.record.memory_records import MemoryRecords

    out = []
    memory = MemoryRecords(bytes(part.records or b""))
    while memory.has_next():
        out += list(memory.next_batch())
    return out


def fetched(response: Any) -> tuple[Any, list[Any]]:
    """(partition data, its records) of a one-partition Fetch response."""
    part = response.responses[0].partitions[0]
    return part, partition_records(part)


def commit_offsets(
    pod: Pod,
    group: str,
    topic: str,
    offsets: dict[int, int],
    *,
    epoch: int = -1,
    metadata: str | None = None,
    version: int = OFFSET_COMMIT.max_version,
) -> list[int]:
    """A raw OffsetCommit from outside group management; the partitions' error codes."""
    request = OFFSET_COMMIT.request[version]
    topic_type = request.OffsetCommitRequestTopic
    body = request(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            topic_type(
                name=topic,
                partitions=[
                    topic_type.OffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=epoch,
                        committed_metadata=metadata,
                    )
                    for p, offset in offsets.items()
                ],
            )
        ],
    )
    with RawKafka(pod.kafka_port) as raw:
        reply = raw.call(OFFSET_COMMIT, version, body)
    return [p.error_code for t in reply.topics for p in t.partitions]


def fetch_offsets(
    pod: Pod, group: str, topic: str, partitions: list[int], version: int
) -> list[Any]:
    """A raw OffsetFetch of ``version``: the partitions answered."""
    request = OFFSET_FETCH.request[version]
    with RawKafka(pod.kafka_port) as raw:
        if version >= 8:
            asked = request.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                name=topic, partition_indexes=partitions
            )
            body = request(groups=[request.OffsetFetchRequestGroup(group_id=group, topics=[asked])])
            (answered,) = raw.call(OFFSET_FETCH, version, body).groups
            assert answered.error_code == errors.NONE
            return [p for t in answered.topics for p in t.partitions]
        topics = [request.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)]
        reply = raw.call(OFFSET_FETCH, version, request(group_id=group, topics=topics))
    return [p for t in reply.topics for p in t.partitions]


def fetch_offsets_answer(pod: Pod, group: str, topic: str, partition: int) -> tuple[int, int]:
    """A raw OffsetFetch v7 of one partition: (the group's error, the committed offset
    answered; NO_OFFSET (-1) when none or when the group failed)."""
    request = OFFSET_FETCH.request[7]
    topics = [request.OffsetFetchRequestTopic(name=topic, partition_indexes=[partition])]
    with RawKafka(pod.kafka_port) as raw:
        reply = raw.call(OFFSET_FETCH, 7, request(group_id=group, topics=topics))
    answered = [p.committed_offset for t in reply.topics for p in t.partitions]
    return reply.error_code, answered[0] if answered else -1


def kafka_read_for(bootstrap: str, topic: str, partitions: int, seconds: float) -> set[bytes]:
    """The values a Kafka consumer reads from the start of ``partitions`` within ``seconds``
    (a reader running beside a fault: what it saw must still be there afterwards)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{os.urandom(3).hex()}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


def read_committed(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 60.0
) -> dict[int, list[bytes]]:
    """Every partition's values, read with confluent-kafka's isolation.level=read_committed
    from the start until ``expected`` records arrived, then 2 s longer (so that a duplicate,
    or a record that must never show, would)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{os.urandom(4).hex()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "socket.timeout.ms": 5000,
        "topic.metadata.refresh.interval.ms": 1000,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    found: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
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


def produce_delivered(
    bootstrap: str,
    topic: str,
    records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
) -> list[Any]:
    """Produce (partition, key, value, headers) records with confluent-kafka, in order;
    their delivery reports (``Message``: partition, offset, timestamp) in the same order, all
    delivered (reports of different partitions may come in another order)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    delivered: dict[int, tuple[Any, Any]] = {}

    def report(i: int, error: Any, message: Any) -> None:
        delivered[i] = (error, message)

    for i, (partition, key, value, headers) in enumerate(records):
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers,
                         on_delivery=partial(report, i))  # fmt: skip
    assert producer.flush(15) == 0
    assert [delivered[i][0] for i in range(len(records))] == [None] * len(records)
    return [delivered[i][1] for i in range(len(records))]
