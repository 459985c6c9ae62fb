"""The cluster batcher on a real 3-node Redis Cluster: a batch touching more slots than the
client has connections per node is answered in full, each slot's calls in order."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from mapping.cluster import plain_url
from mapping.cluster_batcher import ClusterBatcher

pytestmark = pytest.mark.slow  # the cluster fixture starts three Redis nodes

POOL = 4  # connections per node
SLOTS = 200  # ~67 slots per node in one batch


async def _one_batch(url: str, prefix: str) -> list[object]:
    client = RedisCluster.from_url(
        plain_url(url), max_connections=POOL, retry=Retry(NoBackoff(), 0), socket_timeout=10
    )
    await client.initialize()
    batcher = ClusterBatcher(client)
    flusher = asyncio.create_task(batcher.run())
    try:
        # Queued in one turn: one batch. Per slot, a SET then a GET of the same key.
        futures = []
        for i in range(SLOTS):
            key = f"{prefix}:{{{i}}}"
            futures += [batcher.submit("SET", key, i), batcher.submit("GET", key)]
        replies = await asyncio.gather(*futures, return_exceptions=True)
        assert batcher.pipelines_sent == 1
        return replies
    finally:
        flusher.cancel()
        await client.aclose()


def test_a_batch_of_more_slots_than_connections_is_answered(cluster_url: str) -> None:
    replies = asyncio.run(_one_batch(cluster_url, f"cb-{uuid.uuid4().hex[:8]}"))
    errors = [r for r in replies if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {len(replies)} failed, e.g. {errors[0]!r}"
    assert replies[1::2] == [str(i).encode() for i in range(SLOTS)]  # each GET after its SET
