"""Compacted topics for the tests of every reader (tests/kafka, tests/v1, tests/spark): a
topic set up in Redis before any pod reads it, a scripted sequence of many versions of many
keys with tombstones, what Kafka's cleaner keeps of it, and compaction run now (the CLI)."""

from __future__ import annotations

from typing import Any

from mapping.keys import Keys
from mapping.topics import alter_configs_sync, ensure_topic_sync
from tests.support.cli import CliTarget

Record = tuple[bytes, bytes | None]  # (key, value); None: a tombstone


def compacted_topic(client: Any, keys: Keys, name: str, **configs: int | str) -> None:
    """Topic ``name``: one partition, one replica, cleanup.policy=compact (and ``configs``,
    as topic hash fields), written to Redis before a pod reads it."""
    ensure_topic_sync(client, keys, name, 1, 1, 1)
    alter_configs_sync(client, keys, name, {"cleanup_policy": "compact", **configs})


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
