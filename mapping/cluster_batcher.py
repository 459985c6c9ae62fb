"""The batcher of a pod on Redis Cluster: same interface as ``RedisBatcher``.

redis-py cannot queue EVALSHA in a cluster pipeline, so calls go out with ``execute_command``,
each routed to the node owning its slot (every script's keys share one hash tag). Calls made
during one event-loop turn are sent together, concurrently, on up to ``max_in_flight``
connections; a NOSCRIPT reply (a node restarted, a failover to a replica without the script
cache) loads the script on every primary and sends the call again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    NoScriptError,
    RedisClusterException,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping import scripts
from mapping.errors import Unavailable, from_script_error

log = logging.getLogger(__name__)

_Call = tuple[tuple, "asyncio.Future[Any]"]
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ClusterDownError, OSError)


class ClusterBatcher:
    def __init__(self, client: RedisCluster, max_in_flight: int = 128) -> None:
        self._client = client
        self._queue: list[_Call] = []
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(max_in_flight)
        self.pipelines_sent = 0  # batches sent (one per event-loop turn with calls)
        self.calls_sent = 0
        self.on_flush: Callable[[int], None] | None = None  # metrics: called with batch size

    async def call(self, *command: Any) -> Any:
        """Queue one Redis command and wait for its reply (errors as in ``RedisBatcher``)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, future))
        self._wakeup.set()
        return await future

    async def run(self) -> None:
        """The flusher: runs until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await asyncio.sleep(0)  # let every task runnable in this turn add its calls
            batch, self._queue = self._queue, []
            if batch:
                self.pipelines_sent += 1
                self.calls_sent += len(batch)
                if self.on_flush is not None:
                    self.on_flush(len(batch))
                for command, future in batch:
                    # Not awaited: the next turn's calls need not wait for this batch.
                    asyncio.ensure_future(self._send(command, future))

    async def _send(self, command: tuple, future: asyncio.Future[Any]) -> None:
        try:
            async with self._slots:
                reply = await self._execute(command)
        except BusyLoadingError as exc:
            _settle(future, exc=Unavailable(f"redis unavailable: {exc}"))
        except _UNREACHABLE as exc:
            _settle(future, exc=Unavailable(f"redis unavailable: {exc}"))
        except ResponseError as exc:
            _settle(future, exc=from_script_error(str(exc)) or exc)
        except RedisClusterException as exc:
            _settle(future, exc=Unavailable(f"redis cluster error: {exc}"))
        except Exception as exc:
            log.exception("redis cluster call failed")
            _settle(future, exc=Unavailable(f"redis error: {exc}"))
        else:
            _settle(future, result=reply)

    async def _execute(self, command: tuple) -> Any:
        try:
            return await self._client.execute_command(*command)
        except NoScriptError:
            script = scripts.by_sha(_text(command[1]))
            if script is None:
                raise
            # SCRIPT LOAD goes to every primary: the script is there wherever the slot moves.
            await self._client.script_load(script.source)
            return await self._client.execute_command(*command)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _settle(future: asyncio.Future[Any], *, result: Any = None, exc: Exception | None = None):  # noqa: ANN202
    if future.done():  # the caller went away
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
