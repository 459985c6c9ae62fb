"""A TCP proxy between one pod and Redis that stalls the pod's Redis traffic right after a
chosen command, as if the pod were paused at that very point: the command reaches Redis
(and its answer the pod), and everything the pod sends after it, on any connection, waits in
the proxy until ``release``, then goes on in order (as bytes a stopped process had already
written to its sockets do). Tests pair it with SIGSTOP/SIGCONT of the pod, so the pause
lands exactly between two of its Redis calls instead of wherever the signal happens to."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from urllib.parse import urlsplit

from mapping.connection.embedded import free_port
from tests.support.tls_proxy import pipe


def _command_end(buffer: bytes) -> int | None:
    """Where the first command of ``buffer`` (RESP: an array of bulk strings, or an inline
    line) ends; None while it is incomplete."""
    if not buffer:
        return None
    if buffer[:1] != b"*":
        line = buffer.find(b"\n")
        return None if line < 0 else line + 1
    line = buffer.find(b"\r\n")
    if line < 0:
        return None
    count, position = int(buffer[1:line]), line + 2
    for _ in range(count):
        line = buffer.find(b"\r\n", position)
        if line < 0:
            return None
        position = line + 2 + int(buffer[position + 1 : line]) + 2
        if position > len(buffer):
            return None
    return position


class RedisHold:
    """``with RedisHold(redis_url) as hold``: give the pod ``hold.url``; ``hold_after(...)``
    arms it, ``wait_held()`` returns once a command holding every needle went through (the
    rest is held from then on), ``release()`` lets the rest go."""

    def __init__(self, redis_url: str) -> None:
        parts = urlsplit(redis_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}{parts.path}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._needles: tuple[bytes, ...] = ()
        self._held: asyncio.Event | None = None  # set while holding: set() releases
        self._triggered = threading.Event()
        self._server: asyncio.Server | None = None

    def __enter__(self) -> RedisHold:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def hold_after(self, *needles: bytes) -> None:
        def arm() -> None:
            self._needles = needles

        self._triggered.clear()
        self._loop.call_soon_threadsafe(arm)

    def wait_held(self, timeout: float = 10.0) -> None:
        assert self._triggered.wait(timeout), "the awaited command never went through"

    def release(self) -> None:
        def release() -> None:
            held, self._held = self._held, None
            if held is not None:
                held.set()

        self._loop.call_soon_threadsafe(release)

    async def _start(self) -> None:
        self._loop.set_exception_handler(lambda loop, context: None)  # closed sockets
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        answers = asyncio.create_task(pipe(up_reader, writer))
        buffer = b""
        try:
            while data := await reader.read(1 << 16):
                buffer += data
                while (end := _command_end(buffer)) is not None:
                    if self._held is not None:
                        await self._held.wait()
                    command, buffer = buffer[:end], buffer[end:]
                    up_writer.write(command)
                    if self._needles and all(n in command for n in self._needles):
                        self._needles = ()
                        self._held = asyncio.Event()
                        self._triggered.set()
                await up_writer.drain()
            if self._held is not None:  # the pod hung up while held: its bytes still go
                await self._held.wait()
            up_writer.write(buffer)
            await up_writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            up_writer.close()
            await asyncio.gather(answers, return_exceptions=True)
