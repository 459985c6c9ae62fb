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
from collections.abc import Iterator
from contextlib import AsyncExitStack, contextmanager
from functools import partial

import anyio
from anyio.abc import SocketStream
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter import protocol, tls
from adapter.auth import Authenticator, AuthGate, users_in_redis
from adapter.handlers import Context, Handler, build_table
from adapter.limits import (
    ConnectionSlots,
    close_after,
    in_flight_batches,
    stop_reading_ahead,
    timeout_or_inf,
    tune_socket,
)
from adapter.settings import Settings
from mapping.batcher import RedisBatcher
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
from mapping.startup import check_redis, redact
from mapping.store import Store, connect

log = logging.getLogger(__name__)
READ_SIZE = 1 << 16


async def answer(
    context: Context, table: dict[str, Handler], line: bytes, gate: AuthGate | None = None
) -> bytes:
    """The reply to one request line (``gate``: the connection's AUTH state)."""
    try:
        request = protocol.parse_request(line)
    except protocol.ParseError as exc:
        return protocol.format_error("0", BAD_REQUEST, str(exc))
    try:
        if gate is not None:
            refusal = await gate.screen(request)
            if refusal is not None:
                return refusal
        handler = table.get(request.command)
        if handler is None:
            return protocol.format_error(
                request.correlation_id, UNKNOWN_COMMAND, f"unknown command {request.command}"
            )
        payload = await handler(context, request.args)
    except BrokerError as exc:
        return protocol.format_error(request.correlation_id, exc.code, exc.message)
    except RedisError as exc:
        # A Redis-side failure (OOM, MISCONF, READONLY, a script error, ...) is the backend's
        # trouble, not the client's: answer it and keep the connection.
        log.warning("redis error answering %s: %s", request.command, exc)
        return protocol.format_error(request.correlation_id, UNAVAILABLE, f"redis error: {exc}")
    return protocol.format_ok(request.correlation_id, payload)


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
                    for batch in in_flight_batches(lines, settings.max_in_flight):
                        replies = await asyncio.gather(
                            *(answer(context, table, line, gate) for line in batch)
                        )
                        # a peer that takes no reply for the idle timeout is dropped
                        with anyio.fail_after(idle_s):
                            await stream.send(b"".join(replies))
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
        client = connect(
            settings.redis_url, settings.redis_timeout_ms / 1000, **settings.redis_options()
        )
        stack.push_async_callback(client.aclose)
        await wait_for_redis(settings, keys, client)
        batcher = RedisBatcher(client)
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
        authenticator = Authenticator.from_options(
            settings.auth_file, users_in_redis(batcher, keys) if settings.auth_redis else None
        )
        slots = ConnectionSlots(settings.max_connections)
        listener = await tls.open_listener(settings)
        redis_at = redact(settings.redis_url)
        log.info("serving V1 on %s:%d, Redis %s", settings.host, settings.port, redis_at)
        with anyio.CancelScope() as shutdown, _stop_on_sigterm(shutdown):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(batcher.run)
                tasks.start_soon(context.replication.run)
                tasks.start_soon(
                    listener.serve,
                    partial(
                        handle_connection, context, table, slots=slots, authenticator=authenticator
                    ),
                )
                if ready is not None:
                    ready.set()
        log.info("stopped serving on %s:%d", settings.host, settings.port)


@contextmanager
def _stop_on_sigterm(scope: anyio.CancelScope) -> Iterator[None]:
    """SIGTERM (docker stop, kubernetes) ends ``serve`` normally, so the caller's cleanup
    (the embedded redis-server) runs; without it Python dies on the spot."""
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
