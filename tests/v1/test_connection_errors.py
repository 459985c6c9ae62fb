"""The connection protocol in-process over real TCP: a handler bug or a Redis error closes
or answers only the connection concerned, never the listener."""

from __future__ import annotations

import asyncio
from functools import partial
from types import SimpleNamespace
from typing import Any

from redis.exceptions import ResponseError

from adapter.authorizer import Authorizer
from adapter.settings import Settings
from adapter.v1.connection import Connection
from adapter.v1.handlers import Context


async def _ping(context: Context, argv: list[str]) -> str:
    return "pong"


async def _bug(context: Context, argv: list[str]) -> str:
    raise RuntimeError("handler bug")


async def _redis(context: Context, argv: list[str]) -> str:
    raise ResponseError("ERR script went wrong")


TABLE: Any = {"PING": _ping, "BUG": _bug, "REDIS": _redis}


def _context(**settings: Any) -> Any:
    """A V1 context with only the settings a connection reads."""
    return SimpleNamespace(
        pod=SimpleNamespace(settings=Settings(**settings)), authorizer=Authorizer(), starters=None
    )


def test_handler_bug_closes_only_that_connection() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            partial(Connection, _context(max_line_bytes=1024), TABLE), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)

            writer.write(b"V1|1|PING|\nV1|2|REDIS|\n")
            assert await reader.readline() == b"V1|1|OK|pong\n"
            assert (await reader.readline()).startswith(b"V1|2|ERR|UNAVAILABLE|")
            writer.write(b"V1|3|BUG|\n")
            assert await reader.read() == b""  # closed

            good_writer.write(b"V1|4|PING|\n")
            assert await good_reader.readline() == b"V1|4|OK|pong\n"
            for w in (writer, good_writer):
                w.close()

    asyncio.run(main())


def test_a_slow_reply_is_not_idleness() -> None:
    """The idle timeout counts silence with nothing outstanding: a request whose answer
    takes longer than the timeout (acks=all waiting for followers) keeps its connection,
    and the connection is closed once it has been idle that long after the reply."""

    async def slow(context: Context, argv: list[str]) -> str:
        await asyncio.sleep(0.6)  # a reply slower than the idle timeout under test
        return "done"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            partial(Connection, _context(idle_timeout_s=0.2), {"SLOW": slow}), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"V1|1|SLOW|\n")
            assert await reader.readline() == b"V1|1|OK|done\n"
            started = loop.time()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed when idle
            assert loop.time() - started >= 0.15
            writer.close()

    asyncio.run(main())
