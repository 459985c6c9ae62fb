"""RedisBatcher's combined calls and `Pending`, against a recording test double."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.exceptions import ResponseError

from mapping.connection.batcher import Pending, RedisBatcher
from mapping.core.errors import BrokerError


class _Pipe:
    def __init__(self, sent: list[list[tuple]]) -> None:
        self.sent = sent
        self.commands: list[tuple] = []

    def execute_command(self, *command: Any) -> None:
        self.commands.append(command)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.sent.append(self.commands)
        replies: list[Any] = []
        for command in self.commands:
            if command[0] == "APPEND":  # reply: [count, item...]
                replies.append([len(command) - 1, *command[1:]])
            elif command[0] == "FAIL":
                replies.append(ResponseError("NOT_LEADER partition is a follower"))
            else:
                replies.append(command[0])
        return replies


class _Client:
    def __init__(self) -> None:
        self.sent: list[list[tuple]] = []

    def pipeline(self, transaction: bool = False) -> _Pipe:
        return _Pipe(self.sent)


def _build(items: list[Any]) -> tuple:
    return ("APPEND", *items)


def test_appends_share_one_call_until_another_call_is_queued() -> None:
    async def main() -> None:
        client = _Client()
        batcher = RedisBatcher(client)  # type: ignore[arg-type]
        runner = asyncio.create_task(batcher.run())
        try:
            a1 = batcher.append("a", _build, ["x1", "x2"])
            b1 = batcher.append("b", _build, ["y1"])
            a2 = batcher.append("a", _build, ["x3"])
            other = batcher.submit("PING")
            a3 = batcher.append("a", _build, ["x4"])  # may not overtake PING: a new call
            await asyncio.gather(a1[0], b1[0], a2[0], other, a3[0])
            assert client.sent == [
                [("APPEND", "x1", "x2", "x3"), ("APPEND", "y1"), ("PING",), ("APPEND", "x4")]
            ]
            assert a1[0] is a2[0] and a1[1] == 0 and a2[1] == 2 and a3[1] == 0
            assert (await a2[0])[1 + a2[1]] == "x3"
            assert batcher.pipelines_sent == 1 and batcher.calls_sent == 4
            # the next batch opens new groups
            a4 = batcher.append("a", _build, ["x5"])
            assert (await a4[0]) == [1, "x5"] and a4[1] == 0
        finally:
            runner.cancel()

    asyncio.run(main())


def test_pending_result_then_and_errors() -> None:
    async def main() -> None:
        client = _Client()
        batcher = RedisBatcher(client)  # type: ignore[arg-type]
        runner = asyncio.create_task(batcher.run())
        try:
            future, first = batcher.append("a", _build, ["k", "v"])
            pending = Pending(future, lambda reply: reply[1 + first :]).then(len)
            assert await pending == 2
            assert pending.result() == 2
            failing = Pending(batcher.submit("FAIL"), lambda reply: reply)
            with pytest.raises(BrokerError) as info:
                await failing
            assert info.value.code == "NOT_LEADER"
        finally:
            runner.cancel()

    asyncio.run(main())


def test_a_combined_call_has_a_size_bound() -> None:
    async def main() -> None:
        from mapping.connection import batcher as module

        client = _Client()
        batcher = RedisBatcher(client)  # type: ignore[arg-type]
        runner = asyncio.create_task(batcher.run())
        try:
            futures = [
                batcher.append("a", _build, [i]) for i in range(module.MAX_COMBINED_ITEMS + 1)
            ]
            await asyncio.gather(*(f for f, _ in futures))
            sizes = [len(command) - 1 for command in client.sent[0]]
            assert sizes == [module.MAX_COMBINED_ITEMS, 1]
        finally:
            runner.cancel()

    asyncio.run(main())


def test_pack_matches_redis_py_and_falls_back() -> None:
    """The batcher packs with hiredis; the bytes are redis-py's, and what hiredis does not
    take goes through redis-py's packer (which refuses a bool as it always has)."""
    from redis.asyncio.connection import Connection
    from redis.exceptions import DataError

    from mapping.connection.batcher import _pack

    connection = Connection()
    commands = [
        ("EVALSHA", "a" * 40, 2, "rsa:part:{t:0}:log", b"k\xff", 10, -3, 1.5),
        ("SADD", "rsa:groups", "g t"),
    ]
    assert b"".join(_pack(commands, connection)) == b"".join(connection.pack_commands(commands))
    with pytest.raises(DataError):
        _pack([("SET", "k", True)], connection)


class _SwallowingPipe(_Pipe):
    """A pipeline whose reply comes as the flusher is cancelled, and which drops that
    cancellation, as CPython 3.11's asyncio.wait_for (redis-py's write) does when the
    awaited work completes at the same time."""

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass
        return await super().execute(raise_on_error)


def test_a_cancellation_swallowed_during_a_pipeline_still_stops_the_flusher() -> None:
    """The pod's shutdown cancels the flusher; had it gone on waiting for calls, the pod
    never exited on SIGTERM (tests/kafka/test_pods.py saw it)."""

    class Client(_Client):
        def pipeline(self, transaction: bool = False) -> _Pipe:
            return _SwallowingPipe(self.sent)

    async def main() -> tuple[bool, Any]:
        batcher = RedisBatcher(Client())  # type: ignore[arg-type]
        runner = asyncio.create_task(batcher.run())
        call = batcher.submit("GET", "k")
        await asyncio.sleep(0.05)  # the pipeline is in flight
        runner.cancel()
        done, _ = await asyncio.wait([runner], timeout=5)
        return runner in done and runner.cancelled(), await call

    stopped, reply = asyncio.run(main())
    assert stopped
    assert reply == "GET"  # the call that went out still got its reply
