"""``__consumer_offsets`` as Kafka writes it: the topic's shape and its records' format.

The pods keep committed offsets in their own keys (mapping/group/groups.py,
mapping/kafka_group/offsets.py); tools that read Kafka's offsets topic instead of asking
OffsetFetch (Burrow, some exporters, ``kafka-console-consumer --formatter
OffsetsMessageFormatter``) read a mirror of them: a compacted topic of this name whose
records are the commits in Kafka's own format (mapping/group/offsets_mirror.py writes them). This
module is the pure part: names, the partition of a group, and the record codec.

Records, as Kafka's group coordinator writes them (OffsetCommitKey.json and
OffsetCommitValue.json in apache/kafka's group-coordinator; big-endian, a string is an
int16 length then UTF-8):

    key    int16 version = 1, string group, string topic, int32 partition
    value  int16 version = 3, int64 offset (the next to read), int32 leader epoch (-1:
           none), string metadata, int64 commit timestamp (ms)

A deleted offset (OffsetDelete, a group's deletion, offsets retention) is the key with a
null value (a tombstone). Value version 3 is what Kafka 2.1+ writes without an expiry
timestamp; Burrow reads it since 1.2.0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSETS_TOPIC = "__consumer_offsets"
# Kafka's offsets.topic.num.partitions default
OFFSETS_TOPIC_PARTITIONS = 50
# The record versions written (and the only ones read back here)
KEY_VERSION = 1
VALUE_VERSION = 3
NO_LEADER_EPOCH = -1

_INT16 = struct.Struct(">h")
_KEY_TAIL = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqi")
_TIMESTAMP = struct.Struct(">q")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``h = 31 * h + c`` over the UTF-16 code units, as a signed
    32-bit int (a character outside the BMP counts as its two surrogates)."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` of an int, with Integer.MIN_VALUE (whose absolute
    value does not fit) taken as 0. Not ``n & 0x7fffffff`` (``Utils.toPositive``, the
    producer partitioner's), which gives another partition for every negative hash."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """The offsets-topic partition of ``group``'s commits, as Kafka's group coordinator
    places them: ``Utils.abs(groupId.hashCode()) % partitions``."""
    return kafka_abs(java_string_hash(group)) % partitions


def _string(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > 0x7FFF:
        raise ValueError(f"a string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def encode_key(group: str, topic: str, partition: int) -> bytes:
    """An offset commit record's key (version 1)."""
    return _INT16.pack(KEY_VERSION) + _string(group) + _string(topic) + _KEY_TAIL.pack(partition)


def encode_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int) -> bytes:
    """An offset commit record's value (version 3)."""
    return (
        _VALUE_HEAD.pack(VALUE_VERSION, offset, leader_epoch)
        + _string(metadata)
        + _TIMESTAMP.pack(commit_timestamp)
    )


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, form: struct.Struct) -> tuple:
        if self.at + form.size > len(self.data):
            raise ValueError("record too short")
        fields = form.unpack_from(self.data, self.at)
        self.at += form.size
        return fields

    def string(self) -> str:
        (size,) = self.take(_INT16)
        if size < 0 or self.at + size > len(self.data):
            raise ValueError("bad string length")
        text = self.data[self.at : self.at + size].decode("utf-8", "surrogatepass")
        self.at += size
        return text

    def done(self) -> None:
        if self.at != len(self.data):
            raise ValueError("bytes left over")


def decode_key(data: bytes) -> OffsetKey:
    """An offset commit key (versions 0 and 1 are alike); ValueError for anything else
    (Kafka's group metadata records, version 2, are never written here)."""
    reader = _Reader(data)
    (version,) = reader.take(_INT16)
    if version not in (0, 1):
        raise ValueError(f"not an offset commit key (version {version})")
    group, topic = reader.string(), reader.string()
    (partition,) = reader.take(_KEY_TAIL)
    reader.done()
    return OffsetKey(group, topic, partition)


def decode_value(data: bytes) -> OffsetValue:
    """An offset commit value of version 3; ValueError for anything else."""
    reader = _Reader(data)
    version, offset, leader_epoch = reader.take(_VALUE_HEAD)
    if version != VALUE_VERSION:
        raise ValueError(f"value version {version}, not {VALUE_VERSION}")
    metadata = reader.string()
    (timestamp,) = reader.take(_TIMESTAMP)
    reader.done()
    return OffsetValue(offset, leader_epoch, metadata, timestamp)
