"""Record a Spark job's progress in a consumer group's committed offsets.

The job is not a group member (no JOIN/generation): it writes the offsets hash directly, via
``mapping/lua/spark_commit.lua``, which only moves each partition forward. That makes a
re-run micro-batch harmless and lets ``OFFSET <group> <topic> <p>`` show how far Spark got.
The group is also listed in the groups set, so ``adapter inspect`` and the lag metrics see
it like any other.
"""

from __future__ import annotations

from collections.abc import Mapping

import redis
from redis.exceptions import NoScriptError

from mapping import scripts
from mapping.keys import Keys, group_entry


def commit_group_offsets(
    client: redis.Redis, keys: Keys, group: str, topic: str, next_offsets: Mapping[int, int]
) -> dict[int, int]:
    """Store ``next_offsets`` (partition -> next offset to read, i.e. last processed + 1)
    unless a partition already has a higher one; returns what is stored afterwards."""
    if not next_offsets:
        return {}
    script = scripts.load("spark_commit")
    partitions = sorted(next_offsets)
    args = [part for p in partitions for part in (str(p), str(int(next_offsets[p])))]
    gk = keys.group(group, topic)
    command = script.command([gk.offsets, gk.meta, gk.offset_metadata], args)
    try:
        stored = client.execute_command(*command)
    except NoScriptError:
        # First use on this Redis (or after SCRIPT FLUSH / restart): load, then call by SHA.
        client.script_load(script.source)
        stored = client.execute_command(*command)
    # Another slot than the offsets (Redis Cluster): its own call, as JOIN does.
    client.sadd(keys.groups, group_entry(group, topic))
    return {p: int(value) for p, value in zip(partitions, stored, strict=True)}
