"""Background work that outlives Redis trouble: a pod's long-running tasks (the broker
registration, the replicator, retention) never end because Redis failed over, was down or
answered an error. A failure is logged, the work waits a little and goes on; only
cancellation (the pod stops) ends it.

``every`` runs one step at an interval; ``supervised`` runs a loop and starts it again
should it ever raise (a bug must not take the pod down with it either: every connection of
the pod would go with it); ``together`` runs such tasks side by side until cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import anyio
from redis.exceptions import RedisClusterException, RedisError

from mapping.core.errors import BrokerError

log = logging.getLogger(__name__)

# What Redis trouble looks like to a task: the batcher's errors (BrokerError: UNAVAILABLE,
# outcome unknown), redis-py's own from calls made on the client directly (RedisError;
# RedisClusterException is not one: a slot no node covers, no node reachable) and sockets.
REDIS_TROUBLE: tuple[type[BaseException], ...] = (
    BrokerError,
    RedisError,
    RedisClusterException,
    OSError,
)

# Retries after a failure: from FIRST_RETRY_S, doubling, at most the step's interval.
FIRST_RETRY_S = 0.1


def log_failure(what: str, exc: BaseException) -> None:
    """Redis trouble is a warning (it passes); anything else is a bug: its traceback."""
    if isinstance(exc, REDIS_TROUBLE):
        log.warning("%s failed: %s", what, exc)
    else:
        log.error("%s failed", what, exc_info=exc)


async def every(
    what: str,
    step: Callable[[], Awaitable[Any]],
    interval_s: float,
    *,
    wait: Callable[[float], Awaitable[Any]] | None = None,
    on_failure: Callable[[BaseException], None] | None = None,
) -> NoReturn:
    """Run ``step`` every ``interval_s`` until cancelled. After a failure it runs again
    sooner (0.1 s, doubling up to the interval): a lease or a registration is renewed
    before it lapses once Redis is back. ``wait(seconds)`` replaces the sleep between steps
    (it may return early); ``on_failure`` is told of each failure."""
    retry_s = FIRST_RETRY_S
    while True:
        try:
            await step()
        except Exception as exc:
            log_failure(what, exc)
            if on_failure is not None:
                on_failure(exc)
            delay = min(retry_s, interval_s)
            retry_s *= 2
        else:
            delay = interval_s
            retry_s = FIRST_RETRY_S
        if wait is None:
            await asyncio.sleep(delay)
        else:
            await wait(delay)


async def supervised(
    what: str, run: Callable[[], Awaitable[Any]], max_retry_s: float = 5.0
) -> NoReturn:
    """Run the loop ``run`` until cancelled, starting it again if it ever ends or raises."""
    retry_s = FIRST_RETRY_S
    while True:
        try:
            await run()
            log.error("%s ended; starting it again", what)
        except Exception as exc:
            log_failure(what, exc)
        await asyncio.sleep(retry_s)
        retry_s = min(retry_s * 2, max_retry_s)


async def together(*work: Callable[[], Awaitable[Any]]) -> None:
    """Run ``work`` side by side until cancelled (or one fails: the others are cancelled).
    Cancellation is delivered again until every one has ended (anyio's task group), not
    once (asyncio.TaskGroup): in CPython 3.11 ``asyncio.wait_for``, which redis-py writes
    through, drops a cancellation that comes as the write completes, and a task that lost
    its cancellation would keep the pod from ever stopping."""
    async with anyio.create_task_group() as tasks:
        for one in work:
            tasks.start_soon(one)
