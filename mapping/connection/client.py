"""The pod's Redis client and its batcher: how every async user of Redis gets them."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mapping.connection.batcher import RedisBatcher
from mapping.connection.cluster import connect_async


def connect(url: str, timeout_s: float = 5.0, **options: object) -> Redis:
    """A client for the adapter: bytes replies, bounded waits, and no automatic retries
    (a retried pipeline could append a produce twice). A ``redis+cluster://`` URL gives a
    cluster client (see mapping.connection.cluster). ``options``: credentials and TLS files beyond
    what the URL carries (``rediss://USER:PASSWORD@HOST:PORT/DB``)."""
    client = connect_async(url, timeout_s, **options)
    # CONSUME pages stay hiredis' lists: redis-py's dict per entry costs more than the rest
    # of a CONSUME (``mapping.core.records.entry_values`` reads both shapes).
    client.set_response_callback("XRANGE", _raw)
    client.set_response_callback("XREVRANGE", _raw)
    return client  # type: ignore[return-value]


def _raw(response: Any, **options: Any) -> Any:
    return response


def make_batcher(client: Redis) -> RedisBatcher:
    """The batcher for this client: one pipeline per turn, or concurrent calls on a cluster."""
    if isinstance(client, RedisCluster):
        from mapping.connection.cluster_batcher import ClusterBatcher

        return ClusterBatcher(client)  # type: ignore[return-value]
    return RedisBatcher(client)
