"""The parts of Kafka's embedded consumer protocol the coordinator reads and writes: a
member's ``ConsumerProtocolSubscription`` (JoinGroup metadata, protocol type "consumer") and
the ``ConsumerProtocolAssignment`` a classic member of a KIP-848 group gets from SyncGroup
(docs/kafka-groups-design.md, "Classic members of a consumer group"). Never flexible:
strings are int16 length + bytes, arrays int32 count + items.

    Subscription: int16 version, [string] topics, bytes user_data,
                  v1+ [string topic, [int32] partitions] owned, v2+ int32 generation,
                  v3+ string rack
    Assignment:   int16 version, [string topic, [int32] partitions] assigned, bytes user_data
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClassicSubscription:
    version: int
    topics: list[str]
    owned: dict[str, list[int]]  # empty before version 1


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.position = data, 0

    def unpack(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.position)
        self.position += struct.calcsize(fmt)
        return int(value)

    def string(self) -> str:
        length = self.unpack(">h")
        text = self.data[self.position : self.position + length]
        if length < 0 or len(text) != length:
            raise ValueError("short string")
        self.position += length
        return text.decode()

    def versioned_topics(self) -> tuple[int, set[str]]:
        """The int16 version and the topic names every version starts with."""
        version = self.unpack(">h")
        return version, {self.string() for _ in range(self.unpack(">i"))}

    def skip_bytes(self) -> None:
        length = self.unpack(">i")
        if length > 0:
            self.position += length

    def topic_partitions(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for _ in range(self.unpack(">i")):
            topic = self.string()
            result[topic] = sorted(self.unpack(">i") for _ in range(self.unpack(">i")))
        return {t: ps for t, ps in result.items() if ps}


def subscription(metadata: bytes) -> ClassicSubscription | None:
    """``metadata`` read as a ConsumerProtocolSubscription; None when it cannot be."""
    try:
        reader = _Reader(metadata)
        version, topics = reader.versioned_topics()
        owned: dict[str, list[int]] = {}
        if version >= 1:
            reader.skip_bytes()
            owned = reader.topic_partitions()
        return ClassicSubscription(version, sorted(topics), owned)
    except (struct.error, ValueError, UnicodeDecodeError):
        return None


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topic names in ``metadata`` (every version starts with them; what follows is not
    read); an empty set when they cannot be read."""
    try:
        return _Reader(metadata).versioned_topics()[1]
    except (struct.error, ValueError, UnicodeDecodeError):
        return set()


def assignment(partitions: dict[str, list[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment of ``partitions``, no user data (as Kafka's coordinator
    writes it for a classic member of a consumer group: the member's subscription version)."""
    out = [struct.pack(">hi", max(0, min(version, 3)), len(partitions))]
    for topic, ps in sorted(partitions.items()):
        name = topic.encode()
        out.append(struct.pack(">h", len(name)) + name + struct.pack(">i", len(ps)))
        out.append(struct.pack(f">{len(ps)}i", *sorted(ps)))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
