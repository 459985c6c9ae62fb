"""``--redis-wait-replicas`` for readers of committed offsets: none is served before the Redis
replicas have it, so no failover can make a committed offset go backwards.

Records have a durable mark (``durable_hw``, mapping/replication/durable.py); committed offsets
have none.
Instead a reader confirms, after reading them, that the Redis replicas have everything
written before its read: a probe ``INCR`` then ``WAIT`` on one connection of the node read
(Redis replicates in order, so replicas that acknowledged the probe have the offsets read).
Pods do it through their shared WAIT rounds (``Acks.await_durable``: OffsetFetch, V1
OFFSET). Readers outside the pods (``group describe``, ``inspect``, the metrics scrape, the
Spark source's ``group:`` start) do it here, with the replica count and timeout that each
pod stores in the deployment's meta hash at start (``store_wait_replicas``): a deployment
whose pods run without the flag stores 0, and its readers wait for nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster

from mapping.connection.cluster import AsyncClient, SyncClient
from mapping.core.errors import REPLICATION_TIMEOUT, BrokerError
from mapping.core.keys import Keys

WAIT_REPLICAS_FIELD = "redis_wait_replicas"
WAIT_TIMEOUT_FIELD = "redis_wait_timeout_ms"
DEFAULT_TIMEOUT_MS = 2000


async def store_wait_replicas(
    client: AsyncClient, keys: Keys, replicas: int, timeout_ms: int
) -> None:
    """A pod's ``--redis-wait-replicas`` and acks timeout, for the readers outside pods."""
    await client.hset(
        keys.meta, mapping={WAIT_REPLICAS_FIELD: replicas, WAIT_TIMEOUT_FIELD: timeout_ms}
    )


def probe_beside(probe: str, key: str) -> str:
    """A probe key in ``key``'s slot: the same hash tag (Redis Cluster's rule: the text
    between the first ``{`` and the next ``}`` when not empty, else the whole key)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    tag = key[start + 1 : end] if start >= 0 and end > start + 1 else key
    return f"{probe}{{{tag}}}"


async def probe_and_wait(
    client: AsyncClient, node: ClusterNode | None, probe: str, replicas: int, timeout_ms: int
) -> int:
    """INCR ``probe``, then WAIT, on one connection (of ``node`` on a cluster, where
    ``probe`` must hash to it; None: the single Redis): the replicas that have every write
    made before the INCR."""
    if node is None:
        assert isinstance(client, Redis)
        pipe = client.pipeline(transaction=False)
        pipe.incr(probe)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        _, count = await pipe.execute()
        return int(count)
    commands = [
        PipelineCommand(0, "INCR", probe),
        PipelineCommand(1, "WAIT", replicas, timeout_ms),
    ]
    await node.execute_pipeline(commands)
    for command in commands:
        if isinstance(command.result, Exception):
            raise command.result
    return int(commands[1].result)


def _wanted(raw: list) -> tuple[int, int]:
    replicas = int(raw[0]) if raw[0] is not None else 0
    timeout_ms = int(raw[1]) if raw[1] is not None else DEFAULT_TIMEOUT_MS
    return replicas, timeout_ms


def _check(count: int, replicas: int, timeout_ms: int) -> None:
    if count < replicas:
        raise BrokerError(
            REPLICATION_TIMEOUT,
            f"{max(count, 0)} of {replicas} redis replicas acknowledged within {timeout_ms} ms: "
            "committed offsets are not served before the Redis replicas have them",
        )


def confirm_read_sync(client: SyncClient, keys: Keys, read: Iterable[str]) -> None:
    """Call after reading committed offsets from the keys ``read``: returns once the Redis
    replicas have them (at once when the deployment does not wait for replicas); else
    BrokerError(REPLICATION_TIMEOUT)."""
    replicas, timeout_ms = _wanted(client.hmget(keys.meta, WAIT_REPLICAS_FIELD, WAIT_TIMEOUT_FIELD))
    if replicas <= 0:
        return
    if isinstance(client, SyncRedisCluster):
        nodes: dict[str, tuple[object, str]] = {}
        for key in read:
            node = client.get_node_from_key(key)
            nodes.setdefault(node.name, (node, key))
        targets = [
            (client.get_redis_connection(node), probe_beside(keys.wait_probe, key))  # type: ignore[arg-type]
            for node, key in nodes.values()
        ]
    else:
        targets = [(client, keys.wait_probe)]
    for connection, probe in targets:
        pipe = connection.pipeline(transaction=False)  # one connection: WAIT counts its INCR
        pipe.incr(probe)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        _, count = pipe.execute()
        _check(int(count), replicas, timeout_ms)


async def confirm_read(client: AsyncClient, keys: Keys, read: Iterable[str]) -> None:
    """``confirm_read_sync`` for an asyncio client (the command lines' local pod)."""
    replicas, timeout_ms = _wanted(
        await client.hmget(keys.meta, WAIT_REPLICAS_FIELD, WAIT_TIMEOUT_FIELD)
    )
    if replicas <= 0:
        return
    targets: list[tuple[ClusterNode | None, str]] = [(None, keys.wait_probe)]
    if isinstance(client, RedisCluster):
        nodes: dict[str, tuple[ClusterNode | None, str]] = {}
        for key in read:
            node = client.get_node_from_key(key)
            nodes.setdefault(node.name, (node, probe_beside(keys.wait_probe, key)))
        targets = list(nodes.values())
    for node, probe in targets:
        count = await probe_and_wait(client, node, probe, replicas, timeout_ms)
        _check(count, replicas, timeout_ms)
