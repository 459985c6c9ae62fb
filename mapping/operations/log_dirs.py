"""What Kafka's DescribeLogDirs reports, read from Redis: the bytes each replica of a partition
holds (its stream's ``MEMORY USAGE``, the estimate retention.bytes trims by), how far a
follower replica is behind the high watermark, and the room Redis has (its memory, where a
Kafka broker reports its disk volume).

Replica 0 is the leader log; replica r a follower's stream (mapping/core/keys.py). A
follower's lag is the high watermark less its acked offset, in offsets, as Kafka's
``getLogEndOffsetLag`` counts it; the leader's is 0 (its log end is at or past the high
watermark).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis, RedisCluster

from mapping.connection.batcher import RedisBatcher
from mapping.connection.startup import memory_info
from mapping.core import codec
from mapping.core.keys import Keys


@dataclass(frozen=True, slots=True)
class ReplicaSize:
    bytes: int  # the stream's memory in Redis (0: no stream yet)
    offset_lag: int  # high watermark less the replica's acked offset (never below 0)


async def replica_sizes(
    batcher: RedisBatcher, keys: Keys, topic: str, partition: int, replicas: list[int]
) -> dict[int, ReplicaSize]:
    """Replica number -> its size and lag, for each of ``replicas`` (one pipeline)."""
    pk = keys.partition(topic, partition)
    followers = [r for r in replicas if r > 0]
    state = batcher.submit(
        "HMGET", pk.state, "hw", *(f"replica.{r}.acked_offset" for r in followers)
    )
    usages = [
        batcher.submit("MEMORY", "USAGE", pk.log if r == 0 else pk.replica(r)) for r in replicas
    ]
    fields, *sizes = await asyncio.gather(state, *usages)
    high_watermark = _int(fields[0])
    acked = dict(zip(followers, (_int(v) for v in fields[1:]), strict=True))
    return {
        r: ReplicaSize(
            bytes=int(size or 0),
            offset_lag=max(high_watermark - acked[r], 0) if r > 0 else 0,
        )
        for r, size in zip(replicas, sizes, strict=True)
    }


def _int(value: Any) -> int:
    return -1 if value is None else int(codec.to_str(value))


async def memory_room(client: Redis | RedisCluster) -> tuple[int, int]:
    """(total, usable) bytes of Redis' memory (a cluster's primaries summed): the limit is
    ``maxmemory``, or the machine's memory where none is set; usable is the limit less
    ``used_memory`` (never below 0)."""
    return room(await memory_info(client))


def room(nodes: list[dict[str, Any]]) -> tuple[int, int]:
    """``memory_room`` from the nodes' ``INFO memory`` fields."""
    total = used = 0
    for node in nodes:
        limit = int(node.get("maxmemory", 0)) or int(node.get("total_system_memory", 0))
        total += limit
        used += int(node.get("used_memory", 0))
    return total, max(total - used, 0)
