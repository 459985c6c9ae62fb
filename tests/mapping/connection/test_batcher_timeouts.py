"""The batcher's timeouts against a real Redis (issue 20): a long pipeline that a busy Redis
works through steadily never times out, however long it takes as a whole; a call that was
sent and got no reply has an unknown outcome (``OutcomeUnknown``), while the calls before it
keep their replies; a call that could not be sent at all is ``Unavailable``, not unknown."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from mapping.connection.batcher import WRITE_CHUNK_BYTES, RedisBatcher
from mapping.connection.client import connect
from mapping.connection.embedded import free_port
from mapping.core.errors import OutcomeUnknown, Unavailable

# A script that keeps Redis busy for ARGV[1] microseconds (a healthy Redis, working).
BUSY = """
local wait_us = tonumber(ARGV[1])
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat
  t = redis.call('TIME')
until t[1] * 1000000 + t[2] - start >= wait_us
return redis.call('INCR', KEYS[1])
"""


async def _with_batcher(redis_url: str, timeout_s: float, work: Any) -> Any:
    client = connect(redis_url, timeout_s)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        return await work(batcher)
    finally:
        runner.cancel()
        await client.aclose()


def test_a_long_pipeline_to_a_busy_redis_does_not_time_out(redis_url: str) -> None:
    """Megabytes of calls, each costing Redis a little: the pipeline takes Redis far longer
    than the socket timeout as a whole (one timeout over the whole write failed it), but
    Redis never stops taking bytes or answering for that long."""
    key = f"busy-{uuid.uuid4().hex[:8]}"
    padding = "x" * 2000
    calls = 4000  # ~8 MB, ~0.6 s of Redis time against a 0.15 s timeout

    async def work(batcher: RedisBatcher) -> tuple[list[Any], float]:
        started = time.monotonic()
        futures = [batcher.submit("EVAL", BUSY, 1, key, 150, padding) for _ in range(calls)]
        replies = await asyncio.gather(*futures)
        return replies, time.monotonic() - started

    replies, took = asyncio.run(_with_batcher(redis_url, 0.15, work))
    assert replies == list(range(1, calls + 1))
    assert calls * len(padding) > 8 * WRITE_CHUNK_BYTES  # written in many chunks
    assert took > 0.15  # longer than the timeout as a whole, yet no call timed out


def test_a_call_sent_without_a_reply_has_an_unknown_outcome(redis_url: str) -> None:
    """A script that holds Redis past the timeout: the calls before it keep their replies,
    the script and the call after it (sent in the same pipeline) may have run: unknown."""
    key = f"silent-{uuid.uuid4().hex[:8]}"
    # Redis answers what it read in one go: filler puts the first call in an earlier read
    filler = [("SET", f"{key}-filler", "x" * 2000)] * 100

    async def work(batcher: RedisBatcher) -> list[Any]:
        futures = [
            batcher.submit("INCR", key),
            *(batcher.submit(*call) for call in filler),
            batcher.submit("EVAL", BUSY, 1, key, 600_000),
            batcher.submit("INCR", key),
        ]
        return await asyncio.gather(*futures, return_exceptions=True)

    before, *_, silent, after = asyncio.run(_with_batcher(redis_url, 0.2, work))
    assert before == 1
    assert isinstance(silent, OutcomeUnknown) and isinstance(after, OutcomeUnknown)
    assert silent.code == "UNAVAILABLE"  # V1 keeps its code ("may have been written")
    time.sleep(0.5)  # (the script finishes: Redis ran both calls after all)


def test_a_call_never_sent_is_unavailable_not_unknown() -> None:
    async def work(batcher: RedisBatcher) -> Any:
        with pytest.raises(Unavailable) as info:
            await batcher.call("INCR", "k")
        return info.value

    error = asyncio.run(_with_batcher(f"redis://127.0.0.1:{free_port()}/0", 1.0, work))
    assert not isinstance(error, OutcomeUnknown), error


def test_every_stalled_pipeline_times_out_and_a_healthy_one_after_it_does_not(
    redis_url: str,
) -> None:
    """The pipeline's replies are watched by one timer (batcher._Stall) while the
    connection's own timeout is set aside: it comes back after each pipeline, so a second
    stall times out as the first did, and the calls after it go through."""
    key = f"stalls-{uuid.uuid4().hex[:8]}"

    async def work(batcher: RedisBatcher) -> list[Any]:
        outcomes = []
        for _ in range(2):
            stalled = batcher.submit("EVAL", BUSY, 1, key, 400_000)
            outcomes.append(await asyncio.gather(stalled, return_exceptions=True))
            await asyncio.sleep(0.4)  # (the script finishes)
            outcomes.append(await batcher.call("INCR", key))
        return outcomes

    started = time.monotonic()
    first, after_first, second, after_second = asyncio.run(_with_batcher(redis_url, 0.15, work))
    assert isinstance(first[0], OutcomeUnknown) and isinstance(second[0], OutcomeUnknown)
    assert (after_first, after_second) == (2, 4)  # each script ran, unseen, then the INCR
    assert time.monotonic() - started < 5


def test_cancelling_the_flusher_mid_pipeline_stops_it(redis_url: str) -> None:
    """A cancellation that is not the stall's (the pod stops) is not taken for a timeout:
    the flusher ends, cancelled, while it waits on a reply."""
    key = f"cancel-{uuid.uuid4().hex[:8]}"

    async def main() -> bool:
        client = connect(redis_url, 5.0)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            pending = batcher.submit("EVAL", BUSY, 1, key, 300_000)
            await asyncio.sleep(0.1)  # the script is running, its reply awaited
            runner.cancel()
            with pytest.raises(asyncio.CancelledError):
                await runner
            return pending.done()
        finally:
            await client.aclose()

    assert asyncio.run(main()) is False  # (its call stays unanswered: the pod is stopping)
