"""How Produce answers failed appends (adapter/kafka/produce.py, adapter/kafka/errors.py):
every failed batch of a request is looked at (none is left for asyncio to log as "Future
exception was never retrieved"), and an append whose outcome is unknown is never answered
with a code that tells the client it was not written."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any

from adapter.kafka import errors, produce
from mapping.connection.batcher import Pending
from mapping.core.errors import BrokerError, OutcomeUnknown, Unavailable


def _failed(exc: BrokerError) -> Pending[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return Pending(future, lambda reply: reply)


async def _finish(failures: list[BrokerError]) -> tuple[int, int, int, int]:
    body = SimpleNamespace(acks=1, timeout_ms=1000)
    pending = [_failed(exc) for exc in failures]
    return await produce._finish(None, body, None, 0, pending)  # type: ignore[arg-type]


def test_every_failed_batch_of_a_request_is_retrieved() -> None:
    unretrieved: list[dict[str, Any]] = []

    async def main() -> tuple[int, int, int, int]:
        asyncio.get_running_loop().set_exception_handler(
            lambda _loop, context: unretrieved.append(context)
        )
        answer = await _finish([Unavailable(f"redis unavailable: batch {i}") for i in range(4)])
        gc.collect()  # the request's futures are gone: asyncio reports unread exceptions now
        return answer

    assert asyncio.run(main()) == (errors.KAFKA_STORAGE_ERROR, -1, -1, -1)
    assert [c["message"] for c in unretrieved] == []


def test_an_append_of_unknown_outcome_is_not_answered_as_not_written() -> None:
    async def main() -> list[tuple[int, int, int, int]]:
        unknown = [OutcomeUnknown("redis outcome unknown: Timeout reading")]
        not_sent = [Unavailable("redis unavailable: Connection refused")]
        return [await _finish(unknown), await _finish(not_sent)]

    unknown, not_sent = asyncio.run(main())
    # REQUEST_TIMED_OUT: librdkafka "possibly persisted", Java a TimeoutException
    assert unknown == (errors.REQUEST_TIMED_OUT, -1, -1, -1)
    # never sent: KAFKA_STORAGE_ERROR (retriable, "not persisted") is the truth
    assert not_sent == (errors.KAFKA_STORAGE_ERROR, -1, -1, -1)
    assert errors.error_of(OutcomeUnknown("x")) == errors.KAFKA_STORAGE_ERROR  # reads
    assert errors.error_of(OutcomeUnknown("x"), append=True) == errors.REQUEST_TIMED_OUT


def test_a_partition_partly_written_is_not_answered_as_not_written() -> None:
    """Two batches for one partition, the first appended, the second refused: a "not
    written" code would have the client send the first one again."""

    async def main() -> tuple[int, int, int, int]:
        written: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        written.set_result("appended")
        body = SimpleNamespace(acks=1, timeout_ms=1000)
        pending = [Pending(written, lambda reply: reply), _failed(BrokerError("NOT_LEADER", "x"))]
        return await produce._finish(None, body, None, 0, pending)  # type: ignore[arg-type]

    assert asyncio.run(main()) == (errors.REQUEST_TIMED_OUT, -1, -1, -1)


def test_an_unclassified_redis_error_is_answered_as_maybe_written() -> None:
    """An error reply the batcher passes on as it is (WRONGTYPE from inside the append
    script, which may have written records before it failed) gets a partition code, not a
    failed handler and a closed connection."""
    from redis.exceptions import ResponseError

    async def main() -> tuple[int, int, int, int]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.set_exception(ResponseError("WRONGTYPE Operation against a key"))
        body = SimpleNamespace(acks=1, timeout_ms=1000)
        pending = [Pending(future, lambda reply: reply)]
        return await produce._finish(None, body, None, 0, pending)  # type: ignore[arg-type]

    assert asyncio.run(main()) == (errors.REQUEST_TIMED_OUT, -1, -1, -1)
