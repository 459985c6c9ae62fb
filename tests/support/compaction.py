"""Compacted topics for the tests of every reader (tests/kafka, tests/v1, tests/spark): a
topic set up in Redis before any pod reads it, a scripted sequence of many versions of many
keys with tombstones, what Kafka's cleaner keeps of it, the active segment rolled by one more
record, and compaction run now (the CLI)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from mapping.core.keys import Keys
from mapping.topic.topics import alter_configs_sync, ensure_topic_sync
from tests.support.cli import CliTarget

Record = tuple[bytes, bytes | None]  # (key, value); None: a tombstone


# segment.ms of the tests' compacted topics: a record appended 2 ms after a segment's first
# record rolls it, as Kafka users set a small segment.ms to see compaction at work.
SEGMENT_MS = "1"


def compacted_topic(client: Any, keys: Keys, name: str, **configs: int | str) -> None:
    """Topic ``name``: one partition, one replica, cleanup.policy=compact, segment.ms
    SEGMENT_MS (and ``configs``, as topic hash fields), written to Redis before a pod reads
    it."""
    ensure_topic_sync(client, keys, name, 1, 1, 1)
    changes = {"cleanup_policy": "compact", "segment_ms": SEGMENT_MS, **configs}
    alter_configs_sync(client, keys, name, changes)


def roll_segment(write: Callable[[list[Record]], list[int]]) -> list[tuple[int, Record]]:
    """Close the active segment as Kafka would: after segment.ms, one more record (of a key
    of its own) through ``write`` (records -> their offsets); its (offset, record). What was
    written before it is then in closed segments, which compaction cleans."""
    time.sleep(0.01)  # not a synchronisation: the record's append time must lie past segment.ms
    record: Record = (f"roll-{uuid.uuid4().hex[:8]}".encode(), b"r")
    return list(zip(write([record]), [record], strict=True))


def scripted_records(keys: int = 12, versions: int = 4) -> list[Record]:
    """Many versions of many keys, then tombstones: one for k1 (it stays the key's latest),
    one for k2 that a later value supersedes, and k0 once more."""
    records: list[Record] = [
        (f"k{k}".encode(), f"v{v}-{k}".encode()) for v in range(versions) for k in range(keys)
    ]
    records += [(b"k1", None), (b"k2", None), (b"k2", b"back"), (b"k0", b"last")]
    return records


def kafka_keeps(
    written: list[tuple[int, Record]], tombstones_expired: bool = False
) -> list[tuple[int, Record]]:
    """What Kafka's cleaner leaves of ``written`` when every record is old enough: the
    latest record of each key, a tombstone only until it expired; in offset order."""
    latest = {key: offset for offset, (key, _) in written}
    return [
        (offset, (key, value))
        for offset, (key, value) in written
        if latest[key] == offset and not (value is None and tombstones_expired)
    ]


def compact_now(target: CliTarget, topic: str) -> str:
    """``adapter topic compact TOPIC``: what a pod's retention task does every interval."""
    return target.cli("topic", "compact", topic)
