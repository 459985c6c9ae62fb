"""A raw Kafka client for tests: one request at a time over a socket, through the pod's own
sans-I/O core (so error paths the real clients never take can be provoked)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from adapter.kafka import protocol
from adapter.kafka.records import NO_PRODUCER_ID
from adapter.kafka.versions import FETCH, PRODUCE, Api
from mapping.records import MAX_OFFSET_DELTA, Header, StoredRecord


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
) -> bytes:
    """One batch as a producer sends it."""
    builder = DefaultRecordBatchBuilder(
        2, compression, 0, producer_id, producer_epoch, base_sequence, 1 << 31
    )
    for delta, r in enumerate(records):
        builder.append(delta, r.timestamp, r.key, r.value, r.headers)
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
) -> bytes:
    return encode_batch(
        [Record(key, v, 1_700_000_000_000, []) for v in values],
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
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


def fetch_body(
    topic: str, partition: int, offset: int, *, max_wait_ms: int = 0, version: int = 12
) -> Any:
    request = FETCH.request
    return request[version](
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
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


def fetched(response: Any) -> tuple[Any, list[Any]]:
    """(partition data, its records) of a one-partition Fetch response."""
    from aiokafka.record.memory_records import MemoryRecords

    part = response.responses[0].partitions[0]
    out = []
    memory = MemoryRecords(bytes(part.records or b""))
    while memory.has_next():
        out += list(memory.next_batch())
    return part, out
