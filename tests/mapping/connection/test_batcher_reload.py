"""The batcher after SCRIPT FLUSH, straight against Redis: one pipeline whose first script
call answers NOSCRIPT is completed in the order its calls were made."""

from __future__ import annotations

import asyncio
import uuid

import redis

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.core.keys import Keys
from mapping.partition.partition_scripts import (
    PARTITION_PRODUCE,
    PartitionHead,
    partition_produce_call,
    partition_set_role_call,
)


async def _one_batch(redis_url: str, keys: Keys) -> list[object]:
    client = connect(redis_url, 5.0)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    first = PartitionHead(keys.partition("t", 0), 10, 1, 10_000)
    second = PartitionHead(keys.partition("t", 1), 10, 1, 10_000)
    try:
        # Queued in one turn: one pipeline.
        futures = [
            batcher.submit(*partition_set_role_call(first, "follower")),  # NOSCRIPT: flushed
            batcher.submit("HGET", first.keys.state, "role"),  # a read made after it
            batcher.submit(
                *partition_produce_call(second, ["k", "v"])
            ),  # runs: its script is in the cache
        ]
        replies = await asyncio.gather(*futures)
        assert batcher.pipelines_sent == 2  # the batch, then what was sent again
        return replies
    finally:
        runner.cancel()
        await client.aclose()


def test_a_read_after_a_flushed_script_sees_its_write(redis_url: str) -> None:
    keys = Keys(f"reload-{uuid.uuid4().hex[:8]}")
    admin = redis.Redis.from_url(redis_url)
    try:
        admin.script_flush()
        admin.script_load(PARTITION_PRODUCE.source)  # as another pod would have
        replies = asyncio.run(_one_batch(redis_url, keys))
        appended = admin.xlen(keys.partition("t", 1).log)
    finally:
        admin.close()
    assert replies[1] == b"follower"  # read again after the script that wrote it
    assert appended == 1  # the script call that ran is not sent twice
