"""The one part of Kafka's embedded consumer protocol the coordinator reads: the topics a
member's ``ConsumerProtocolSubscription`` (JoinGroup metadata, protocol type "consumer")
names, for OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC. Every version (0-3) starts with
``int16 version, int32 count, count x (int16 length, bytes)``, never flexible."""

from __future__ import annotations

import struct


def subscribed_topics(metadata: bytes) -> set[str]:
    """The topic names in ``metadata``; an empty set when it cannot be read."""
    try:
        (count,) = struct.unpack_from(">i", metadata, 2)
        topics, position = set(), 6
        for _ in range(max(count, 0)):
            (length,) = struct.unpack_from(">h", metadata, position)
            position += 2
            name = metadata[position : position + length]
            if len(name) != length:
                return set()
            topics.add(name.decode())
            position += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return set()
