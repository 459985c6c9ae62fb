"""Record a Spark job's progress in a consumer group's committed offsets.

The job is not a group member (no JOIN/generation): it writes the offsets hash directly, via
``mapping/lua/spark/commit.lua``, which only moves each partition forward. That makes a
re-run micro-batch harmless and lets ``OFFSET <group> <topic> <p>`` show how far Spark got.
The group is also listed in the groups set, so ``adapter inspect`` and the lag metrics see
it like any other, and the offsets it moved are mirrored into ``__consumer_offsets`` when
the pods keep that topic (mapping/group/offsets_mirror.py), timed by Redis' clock.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis

from mapping.connection import scripts
from mapping.core.keys import GroupKeys, Keys, group_entry
from mapping.group.offsets_mirror import Mirrored, mirror_sync

SPARK_COMMIT = scripts.load("spark/commit")


def spark_commit_call(keys: GroupKeys, next_offsets: list[tuple[int, int]]) -> tuple:
    """spark/commit.lua: (partition, next offset) pairs, each only ever moving forward."""
    args = [part for p, offset in next_offsets for part in (str(p), str(int(offset)))]
    return SPARK_COMMIT.command([keys.offsets, keys.meta, keys.offset_metadata], args)


def commit_group_offsets(
    client: redis.Redis, keys: Keys, group: str, topic: str, next_offsets: Mapping[int, int]
) -> dict[int, int]:
    """Store ``next_offsets`` (partition -> next offset to read, i.e. last processed + 1)
    unless a partition already has a higher one; returns what is stored afterwards."""
    if not next_offsets:
        return {}
    partitions = sorted(next_offsets)
    command = spark_commit_call(
        keys.group(group, topic), [(p, next_offsets[p]) for p in partitions]
    )
    # (a first use on this Redis, or after SCRIPT FLUSH / restart, loads it)
    stored = scripts.call_sync(client, command)
    # Another slot than the offsets (Redis Cluster): its own call, as JOIN does.
    client.sadd(keys.groups, group_entry(group, topic))
    now = dict(zip(partitions, map(int, stored), strict=True))
    seconds, micros = client.time()
    at = int(seconds) * 1000 + int(micros) // 1000
    # (a partition already further along keeps its mirrored commit)
    moved = {p: o for p, o in now.items() if o == int(next_offsets[p])}
    mirror_sync(client, keys, {(group, topic, p): Mirrored(o, at) for p, o in moved.items()})
    return now
