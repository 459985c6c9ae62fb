"""A pod whose Redis can fail over (Sentinel, or replicas) while it does not wait for a
replica (--redis-wait-replicas 0) says at start, in a WARNING, that a failover can lose
acknowledged writes (mapping/connection/startup.py ``failover_loss``, docs/durability.md)."""

from __future__ import annotations

import asyncio
import json

import pytest

from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess
from mapping.connection.sentinel import sentinel_url
from mapping.connection.startup import failover_loss
from tests.support.cluster import LoopbackCluster
from tests.support.pods import RF1, Pod

WARNED = "--redis-wait-replicas is 0: a failover loses"


def _loss(url: str, wait_replicas: int) -> str | None:
    async def check() -> str | None:
        client = connect(url)
        try:
            return await failover_loss(client, url, wait_replicas)
        finally:
            await client.aclose()

    return asyncio.run(check())


def test_a_pod_on_a_redis_with_a_replica_warns_at_start(
    own_redis: RedisProcess, replica: RedisProcess
) -> None:
    url = f"redis://127.0.0.1:{own_redis.port}/0"
    pod = Pod(url, *RF1).start()
    try:
        lines = [json.loads(line) for line in pod.log().splitlines() if WARNED in line]
        assert lines and {line["level"] for line in lines} == {"WARNING"}, pod.log()
        assert "has replicas (1 per primary)" in lines[0]["message"]
        assert "--redis-wait-replicas 1" in lines[0]["message"]  # what to do about it
    finally:
        pod.stop()
    # waiting for the replica: nothing to warn about
    assert _loss(url, 1) is None


def test_no_warning_without_a_failover_that_can_lose_writes(
    own_redis: RedisProcess, cluster_url: str
) -> None:
    assert _loss(f"redis://127.0.0.1:{own_redis.port}/0", 0) is None  # no replica
    assert _loss(cluster_url, 0) is None  # primaries without replicas


def test_sentinel_warns_whatever_its_replicas() -> None:
    """Sentinel exists to promote a replica: the URL alone tells (nothing is connected)."""
    url = sentinel_url("127.0.0.1:1", "orders-db")

    async def check(wait_replicas: int) -> str | None:
        return await failover_loss(None, url, wait_replicas)  # type: ignore[arg-type]

    warning = asyncio.run(check(0))
    assert warning is not None and "through Sentinel" in warning and WARNED in warning
    assert asyncio.run(check(1)) is None


@pytest.mark.slow
def test_a_cluster_whose_primaries_have_replicas_warns(failover_cluster: LoopbackCluster) -> None:
    warning = _loss(failover_cluster.url, 0)
    assert warning is not None and "has replicas (1, 1, 1 per primary)" in warning
    assert _loss(failover_cluster.url, 1) is None
