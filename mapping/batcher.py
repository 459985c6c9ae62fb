"""Auto-pipelining: every Redis call made during one event-loop turn, from any connection,
goes to Redis as one pipeline.

Calls are queued; one flusher task sends the queue as a single non-transactional pipeline,
then the next queue, one pipeline in flight at a time. Calls made while a pipeline is in
flight wait for the next one, so under load batches grow by themselves, and the order in
which calls were made is the order in which Redis runs them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import BusyLoadingError, NoScriptError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping import scripts
from mapping.errors import Unavailable, from_script_error

log = logging.getLogger(__name__)

_Call = tuple[tuple, "asyncio.Future[Any]"]


class RedisBatcher:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._queue: list[_Call] = []
        self._wakeup = asyncio.Event()
        self.pipelines_sent = 0
        self.calls_sent = 0
        self.on_flush: Callable[[int], None] | None = None  # metrics: called with batch size

    async def call(self, *command: Any) -> Any:
        """Queue one Redis command and wait for its reply.

        Raises ``Unavailable`` when Redis cannot be reached or times out, ``BrokerError`` for
        a script's ``"<CODE> <message>"`` error reply, and ``ResponseError`` otherwise.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, future))
        self._wakeup.set()
        return await future

    async def run(self) -> None:
        """The flusher: runs until cancelled."""
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Let every task already runnable in this turn add its calls first.
            await asyncio.sleep(0)
            batch, self._queue = self._queue, []
            if batch:
                await self._flush(batch)

    async def _flush(self, batch: list[_Call]) -> None:
        try:
            replies = await self._execute([command for command, _ in batch])
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if missing:
                # Redis restarted without its script cache (or SCRIPT FLUSH): load and resend.
                await self._load_scripts({batch[i][0][1] for i in missing})
                retried = await self._execute([batch[i][0] for i in missing])
                for i, reply in zip(missing, retried, strict=True):
                    replies[i] = reply
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            self._fail(batch, f"redis unavailable: {exc}")
            return
        except Exception as exc:
            # Anything else (a protocol error, a failed SCRIPT LOAD, a bug) must not end the
            # flusher: every later call of the pod would wait forever.
            log.exception("redis pipeline failed")
            self._fail(batch, f"redis error: {exc}")
            return
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # the caller went away
                continue
            if isinstance(reply, BusyLoadingError):
                future.set_exception(Unavailable(f"redis unavailable: {reply}"))
            elif isinstance(reply, ResponseError):
                future.set_exception(from_script_error(str(reply)) or reply)
            elif isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    @staticmethod
    def _fail(batch: list[_Call], message: str) -> None:
        for _, future in batch:
            if not future.done():  # one exception each: raising shares its traceback
                future.set_exception(Unavailable(message))

    async def _execute(self, commands: list[tuple]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        self.pipelines_sent += 1
        self.calls_sent += len(commands)
        if self.on_flush is not None:
            self.on_flush(len(commands))
        return await pipe.execute(raise_on_error=False)

    async def _load_scripts(self, shas: set[str]) -> None:
        for sha in shas:
            script = scripts.by_sha(sha.decode() if isinstance(sha, bytes) else sha)
            if script is not None:
                await self._client.script_load(script.source)
