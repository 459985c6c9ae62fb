"""The I/O shell: anyio TCP listener around the sans-I/O protocol and the handler table.

Per connection: read what the socket has, answer every complete line (handlers run
concurrently, so their Redis calls share one pipeline), write all replies in one send, in
request order. A bad request gets an error reply; a handler bug or a client reset closes
only that connection; Redis trouble is an UNAVAILABLE reply, never a dead pod.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from functools import partial

import anyio
from anyio.abc import SocketAttribute, SocketStream
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter import protocol, tls
from adapter.auth import Authenticator, AuthGate, users_in_redis
from adapter.handlers import Context, Handler, Starter, build_starters, build_table
from adapter.limits import (
    ConnectionSlots,
    close_after,
    stop_reading_ahead,
    timeout_or_inf,
    tune_socket,
)
from adapter.settings import Settings
from mapping.batcher import Pending
from mapping.cluster import is_cluster_url
from mapping.errors import (
    BAD_REQUEST,
    UNAVAILABLE,
    UNKNOWN_COMMAND,
    BrokerError,
    ConfigurationError,
)
from mapping.groups import Groups
from mapping.keys import Keys
from mapping.replication import Replication
from mapping.retention import RetentionTask
from mapping.startup import check_redis, redact
from mapping.store import Store, connect, make_batcher

log = logging.getLogger(__name__)
READ_SIZE = 1 << 16
# Lines answered together at most; their replies are sent before the next ones start.
MAX_LINES_AT_ONCE = 1024
REPLY_BYTES_AT_ONCE = 1 << 20


async def answer(
    context: Context, table: dict[str, Handler], line: bytes, gate: AuthGate | None = None
) -> bytes:
    """The reply to one request line (``gate``: the connection's AUTH state)."""
    try:
        request = protocol.parse_request(line)
    except protocol.ParseError as exc:
        return protocol.format_error("0", BAD_REQUEST, str(exc))
    return await _answer_request(context, table, request, gate)


def _unknown(request: protocol.Request) -> bytes:
    return protocol.format_error(
        request.correlation_id, UNKNOWN_COMMAND, f"unknown command {request.command}"
    )


async def _answer_request(
    context: Context, table: dict[str, Handler], request: protocol.Request, gate: AuthGate | None
) -> bytes:
    try:
        if gate is not None:
            refusal = await gate.screen(request)
            if refusal is not None:
                return refusal
        handler = table.get(request.command)
        if handler is None:
            return _unknown(request)
        payload = await handler(context, request.args)
    except (BrokerError, RedisError) as exc:
        return _error_reply(request, exc)
    return protocol.format_ok(request.correlation_id, payload)


def _error_reply(request: protocol.Request, exc: BrokerError | RedisError) -> bytes:
    if isinstance(exc, BrokerError):
        return protocol.format_error(request.correlation_id, exc.code, exc.message)
    # A Redis-side failure (OOM, MISCONF, READONLY, a script error, ...) is the backend's
    # trouble, not the client's: answer it and keep the connection.
    log.warning("redis error answering %s: %s", request.command, exc)
    return protocol.format_error(request.correlation_id, UNAVAILABLE, f"redis error: {exc}")


# What `_start` gives per line: a finished reply, a task answering it, or a started hot
# command's pending payload (or its task, whose Redis calls are queued already).
_Started = bytes | asyncio.Task | tuple[protocol.Request, Pending | asyncio.Task]


def _start(
    context: Context,
    table: dict[str, Handler],
    starters: dict[str, Starter],
    line: bytes,
    gate: AuthGate | None = None,
) -> _Started:
    try:
        request = protocol.parse_request(line)
    except protocol.ParseError as exc:
        return protocol.format_error("0", BAD_REQUEST, str(exc))
    if gate is not None and (request.command == "AUTH" or not gate.open):
        # AUTH, and anything before it is decided, goes through the gate in a task.
        return asyncio.ensure_future(_answer_request(context, table, request, gate))
    handler = table.get(request.command)
    if handler is None:
        return _unknown(request)
    starter = starters.get(request.command)
    if starter is not None:
        try:
            pending = starter(context, request.args)
        except BrokerError as exc:
            return _error_reply(request, exc)
        if pending is not None:
            return (request, pending)
    return asyncio.ensure_future(_answer_request(context, table, request, None))


def _finish(started: _Started) -> bytes:
    if isinstance(started, bytes):
        return started
    if isinstance(started, asyncio.Task):
        return started.result()
    request, pending = started
    try:
        return protocol.format_ok(request.correlation_id, pending.result())
    except (BrokerError, RedisError) as exc:
        return _error_reply(request, exc)


def _awaited(item: _Started) -> asyncio.Future | None:
    """What ``item`` still waits for, if anything."""
    if isinstance(item, asyncio.Task):
        return item
    if isinstance(item, tuple):
        future = item[1] if isinstance(item[1], asyncio.Task) else item[1].future
        return None if future.done() else future
    return None


async def answer_lines(
    context: Context,
    table: dict[str, Handler],
    lines: list[bytes],
    starters: dict[str, Starter] | None = None,
    gate: AuthGate | None = None,
) -> list[bytes]:
    """The replies to lines read together, in order.

    Every request is started before any is waited for, so their Redis calls share one
    pipeline. Hot commands (``starters``: PRODUCE, CONSUME) are validated and queued right
    here with no task of their own; the rest run as one task each. A handler bug raises
    (the caller closes the connection).
    """
    if starters is None:
        starters = context.starters if context.starters is not None else _STARTERS
    started: list[_Started] = []
    for line in lines:
        item = _start(context, table, starters, line, gate)
        if isinstance(item, asyncio.Task):
            # A task queues its Redis calls later: the requests after it take the same way,
            # so a connection's calls reach Redis in request order.
            starters = {}
        started.append(item)
    waiting = {future for future in map(_awaited, started) if future is not None}
    try:
        if waiting:
            # asyncio.wait never cancels what it waits for: queued futures may be shared by
            # other connections' requests.
            await asyncio.wait(waiting)
        return [_finish(item) for item in started]
    finally:
        for item in started:
            task = item[1] if isinstance(item, tuple) else item
            if isinstance(task, asyncio.Task) and not task.done():
                task.cancel()


_STARTERS = build_starters()


async def handle_connection(
    context: Context,
    table: dict[str, Handler],
    stream: SocketStream,
    *,
    slots: ConnectionSlots | None = None,
    authenticator: Authenticator | None = None,
) -> None:
    settings = context.settings
    framer = protocol.LineFramer(settings.max_line_bytes)
    gate = AuthGate(authenticator, settings.auth_timeout_s)
    idle_s = timeout_or_inf(settings.idle_timeout_s)
    flow = _Flow(settings.max_in_flight)
    # Read only when asked, from the start: see stop_reading_ahead.
    stop_reading_ahead(stream)
    # Nothing may escape: an exception here would end the listener's task group, and with
    # it every other connection of the pod.
    try:
        async with stream:
            if slots is not None and not slots.try_acquire():
                with anyio.move_on_after(1):
                    await stream.send(slots.refusal())
                return
            try:
                tune_socket(stream, settings.tcp_keepalive_s)
                while True:
                    data = b""
                    with anyio.move_on_after(gate.receive_timeout(idle_s)):
                        try:
                            data = await stream.receive(READ_SIZE)
                        except (anyio.EndOfStream, anyio.BrokenResourceError):
                            return
                        stop_reading_ahead(stream)  # backpressure: see adapter/limits.py
                    if not data:  # idle, or no AUTH, for too long: close quietly, as Kafka does
                        return
                    lines = framer.feed(data)
                    # a peer that takes no reply for the idle timeout is dropped
                    with anyio.fail_after(idle_s):
                        replies = await _answer_and_send(context, table, stream, flow, lines, gate)
                        if replies:
                            await _send(stream, b"".join(replies))
                    if framer.overflowed:
                        line_too_long = protocol.format_error("0", BAD_REQUEST, "line too long")
                        await close_after(stream, line_too_long)
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                return
            except TimeoutError:
                log.info("closing a connection whose peer took no reply for %ss", idle_s)
            except Exception:
                log.exception("closing a connection after an unexpected error")
            finally:
                if slots is not None:
                    slots.release()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return
    except Exception:
        log.exception("error while closing a connection")


# Larger replies take anyio's send, which waits while the peer does not read: a peer that
# takes no reply is then dropped after the idle timeout instead of buffered in the pod.
DIRECT_WRITE_BYTES = 1 << 16


async def _send(stream: SocketStream, data: bytes) -> None:
    """``stream.send`` without its extra event-loop turn when the socket can take the data
    at once (anyio yields after every write); a full or failing socket takes the normal
    path, which waits or raises."""
    protocol_ = getattr(stream, "_protocol", None)  # anyio's asyncio backend
    transport = getattr(stream, "_transport", None)
    if (
        protocol_ is None
        or transport is None
        or len(data) > DIRECT_WRITE_BYTES
        or not protocol_.write_event.is_set()
        or protocol_.exception is not None
        or transport.is_closing()
    ):
        await stream.send(data)
        return
    transport.write(data)


class _Flow:
    """How many lines of one connection are answered together: starts small, doubles while
    replies stay small, halves when a slice's replies pass REPLY_BYTES_AT_ONCE (CONSUME);
    never more than ``--max-in-flight``."""

    __slots__ = ("lines_at_once", "most")

    def __init__(self, max_in_flight: int = 0) -> None:
        self.most = min(max_in_flight, MAX_LINES_AT_ONCE) if max_in_flight else MAX_LINES_AT_ONCE
        self.lines_at_once = min(64, self.most)

    def update(self, lines: int, reply_bytes: int) -> None:
        if reply_bytes > REPLY_BYTES_AT_ONCE:
            self.lines_at_once = max(1, lines // 2)
        elif lines >= self.lines_at_once:
            self.lines_at_once = min(self.most, self.lines_at_once * 2)


async def _answer_and_send(
    context: Context,
    table: dict[str, Handler],
    stream: SocketStream,
    flow: _Flow,
    lines: list[bytes],
    gate: AuthGate | None = None,
) -> list[bytes]:
    """Answer ``lines`` in slices, sending each slice's replies before starting the next;
    returns the replies of the last slice, not yet sent.

    Backpressure: ``send`` waits while the socket's buffers are full, and the connection is
    not read meanwhile, so a client that does not read its replies holds at most one slice
    of replies (and one read of requests) in this pod, never an unbounded queue.
    """
    first = 0
    while True:
        size = flow.lines_at_once
        chunk = lines[first : first + size]
        replies = await answer_lines(context, table, chunk, gate=gate)
        flow.update(len(chunk), sum(map(len, replies)))
        first += size
        if first >= len(lines):
            return replies
        await _send(stream, b"".join(replies))


async def wait_for_redis(settings: Settings, keys: Keys, client: Redis) -> None:
    """Run the startup checks (mapping/startup.py), retrying while Redis is still coming up."""
    deadline = anyio.current_time() + settings.redis_startup_timeout_s
    redis_at = redact(settings.redis_url or "")  # never log a password
    while True:
        try:
            await check_redis(
                client,
                keys,
                sequence_bits=settings.sequence_bits,
                require_aof=settings.require_aof,
                url=redis_at,
            )
            return
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            error = exc
        if anyio.current_time() > deadline:
            raise ConfigurationError(
                f"cannot reach Redis at {redis_at} within "
                f"{settings.redis_startup_timeout_s:g}s: {error}"
            )
        log.warning("waiting for Redis at %s: %s", redis_at, error)
        await anyio.sleep(0.5)


async def serve(settings: Settings, *, ready: anyio.Event | None = None) -> None:
    """Run one pod until cancelled. ``settings.redis_url`` must be set."""
    assert settings.redis_url is not None
    keys = Keys(settings.key_prefix)
    async with AsyncExitStack() as stack:
        if settings.redis_wait_replicas and is_cluster_url(settings.redis_url):
            raise ConfigurationError("--redis-wait-replicas is not supported on Redis Cluster")
        client = connect(
            settings.redis_url, settings.redis_timeout_ms / 1000, **settings.redis_options()
        )
        stack.push_async_callback(client.aclose)
        await wait_for_redis(settings, keys, client)
        batcher = make_batcher(client)
        store = Store(
            batcher,
            keys,
            sequence_bits=settings.sequence_bits,
            replica_lag_max_ms=settings.replica_lag_max_ms,
            topic_defaults=settings.topic_defaults,
        )
        context = Context(
            settings,
            store,
            groups=Groups(batcher, keys, session_timeout_ms=settings.session_timeout_ms),
            replication=Replication(
                client,
                store,
                acks_timeout_ms=settings.acks_timeout_ms,
                run_replicator=settings.replicator,
                redis_wait_replicas=settings.redis_wait_replicas,
            ),
        )
        table = build_table()
        draining = Draining()
        if settings.metrics_port:
            from adapter.metrics import Metrics

            metrics = Metrics()
            table = metrics.instrument(table)
            context.starters = metrics.instrument_starters(build_starters())
            batcher.on_flush = metrics.on_flush
            metrics.connections.set_function(lambda: len(draining.streams))
            metrics.watch_lag(settings.redis_url, keys, settings.redis_timeout_ms / 1000)
            stack.callback(metrics.serve(settings.metrics_port, settings.metrics_host))
        listener = await anyio.create_tcp_listener(
            local_host=settings.host,
            local_port=settings.port,
            # --workers: every worker listens on the port; the kernel spreads connections.
            reuse_port=settings.workers > 1,
        )
        authenticator = Authenticator.from_options(
            settings.auth_file, users_in_redis(batcher, keys) if settings.auth_redis else None
        )
        slots = ConnectionSlots(settings.max_connections)
        serve_one = partial(
            handle_connection, context, table, slots=slots, authenticator=authenticator
        )
        connection = partial(draining.track, tls.serve_over_tls(settings, serve_one))
        redis_at = redact(settings.redis_url)
        log.info("serving V1 on %s:%d, Redis %s", settings.host, settings.port, redis_at)
        async with anyio.create_task_group() as background:
            background.start_soon(batcher.run)
            background.start_soon(context.replication.run)
            background.start_soon(
                RetentionTask(
                    store,
                    client,
                    pod_id=context.replication.pod_id,
                    interval_ms=settings.retention_interval_ms,
                ).run
            )
            async with anyio.create_task_group() as connections:
                with anyio.CancelScope() as accepting, _stop_on_sigterm(accepting):
                    if ready is not None:
                        ready.set()
                    await _accept(listener, connections, connection)
                # SIGTERM: stop accepting, answer what was read, then stop. Connections the
                # kernel already completed (in the listen backlog) are taken and drained
                # too: closing the listener would reset them with their requests unread.
                with anyio.move_on_after(0.05):
                    await _accept(listener, connections, connection)
                await listener.aclose()
                log.info("SIGTERM: draining %d connection(s)", len(draining.streams))
                draining.stop()
                connections.cancel_scope.deadline = (
                    anyio.current_time() + settings.shutdown_timeout_ms / 1000
                )
            background.cancel_scope.cancel()
        log.info("stopped serving on %s:%d", settings.host, settings.port)


async def _accept(
    listener: anyio.abc.MultiListener[SocketStream],
    connections: anyio.abc.TaskGroup,
    handler: Callable[[SocketStream], Awaitable[None]],
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
            connections.start_soon(_serve_socket, handler, sock)

    async with anyio.create_task_group() as accepting:
        for one in listener.listeners:
            accepting.start_soon(accept_on, one)


async def _serve_socket(
    handler: Callable[[SocketStream], Awaitable[None]], sock: socket.socket
) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = await SocketStream.from_socket(sock)
    except (OSError, ValueError):  # reset by the client before it was taken (anyio
        # reports "the socket must be connected"): nothing to answer
        sock.close()
        return
    except BaseException:
        sock.close()
        raise
    await handler(stream)


class Draining:
    """Graceful shutdown of the open connections.

    ``stop`` shuts the read side of every connection (``shutdown(SHUT_RD)``): the kernel still
    hands over what the client had already sent, then end-of-stream, so each connection
    answers every request it read, in order, and closes. Nothing is cancelled mid-request.
    """

    def __init__(self) -> None:
        self.streams: set[SocketStream] = set()
        self.stopping = False

    async def track(
        self, handler: Callable[[SocketStream], Awaitable[None]], stream: SocketStream
    ) -> None:
        self.streams.add(stream)
        if self.stopping:
            _shut_reads(stream)
        try:
            await handler(stream)
        finally:
            self.streams.discard(stream)

    def stop(self) -> None:
        self.stopping = True
        for stream in list(self.streams):
            _shut_reads(stream)


def _shut_reads(stream: SocketStream) -> None:
    try:
        stream.extra(SocketAttribute.raw_socket).shutdown(socket.SHUT_RD)
    except (OSError, anyio.TypedAttributeLookupError):
        pass  # already closed by the client


@contextmanager
def _stop_on_sigterm(scope: anyio.CancelScope) -> Iterator[None]:
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
