"""Sockets of both front doors: accepting on the pod's listeners, serving each accepted
socket with its door's connection (an ``asyncio.Protocol``: V1's adapter/v1/connection.py,
Kafka's adapter/kafka/connection.py), and the SIGTERM drain. ``serve`` (adapter/server.py)
and the Kafka listener (adapter/kafka/listener.py) use them.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.stapled import MultiListener

from adapter import tls
from adapter.served import ServedConnection

log = logging.getLogger(__name__)

# Serves one accepted socket: ``serve_socket`` with a door's connection bound.
SocketServer = Callable[[socket.socket], Awaitable[None]]
# A listener and what serves each socket accepted on it.
Serving = tuple[MultiListener[SocketStream], SocketServer]


class ListenError(Exception):
    """A listener of the pod could not bind its port; says which listener and option."""

    def __init__(self, listener: str, option: str, host: str, port: int, cause: OSError) -> None:
        if cause.errno == errno.EADDRINUSE:
            why = "the port is in use (another pod, `make run`, or another server)"
        else:
            why = cause.strerror or str(cause)
        super().__init__(
            f"cannot listen for {listener} on {host}:{port} ({option} {port}): {why}; stop "
            f"what holds it or choose another {option}"
        )


async def listen(
    listener: str, option: str, host: str, port: int, *, reuse_port: bool
) -> MultiListener[SocketStream]:
    """A TCP listener for ``listener`` (V1, Kafka) on ``option``'s port, or ListenError."""
    try:
        return await anyio.create_tcp_listener(
            local_host=host, local_port=port, reuse_port=reuse_port
        )
    except OSError as exc:
        raise ListenError(listener, option, host, port, exc) from exc


async def accept_all(
    serving: list[Serving],
    connections: anyio.abc.TaskGroup,
) -> None:
    """Accept on every listener (V1, Kafka) until cancelled."""
    async with anyio.create_task_group() as accepting:
        for listener, serve_one in serving:
            accepting.start_soon(_accept, listener, connections, serve_one)


async def _accept(
    listener: MultiListener[SocketStream],
    connections: anyio.abc.TaskGroup,
    serve_one: SocketServer,
) -> None:
    """Accept until cancelled; connections live in their own task group, so that stopping
    the accept loop does not cancel them (``listener.serve`` would).

    Accepting is "wait until readable, then a plain non-blocking accept()": a cancellation
    (SIGTERM) can only land while waiting, never between the kernel handing over a
    connection and its task starting, where the connection would be dropped with a reset.
    """

    async def accept_on(one: anyio.abc.SocketListener) -> None:
        raw = one.extra(SocketAttribute.raw_socket)
        while True:
            await anyio.wait_readable(raw)
            try:
                sock, _ = raw.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue  # taken by another process on the port, or gone already
            connections.start_soon(serve_one, sock)

    async with anyio.create_task_group() as accepting:
        for one in listener.listeners:
            accepting.start_soon(accept_on, one)


async def serve_socket(
    new_connection: Callable[[], ServedConnection],
    draining: Draining,
    ssl_context: ssl.SSLContext | None,
    sock: socket.socket,
) -> None:
    """Serve one accepted socket until it closes. The task only waits: the connection is
    answered in its protocol's callbacks; cancelling the task (the end of a drain) aborts
    it."""
    loop = asyncio.get_running_loop()
    connection = new_connection()
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        await loop.connect_accepted_socket(
            lambda: connection,
            sock,
            ssl=ssl_context,
            ssl_handshake_timeout=tls.HANDSHAKE_TIMEOUT_S if ssl_context else None,
        )
    except Exception as exc:  # reset before it was served; TLS: a failed handshake (a
        # plain-text client, a bad or missing certificate, a scanner): the client's problem
        if ssl_context is not None:
            log.info("TLS handshake failed: %s", exc)
        sock.close()
        return
    except BaseException:
        sock.close()
        raise
    draining.connections.add(connection)
    if draining.stopping:
        connection.drain()
    try:
        await connection.closed
    finally:
        draining.connections.discard(connection)
        connection.abort()  # no-op when closed; a drain past its deadline ends here


class Draining:
    """Graceful shutdown of the open connections: ``stop`` has each one answer every request
    its client has sent and close (``ServedConnection.drain``); nothing is cancelled mid-request.
    """

    def __init__(self) -> None:
        self.connections: set[ServedConnection] = set()  # V1's and Kafka's
        self.stopping = False

    def stop(self) -> None:
        self.stopping = True
        for connection in list(self.connections):
            connection.drain()


@contextmanager
def stop_on_sigterm(scope: anyio.CancelScope) -> Iterator[None]:
    """SIGTERM (docker stop, kubernetes) cancels ``scope`` (the accept loop), so ``serve``
    drains and ends normally and the caller's cleanup (the embedded redis-server) runs;
    without it Python dies on the spot."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGTERM, scope.cancel)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, Windows
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
