"""From request lines to reply lines, with no sockets: parse, screen (AUTH), dispatch to the
handler table, format. ``start`` begins answering a line without waiting; ``finish`` makes
its reply once what it waited for is done. The connection (adapter/v1/connection.py) starts a
whole slice of lines before any is waited for, so their Redis calls share one pipeline.
"""

from __future__ import annotations

import asyncio
import logging

from redis.exceptions import RedisError

from adapter.v1 import protocol
from adapter.v1.auth_gate import AuthGate
from adapter.v1.handlers import Context, Handler, Starter, access
from adapter.v1.handlers.table import build_starters
from mapping.connection.batcher import Pending
from mapping.core.errors import BAD_REQUEST, UNAVAILABLE, UNKNOWN_COMMAND, BrokerError
from mapping.security.acls import WILDCARD

log = logging.getLogger(__name__)


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
    context: Context,
    table: dict[str, Handler],
    request: protocol.Request,
    gate: AuthGate | None,
    screened: bool = False,
) -> bytes:
    try:
        if gate is not None and not screened:
            refusal = await gate.screen(request)
            if refusal is not None:
                return refusal
        handler = table.get(request.command)
        if handler is None:
            return _unknown(request)
        if not screened and context is not None and context.authorizer.enabled:
            _authorize(context, request, gate)
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


# What `start` gives per line: a finished reply, a task answering it, or a started hot
# command's pending payload (or its task, whose Redis calls are queued already).
Started = bytes | asyncio.Task | tuple[protocol.Request, Pending | asyncio.Task]


def _start(
    context: Context,
    table: dict[str, Handler],
    starters: dict[str, Starter],
    line: bytes,
    gate: AuthGate | None,
) -> Started:
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
    if context.authorizer.enabled:  # (off: this one attribute check per request)
        try:
            _authorize(context, request, gate)
        except BrokerError as exc:
            return _error_reply(request, exc)
    starter = starters.get(request.command)
    if starter is not None:
        try:
            pending = starter(context, request.args)
        except BrokerError as exc:
            return _error_reply(request, exc)
        if pending is not None:
            return (request, pending)
    return asyncio.ensure_future(_answer_request(context, table, request, gate, screened=True))


def _authorize(context: Context, request: protocol.Request, gate: AuthGate | None) -> None:
    """Raise NOT_AUTHORIZED unless the connection's user may run the command from its host
    (--authorizer)."""
    principal = access.principal_of(gate.user if gate is not None else None)
    host = gate.host if gate is not None else WILDCARD
    refused = access.refusal(context, request.command, request.args, principal, host)
    if refused is not None:
        raise refused


_STARTERS = build_starters()


def start(
    context: Context, table: dict[str, Handler], lines: list[bytes], gate: AuthGate | None = None
) -> list[Started]:
    """Start answering ``lines``, in order. Hot commands (the context's starters: PRODUCE,
    CONSUME, JOIN, HEARTBEAT, COMMIT) are validated and queued right here with no task of their
    own; the rest run as one task each."""
    starters = context.starters if context.starters is not None else _STARTERS
    started: list[Started] = []
    for line in lines:
        item = _start(context, table, starters, line, gate)
        if isinstance(item, asyncio.Task):
            # A task queues its Redis calls later: the requests after it take the same way,
            # so a connection's calls reach Redis in request order.
            starters = {}
        started.append(item)
    return started


def awaited(item: Started) -> asyncio.Future | None:
    """What ``item`` still waits for, if anything."""
    if isinstance(item, asyncio.Task):
        return item
    if isinstance(item, tuple):
        future = item[1] if isinstance(item[1], asyncio.Task) else item[1].future
        return None if future.done() else future
    return None


def finish(started: Started) -> bytes:
    """The reply of a started line whose wait is over. A handler bug raises."""
    if isinstance(started, bytes):
        return started
    if isinstance(started, asyncio.Task):
        return started.result()
    request, pending = started
    try:
        return protocol.format_ok(request.correlation_id, pending.result())
    except (BrokerError, RedisError) as exc:
        return _error_reply(request, exc)


def cancel(started: list[Started]) -> None:
    """Stop the tasks of a slice whose connection went away. Queued Redis calls are left
    alone: their futures may be shared by other connections' requests."""
    for item in started:
        task = item[1] if isinstance(item, tuple) else item
        if isinstance(task, asyncio.Task) and not task.done():
            task.cancel()
