"""The batcher of a pod on Redis Cluster: ``RedisBatcher`` with another way to send a batch.

redis-py cannot queue EVALSHA in a cluster pipeline, so each call goes out with
``execute_command``, routed to the node owning its slot (every script's keys share one hash
tag). Calls for different slots run concurrently, at most ``max_concurrency`` at a time
(half the client's connections per node, so a batch of many slots never asks a node's pool
for more connections than it has: redis-py raises instead of waiting); calls for one slot
run one after another in the order they were made, so a partition's appends keep their
order. Batching, combined PRODUCE calls, NOSCRIPT reloads (SCRIPT LOAD reaches every
primary) and error mapping are ``RedisBatcher``'s.
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, RedisClusterException, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.batcher import RedisBatcher
from mapping.errors import Unavailable

_SCRIPT_COMMANDS = {"EVALSHA", "EVAL", b"EVALSHA", b"EVAL"}


def slot_of(command: tuple) -> int:
    """The hash slot a command touches: its first key (EVALSHA sha numkeys key ...)."""
    key = command[3] if command[0] in _SCRIPT_COMMANDS and len(command) > 3 else command[1:2]
    if isinstance(key, tuple):  # keyless commands: any slot, one queue
        key = key[0] if key else b""
    return key_slot(key if isinstance(key, bytes) else str(key).encode())


class ClusterBatcher(RedisBatcher):
    def __init__(self, client: RedisCluster, max_concurrency: int | None = None) -> None:
        super().__init__(client)  # type: ignore[arg-type]
        if max_concurrency is None:
            # The rest of the pool: the pod's other calls on this client (leases, WAIT).
            pool = client.nodes_manager.connection_kwargs.get("max_connections") or 2
            max_concurrency = max(1, int(pool) // 2)
        self.max_concurrency = max_concurrency

    async def _send(self, commands: list[tuple]) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        by_slot: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            by_slot.setdefault(slot_of(command), []).append(index)
        slots = iter(by_slot.values())

        async def send_slots_in_order() -> None:
            # Each sender takes the next slot's calls until none are left (one shared
            # iterator: taking one is not interrupted, asyncio switches only at awaits).
            for indexes in slots:
                for index in indexes:
                    replies[index] = await self._call(commands[index])

        senders = min(self.max_concurrency, len(by_slot))
        await asyncio.gather(*(send_slots_in_order() for _ in range(senders)))
        return replies

    async def _call(self, command: tuple) -> Any:
        """One reply, or the error as a value (as a non-raising pipeline gives it)."""
        try:
            return await self._client.execute_command(*command)
        except ResponseError as exc:  # NoScriptError included: the batcher reloads
            return exc
        except (RedisConnectionError, RedisTimeoutError, ClusterDownError, OSError) as exc:
            return Unavailable(f"redis unavailable: {exc}")
        except RedisClusterException as exc:
            return Unavailable(f"redis cluster error: {exc}")
