"""The batcher of a pod on Redis Cluster: ``RedisBatcher`` with another way to send a batch.

redis-py cannot queue EVALSHA in a cluster pipeline, so each call goes out with
``execute_command``, routed to the node owning its slot (every script's keys share one hash
tag). Calls for different slots run concurrently; calls for one slot run one after another
in the order they were made, so a partition's appends keep their order. Batching, combined
PRODUCE calls, NOSCRIPT reloads (SCRIPT LOAD reaches every primary) and error mapping are
``RedisBatcher``'s.
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
    def __init__(self, client: RedisCluster) -> None:
        super().__init__(client)  # type: ignore[arg-type]

    async def _send(self, commands: list[tuple]) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        by_slot: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            by_slot.setdefault(slot_of(command), []).append(index)

        async def send_in_order(indexes: list[int]) -> None:
            for index in indexes:
                replies[index] = await self._call(commands[index])

        await asyncio.gather(*(send_in_order(indexes) for indexes in by_slot.values()))
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
