"""A connection first made to a replica, used again after that replica's promotion: the new
primary is registered as a new leader epoch before the connection's first command there
(mapping/replication/leader_epochs.py). A Cluster client makes such connections (CLUSTER
SLOTS on any known node while a failed primary's replica is not yet promoted); kept open,
one served the promoted replica with no new epoch, and a consumer read past a lossy
failover in silence."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.cluster import on_every_connection
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from mapping.replication.leader_epochs import LeaderEpochs, parse_registry


def _registry(port: int, key: str) -> list[bytes]:
    with redis.Redis(port=port) as client:
        return client.lrange(key, 0, -1)


def _promote(port: int) -> str:
    """``REPLICAOF NO ONE``; the promoted node's new replication id."""
    with redis.Redis(port=port, decode_responses=True) as client:
        client.replicaof("NO", "ONE")
        info = client.info("replication")
        assert info["role"] == "master"
        return info["master_replid"]


@pytest.mark.parametrize("through", ["pool", "batcher"])
def test_a_connection_made_on_a_replica_registers_its_promotion(
    replica: RedisProcess, through: str
) -> None:
    key = Keys(f"epochs-{uuid.uuid4().hex[:8]}").kafka_leader_epochs

    async def scenario() -> tuple[list[int], list[int]]:
        client = connect(replica.url, 10.0)
        epochs = LeaderEpochs(key)
        on_every_connection(client, epochs.on_connect)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        call = batcher.call if through == "batcher" else client.execute_command
        try:
            assert await call("PING")  # on the replica: nothing to register
            before = [e.epoch for e in epochs.history]
            promoted = await asyncio.to_thread(_promote, replica.port)
            assert await call("PING")  # the same client, after the promotion
            registered = _registry(replica.port, key)
            assert [entry.decode().split()[2] for entry in registered] == [promoted]
            return before, [e.epoch for e in epochs.history]
        finally:
            runner.cancel()
            await client.aclose()

    before, after = asyncio.run(scenario())
    assert before == []
    assert after == [e.epoch for e in parse_registry(_registry(replica.port, key))]
    assert len(after) == 1


def test_a_primary_connection_registers_at_once(own_redis: RedisProcess) -> None:
    key = Keys(f"epochs-{uuid.uuid4().hex[:8]}").kafka_leader_epochs

    async def scenario() -> int:
        client = connect(own_redis.url, 10.0)
        epochs = LeaderEpochs(key)
        on_every_connection(client, epochs.on_connect)
        try:
            for _ in range(3):  # one connection, one registration
                await client.ping()
            return len(epochs.history)
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == 1
    assert len(_registry(own_redis.port, key)) == 1
