"""`adapter.v1.answer.answer` and the batcher's failure handling, without sockets or Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from adapter.v1.answer import answer
from adapter.v1.handlers import Context
from mapping.connection.batcher import RedisBatcher
from mapping.core.errors import BadRequest, BrokerError, Unavailable


async def _ok(context: Context, argv: list[str]) -> str:
    return "args=" + ",".join(argv)


async def _bad(context: Context, argv: list[str]) -> str:
    raise BadRequest("nope")


async def _redis_error(context: Context, argv: list[str]) -> str:
    raise ResponseError("OOM command not allowed")


async def _bug(context: Context, argv: list[str]) -> str:
    raise ZeroDivisionError


TABLE: Any = {"OK": _ok, "BAD": _bad, "REDIS": _redis_error, "BUG": _bug}


def _answer(line: bytes) -> bytes:
    return asyncio.run(answer(None, TABLE, line))  # type: ignore[arg-type]


def test_answer_forms() -> None:
    assert _answer(b"V1|3|ok|a b") == b"V1|3|OK|args=a,b\n"
    assert _answer(b"V1|4|BAD|") == b"V1|4|ERR|BAD_REQUEST|nope\n"
    assert _answer(b"V1|5|NOPE|") == b"V1|5|ERR|UNKNOWN_COMMAND|unknown command NOPE\n"
    assert _answer(b"garbage").startswith(b"V1|0|ERR|BAD_REQUEST|")
    assert _answer(b"").startswith(b"V1|0|ERR|BAD_REQUEST|")


def test_redis_error_is_answered_unavailable() -> None:
    reply = _answer(b"V1|6|REDIS|")
    assert reply.startswith(b"V1|6|ERR|UNAVAILABLE|") and reply.endswith(b"\n")


def test_handler_bug_propagates() -> None:
    """The connection handler closes the connection (over TCP: test_connection_errors.py)."""
    with pytest.raises(ZeroDivisionError):
        _answer(b"V1|7|BUG|")


class _Pipe:
    def __init__(self, fail: BaseException | None) -> None:
        self.fail = fail
        self.commands: list[tuple] = []

    def execute_command(self, *command: Any) -> None:
        self.commands.append(command)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        if self.fail is not None:
            raise self.fail
        return [
            ResponseError("NOT_LEADER partition is a follower") if c[0] == "LEADER" else c[0]
            for c in self.commands
        ]


class _Client:
    def __init__(self) -> None:
        self.failures: list[BaseException | None] = []

    def pipeline(self, transaction: bool = False) -> _Pipe:
        return _Pipe(self.failures.pop(0) if self.failures else None)


def test_batcher_survives_failures() -> None:
    async def main() -> None:
        client = _Client()
        batcher = RedisBatcher(client)  # type: ignore[arg-type]
        runner = asyncio.create_task(batcher.run())
        try:
            client.failures = [RedisConnectionError("down"), RuntimeError("bug")]
            with pytest.raises(Unavailable):
                await batcher.call("PING")
            with pytest.raises(Unavailable):
                await batcher.call("PING")
            # the flusher is still alive, and batches concurrent calls into one pipeline
            sent = batcher.pipelines_sent
            results = await asyncio.gather(*(batcher.call(f"C{i}") for i in range(50)))
            assert results == [f"C{i}" for i in range(50)]
            assert batcher.pipelines_sent == sent + 1
            with pytest.raises(BrokerError) as info:
                await batcher.call("LEADER")
            assert info.value.code == "NOT_LEADER"
        finally:
            runner.cancel()

    asyncio.run(main())
