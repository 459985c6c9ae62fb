"""What the V1 client sends and how it reads the answers, with no sockets: request
arguments, reply types, and the record a consumer hands out.

Keys and values are bytes (str is UTF-8 encoded) and are percent-escaped on the wire, so any
byte string round-trips (docs/protocol.md, "Bytes").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from adapter.v1 import protocol
from adapter.v1.escaping import escape, unescape
from mapping.core.codec import DEFAULT_SEQUENCE_BITS, decode


class RequestFailed(Exception):
    def __init__(self, response: protocol.Response) -> None:
        super().__init__(f"{response.code}: {response.message}")
        self.code = response.code
        self.message = response.message
        self.response = response


@dataclass(frozen=True, slots=True)
class ProduceReply:
    partition: int
    offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ConsumeReply:
    records: list[tuple[int, bytes]]
    high_watermark: int

    @property
    def next_offset(self) -> int | None:
        """Where the next CONSUME starts (None when nothing was returned)."""
        return self.records[-1][0] + 1 if self.records else None


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """JOIN / SYNC: the group's generation and this member's partitions."""

    generation: int
    assigned: list[int]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as V1 CONSUME gives it: ``offset:value``, nothing more.

    - ``timestamp``: the append time in ms, read from the offset (``offset >> B``, B the
      deployment's ``--sequence-bits``, docs/protocol.md "Offsets"): when the record reached
      Redis, not the CreateTime a Kafka producer may have set on it.
    - ``key``: always None. V1 PRODUCE sends a key (it chooses the partition and is stored
      with the record, where Kafka consumers and Spark read it) but CONSUME does not return
      keys: the protocol has no field for them.
    - ``headers``: always empty. V1 has no headers; those of a record a Kafka producer wrote
      are read by Kafka consumers only.
    """

    topic: str
    partition: int
    offset: int
    value: bytes
    timestamp: int
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def consumed_records(
    topic: str, partition: int, reply: ConsumeReply, sequence_bits: int = DEFAULT_SEQUENCE_BITS
) -> list[Record]:
    """A CONSUME reply's records; ``sequence_bits`` must be the pods' ``--sequence-bits``."""
    return [
        Record(topic, partition, offset, value, decode(offset, sequence_bits)[0])
        for offset, value in reply.records
    ]


@dataclass(frozen=True, slots=True)
class AcquiredRecord:
    """One record SHARE_ACQUIRE handed to this member: acknowledge it by ``partition`` and
    ``offset`` (SHARE_ACK) before ``lock_ms`` passes, or it goes to another member."""

    partition: int
    offset: int
    delivery_count: int
    value: bytes


@dataclass(frozen=True, slots=True)
class ShareAcquireReply:
    records: list[AcquiredRecord]
    lock_ms: int  # how long the member holds each record unless it acknowledges it

    def offsets(self, partition: int) -> list[int]:
        """The offsets acquired on ``partition`` (what SHARE_ACK takes)."""
        return [r.offset for r in self.records if r.partition == partition]


# What SHARE_ACK does with the records it names.
ACK_TYPES = ("accept", "release", "reject")


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def produce_args(topic: str, key: bytes | str, value: bytes | str, acks: str = "1") -> str:
    return f"{topic} {escape(_bytes(key), also=':')}:{escape(_bytes(value))} acks={acks}"


def auth_args(user: str, password: bytes | str) -> str:
    """The password is percent-escaped, so it may hold any byte, spaces included."""
    return f"{user} {escape(_bytes(password))}"


def join_args(group: str, topic: str, consumer_id: str, assignor: str | None = None) -> str:
    suffix = f" assignor={assignor}" if assignor else ""
    return f"{group} {topic} {consumer_id}{suffix}"


def share_acquire_args(
    group: str, topic: str, consumer_id: str, max_records: int | None = None
) -> str:
    suffix = f" max={max_records}" if max_records is not None else ""
    return f"{group} {topic} {consumer_id}{suffix}"


def share_ack_args(
    group: str, topic: str, consumer_id: str, partition: int, offsets: Iterable[int], kind: str
) -> str:
    """``kind``: accept, release or reject (one of ``ACK_TYPES``)."""
    if kind not in ACK_TYPES:
        raise ValueError(f"kind must be one of {', '.join(ACK_TYPES)}")
    listed = ",".join(str(o) for o in offsets)
    if not listed:
        raise ValueError("no offsets to acknowledge")
    return f"{group} {topic} {consumer_id} {partition} {listed} {kind}"


def ok(response: protocol.Response) -> dict[str, str]:
    if not response.ok:
        raise RequestFailed(response)
    return response.fields()


def produce_reply(response: protocol.Response) -> ProduceReply:
    fields = ok(response)
    return ProduceReply(int(fields["partition"]), int(fields["offset"]), int(fields["hw"]))


def consume_reply(response: protocol.Response) -> ConsumeReply:
    fields = ok(response)
    records = []
    for item in filter(None, fields["messages"].split(",")):
        offset, _, value = item.partition(":")
        records.append((int(offset), unescape(value)))
    return ConsumeReply(records, int(fields["hw"]))


def assignment_reply(response: protocol.Response) -> GroupAssignment:
    fields = ok(response)
    assigned = protocol.parse_list(fields["assigned"])
    return GroupAssignment(int(fields["generation"]), assigned)


def share_acquire_reply(response: protocol.Response) -> ShareAcquireReply:
    fields = ok(response)
    records = []
    for item in filter(None, fields["records"].split(",")):
        partition, offset, count, value = item.split(":", 3)
        records.append(AcquiredRecord(int(partition), int(offset), int(count), unescape(value)))
    return ShareAcquireReply(records, int(fields.get("lock_ms", "0")))


def share_ack_reply(response: protocol.Response) -> int:
    """The number of records acknowledged (all those named: else `RequestFailed`
    INVALID_RECORD_STATE, the others acknowledged all the same)."""
    return int(ok(response)["acked"])


def share_leave_reply(response: protocol.Response) -> bool:
    """Whether the consumer was a member (False: nothing to leave)."""
    return ok(response)["left"] == "true"
