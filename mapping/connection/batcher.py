"""Auto-pipelining: every Redis call made during one event-loop turn, from any connection,
goes to Redis as one pipeline.

Calls are queued; one flusher task sends the queue as a single non-transactional pipeline,
then the next queue, one pipeline in flight at a time. Calls made while a pipeline is in
flight wait for the next one, so under load batches grow by themselves, and the order in
which calls were made is the order in which Redis runs them.

Calls that ``append`` items to one combinable script call (PRODUCE records for one partition)
share a single command per batch: each caller's items join the group opened by the first
one, as long as no other call was queued after it (so Redis still runs every call in the
order it was made). One EVALSHA of 500 records costs Redis and redis-py far less than 500.

A saturated Redis is slow, not gone: a pipeline is written in chunks, each of which must be
taken within the socket timeout, and each reply must follow the one before within it, so a
long pipeline that Redis works through steadily never times out (one timeout over the
whole write did, under load: "Timeout writing to socket", answered as "not written" while
Redis went on to run the appends). The pods bound what they queue (adapter/backpressure.py),
so a pipeline stays short anyway. When a pipeline does fail, the calls whose replies came
back keep them; the rest fail with ``Unavailable`` when nothing was sent (connecting
failed) and ``OutcomeUnknown`` once it was (they may have run).

A call made with ``submit_raw`` wants its array reply as its RESP bytes
(mapping/connection/raw_replies.py): a pipeline holding one is read by the batcher itself,
each reply's end found without parsing it, the raw ones handed over as they are and every
other reply parsed by the connection's hiredis reader, one at a time, as before.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Generator, Hashable
from typing import Any, Generic, TypeVar

import hiredis
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.connection import raw_replies, scripts
from mapping.connection.raw_replies import START, RawCommand, RawReply, raw_reply
from mapping.connection.redis_errors import not_run
from mapping.core.codec import to_str
from mapping.core.errors import OutcomeUnknown, Unavailable, from_script_error
from mapping.core.resp import pack_command, plain

log = logging.getLogger(__name__)

T = TypeVar("T")
U = TypeVar("U")


class Pending(Generic[T]):
    """A queued call's future and how to turn its reply into the caller's result.

    Await it in a task, or, when the future is done, take ``result()`` with no task at all
    (the server's fast path). Awaiting shields the future, which other callers may share.
    """

    __slots__ = ("future", "finish")

    def __init__(self, future: asyncio.Future[Any], finish: Callable[[Any], T]) -> None:
        self.future = future
        self.finish = finish

    def result(self) -> T:
        return self.finish(self.future.result())

    def then(self, step: Callable[[T], U]) -> Pending[U]:
        finish = self.finish
        return Pending(self.future, lambda reply: step(finish(reply)))

    def __await__(self) -> Generator[Any, None, T]:
        future = self.future
        if future.done():  # its pipeline came back already: no shield, no suspension
            return self.finish(future.result())
        reply = yield from asyncio.shield(future).__await__()
        return self.finish(reply)


def mark_retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback for a queued call whose failure may go unread (its caller went away,
    or another call's error is the one answered): no "exception never retrieved" log."""
    if not future.cancelled():
        future.exception()


# Most items one combined call carries: bounds the time one script holds Redis.
MAX_COMBINED_ITEMS = 1024
# A pipeline is written in chunks of about this size, each within the socket timeout: the
# timeout bounds how long Redis may take no bytes at all, not how long a long pipeline takes.
WRITE_CHUNK_BYTES = 256 << 10
# Times a batch's NOSCRIPT calls are loaded and sent again (a flush may race the reload).
MAX_SCRIPT_RELOADS = 3
# Commands that may run twice with the same effect: after a NOSCRIPT they are sent again so
# that they run after the script calls made before them (see _resend_without_scripts).
REPEATABLE = frozenset(
    {"GET", "HGET", "HMGET", "HGETALL", "SMEMBERS", "SISMEMBER", "XRANGE", "XREVRANGE",
     "XLEN", "EXISTS", "PING", "SADD", "HSETNX"}
)  # fmt: skip


class _Combined:
    """Items of many callers for one command, built when the batch is sent; they all share
    one future (its reply)."""

    __slots__ = ("build", "items", "future")

    def __init__(self, build: Callable[[list[Any]], tuple], future: asyncio.Future[Any]) -> None:
        self.build = build
        self.items: list[Any] = []
        self.future = future


# A queued call: a ready command and its future, or a combined one.
_Call = tuple[tuple, "asyncio.Future[Any]"] | _Combined


class PipelineFailed(Exception):
    """A pipeline broke off: ``replies`` are those of its first calls, which came back; the
    others fail with ``error``."""

    def __init__(self, replies: list[Any], error: Unavailable) -> None:
        super().__init__(error.message)
        self.replies = replies
        self.error = error


class RedisBatcher:
    def __init__(self, client: Redis) -> None:
        self._client = client
        self._queue: list[_Call] = []
        self._open: dict[Hashable, _Combined] = {}
        self._connection: Any = None  # the flusher's own connection (see _execute)
        self._wakeup = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None  # the flusher's, once it runs
        self.pipelines_sent = 0
        self.calls_sent = 0
        self.on_flush: Callable[[int], None] | None = None  # metrics: called with batch size

    @property
    def packs_commands(self) -> bool:
        """Whether this batcher writes the RESP of its commands itself, so a command's
        ready-made arguments (mapping/core/resp.py) save the packing; other clients unpack them."""
        return isinstance(self._client, Redis)

    async def call(self, *command: Any) -> Any:
        """Queue one Redis command and wait for its reply.

        Raises ``Unavailable`` when Redis cannot be reached or times out, ``BrokerError`` for
        a script's ``"<CODE> <message>"`` error reply, and ``ResponseError`` otherwise.
        """
        return await self.submit(*command)

    def submit(self, *command: Any) -> asyncio.Future[Any]:
        """``call`` without the coroutine: queue now, await the future later."""
        return self._enqueue(command)

    def submit_raw(self, *command: Any) -> asyncio.Future[Any]:
        """``submit`` for a command whose array reply is wanted as its RESP bytes: a
        ``RawReply`` where the connection allows, else the parsed reply (errors as for
        ``call``; mapping/connection/raw_replies.py)."""
        return self._enqueue(RawCommand(command))

    def _enqueue(self, command: tuple) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = (self._loop or asyncio.get_running_loop()).create_future()
        self._queue.append((command, future))
        if self._open:  # a later call must not overtake this one
            self._open.clear()
        self._wakeup.set()
        return future

    def append(
        self,
        group: Hashable,
        build: Callable[[list[Any]], tuple],
        items: list[Any],
        most_items: int = MAX_COMBINED_ITEMS,
    ) -> tuple[asyncio.Future[Any], int]:
        """Add ``items`` to the combined call ``group`` of the batch being filled (opening
        it when needed: a call holds ``most_items`` at most). Returns the call's future (its
        reply; errors as for ``call``) and the index of the first of these items in the
        call. ``build(all items)`` makes the command when the batch is sent."""
        combined = self._open.get(group)
        if combined is None or len(combined.items) + len(items) > most_items:
            future: asyncio.Future[Any] = (self._loop or asyncio.get_running_loop()).create_future()
            combined = self._open[group] = _Combined(build, future)
            self._queue.append(combined)
            self._wakeup.set()
        first = len(combined.items)
        combined.items.extend(items)
        return combined.future, first

    async def run(self) -> None:
        """The flusher: runs until cancelled."""
        # Calls are queued on its loop (asyncio.get_running_loop() on each would cost a
        # getpid() system call in CPython 3.11).
        self._loop = asyncio.get_running_loop()
        flusher = asyncio.current_task()
        assert flusher is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            # Let every task already runnable in this turn add its calls first.
            await asyncio.sleep(0)
            batch, self._queue = self._queue, []
            self._open.clear()
            if batch:
                await self._flush(self._expand(batch))
                if flusher.cancelling():
                    # Cancelled during the pipeline, and the cancellation was swallowed:
                    # CPython 3.11's asyncio.wait_for (redis-py's write) drops one that
                    # comes as the write completes (fixed in 3.12). Waiting on, the flusher
                    # held the pod's shutdown forever.
                    raise asyncio.CancelledError

    @staticmethod
    def _expand(batch: list[_Call]) -> list[tuple[tuple, Any]]:
        """(command, future) pairs; a combined call's command is built now."""
        ready: list[tuple[tuple, Any]] = []
        for call in batch:
            if isinstance(call, _Combined):
                ready.append((call.build(call.items), call.future))
            else:
                ready.append(call)
        return ready

    async def _flush(self, batch: list[tuple[tuple, Any]]) -> None:
        commands = [command for command, _ in batch]
        try:
            replies = await self._execute(commands)
            await self._resend_without_scripts(commands, replies)
        except PipelineFailed as failed:
            self._settle(batch, failed.replies)
            self._fail(batch[len(failed.replies) :], failed.error)
            return
        except Exception as exc:
            # Anything else (a bug) must not end the flusher: every later call of the pod
            # would wait forever.
            log.exception("redis pipeline failed")
            self._fail(batch, OutcomeUnknown(f"redis error: {exc}"))
            return
        self._settle(batch, replies)

    @staticmethod
    def _settle(batch: list[tuple[tuple, Any]], replies: list[Any]) -> None:
        """Hand each reply (or error reply) to its call; ``replies`` may be the first few."""
        for (_, future), reply in zip(batch, replies, strict=False):
            if future.done():  # the caller went away
                continue
            if not_run(reply):  # LOADING, READONLY, CLUSTERDOWN, ...: safe to send again
                future.set_exception(Unavailable(f"redis unavailable: {reply}"))
            elif isinstance(reply, ResponseError):
                future.set_exception(from_script_error(str(reply)) or reply)
            elif isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    @staticmethod
    def _fail(batch: list[tuple[tuple, Any]], error: Unavailable) -> None:
        for _, future in batch:
            if not future.done():  # one exception each: raising shares its traceback
                future.set_exception(type(error)(error.message))

    async def _execute(self, commands: list[tuple]) -> list[Any]:
        """Send ``commands`` as one pipeline; error replies come back as exceptions. Raises
        ``PipelineFailed`` when the pipeline broke off."""
        self.pipelines_sent += 1
        self.calls_sent += len(commands)
        if self.on_flush is not None:
            self.on_flush(len(commands))
        try:
            return await self._send(commands)
        except PipelineFailed:
            raise
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            # another client's pipeline (a test double): whether it was sent is not known
            raise PipelineFailed([], OutcomeUnknown(f"redis outcome unknown: {exc}")) from exc
        except Exception as exc:
            # Anything else (a protocol error, a bug) must not end the flusher: every later
            # call of the pod would wait forever.
            log.exception("redis pipeline failed")
            raise PipelineFailed([], OutcomeUnknown(f"redis error: {exc}")) from exc

    async def _send(self, commands: list[tuple]) -> list[Any]:
        if isinstance(self._client, Redis):
            return await self._execute_on_own_connection(commands)
        # Any other client (a cluster client, a test double): redis-py's pipeline.
        pipe = self._client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*plain(command))
        return await pipe.execute(raise_on_error=False)

    async def _execute_on_own_connection(self, commands: list[tuple]) -> list[Any]:
        """What ``pipeline().execute(raise_on_error=False)`` does, on a connection the
        flusher keeps (one pipeline is in flight at a time): a redis-py Pipeline object per
        batch costs more than the round trip itself."""
        try:
            if self._connection is None:
                self._connection = await self._client.connection_pool.get_connection()
            await ready(self._connection)
        except Exception as exc:  # refused, timed out, failed its handshake: nothing sent
            raise PipelineFailed([], Unavailable(f"redis unavailable: {exc}")) from exc
        return await send_pipeline(self._connection, commands, self._client.response_callbacks)

    async def _resend_without_scripts(self, commands: list[tuple], replies: list[Any]) -> None:
        """After a Redis restart without its script cache (or SCRIPT FLUSH) an EVALSHA
        answers NOSCRIPT while the calls after it in the pipeline ran: load the scripts and
        send again, in their order, the failed calls and every repeatable one after the
        first failure (reads, idempotent writes), so a call made after another sees its
        effect (a COMMIT then OFFSET answers the committed offset). A script call after the
        first failure that ran (its script was loaded again meanwhile, by another pod) is
        not sent twice: it keeps its reply. ``replies`` is updated in place."""
        for _ in range(MAX_SCRIPT_RELOADS):
            missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
            if not missing:
                return
            again = [
                i
                for i in range(missing[0], len(commands))
                if isinstance(replies[i], NoScriptError) or _repeatable(commands[i])
            ]
            try:
                await self._load_scripts({commands[i][1] for i in missing})
                resent = await self._execute([commands[i] for i in again])
            except Exception as exc:  # Redis gone, a failed SCRIPT LOAD
                # the calls before the first NOSCRIPT have their replies; of the rest some
                # ran and some did not
                message = exc.error.message if isinstance(exc, PipelineFailed) else str(exc)
                unknown = OutcomeUnknown(f"redis outcome unknown: {message}")
                raise PipelineFailed(replies[: missing[0]], unknown) from exc
            for i, reply in zip(again, resent, strict=True):
                replies[i] = reply

    async def _load_scripts(self, shas: set[str]) -> None:
        for sha in shas:
            script = scripts.by_sha(to_str(sha))
            if script is not None:
                await self._client.script_load(script.source)


async def ready(connection: Any) -> None:
    """``connection`` connected: nothing is sent yet, so a failure here means the pipeline
    certainly did not run."""
    if connection.is_connected:
        # Nothing is left unread between pipelines, so readable means the socket was
        # closed (Redis restarted while this pod was idle): reconnect rather than fail
        # the batch, as the pool does with its connections.
        try:
            stale = await connection.can_read()
        except RedisConnectionError:
            # the socket is closed: redis-py before 8.2 disconnected it here, 8.2 leaves it
            # connected (a pipeline written to it would then fail as "outcome unknown")
            stale = True
        # (marked for reconnect: made on a replica, mapping/replication/leader_epochs.py;
        # the pool does the same when such a connection is released)
        if stale or connection.should_reconnect():
            await connection.disconnect(nowait=True)
    if not connection.is_connected:
        await connection.connect()


async def send_pipeline(
    connection: Any, commands: list[tuple], callbacks: dict[str, Any]
) -> list[Any]:
    """``commands`` as one pipeline on ``connection`` (connected); their replies, an error
    reply as its exception, each through ``callbacks`` as redis-py's own replies (SMEMBERS:
    a set, ...). Written in chunks and read reply by reply, each within the socket timeout
    (see the module's docstring). Raises ``PipelineFailed`` with the replies read when the
    connection failed."""
    replies: list[Any] = []
    try:
        for chunk in _chunks(_pack(commands, connection)):
            await connection.send_packed_command(chunk, check_health=False)
        await _read_replies(
            connection, commands, callbacks, replies, _reads_raw(connection, commands)
        )
    except Exception as exc:
        # Replies may be left unread: the connection is out of step, drop it. What was
        # sent may have run: the calls without a reply have an unknown outcome.
        await connection.disconnect(nowait=True)
        if not isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
            log.exception("redis pipeline failed")  # a protocol error, a bug
        unknown = OutcomeUnknown(f"redis outcome unknown: {exc}")
        raise PipelineFailed(replies, unknown) from exc
    except BaseException:  # cancelled (the pod stops)
        await connection.disconnect(nowait=True)
        raise
    return replies


async def _read_replies(
    connection: Any,
    commands: list[tuple],
    callbacks: dict[str, Any],
    replies: list[Any],
    raw: bool = False,
) -> None:
    """Each command's reply into ``replies``, each within the socket timeout of the one
    before it (RedisTimeoutError otherwise). redis-py would put an ``asyncio.timeout``
    around every reply, a timer made and cancelled each time (3.7 µs, more than a small
    batch's reply costs to read): one ``_Stall`` watches the whole pipeline instead, while
    the connection's own timeout is set aside (the flusher owns the connection meanwhile).
    ``raw``: read by a ``_RawReader`` (``_reads_raw``) instead of the connection's parser."""
    timeout = connection.socket_timeout
    stall = None if timeout is None else _Stall(timeout)
    connection.socket_timeout = None
    raw_reader = _RawReader(connection) if raw else None
    try:
        for command in commands:
            if raw_reader is not None:
                reply = await raw_reader.read(command)
            else:
                try:
                    reply = await connection.read_response()
                except ResponseError as exc:
                    reply = exc
            if not isinstance(reply, (ResponseError, RawReply)):
                callback = callbacks.get(command[0])
                if callback is not None:
                    reply = callback(reply)
                    if inspect.isawaitable(reply):
                        reply = await reply
            replies.append(reply)
            if stall is not None:
                stall.progress()
        if raw_reader is not None:
            raw_reader.keep_rest()
    except asyncio.CancelledError:
        if stall is None or not stall.took_back():  # not the stall's: the pod stops
            raise
        raise RedisTimeoutError(f"no reply from redis in {timeout}s") from None
    finally:
        connection.socket_timeout = timeout
        if stall is not None:
            stall.close()


# What one read of the socket takes at most, for raw replies.
READ_BYTES = 1 << 20


def _reads_raw(connection: Any, commands: list[tuple]) -> bool:
    """Whether the batcher reads this pipeline's replies itself: it holds a raw call, a
    scanner is there, and the connection reads through a hiredis reader with nothing left
    in it (else redis-py reads, and a raw call's reply comes parsed)."""
    if raw_replies.scan is None or not any(type(c) is RawCommand for c in commands):
        return False
    reader = getattr(getattr(connection, "_parser", None), "_reader", None)
    return (
        isinstance(reader, hiredis.Reader)
        and not reader.has_data()
        and isinstance(getattr(connection, "_reader", None), asyncio.StreamReader)
    )


class _RawReader:
    """The replies of a pipeline read into a buffer of its own: each reply's end found by
    ``raw_replies.scan``; a raw call's array reply handed over as a ``RawReply``, any other
    reply fed to the connection's hiredis reader alone, so it comes back as redis-py's own
    read would give it (an error reply as its exception, returned). A ``RawReply`` is lent
    the buffer itself, not a copy of its bytes: from then on the buffer only grows, and
    where it would be emptied or cut a new one takes over (``lent``)."""

    __slots__ = ("scan", "stream", "reader", "buffer", "pos", "lent")

    def __init__(self, connection: Any) -> None:
        scan = raw_replies.scan
        assert scan is not None
        self.scan = scan
        self.stream: asyncio.StreamReader = connection._reader
        self.reader: hiredis.Reader = connection._parser._reader
        self.buffer = bytearray()
        self.pos = 0
        self.lent = False  # a RawReply holds the buffer: its bytes must not change

    async def read(self, command: tuple) -> Any:
        buffer = self.buffer
        if self.pos == len(buffer) or self.pos >= READ_BYTES:
            # all handed over, or a long pipeline: drop what was handed over
            if self.lent:
                self.buffer = buffer = buffer[self.pos :]
                self.lent = False
            elif self.pos == len(buffer):
                buffer.clear()
            else:
                del buffer[: self.pos]
            self.pos = 0
        start, pending, last = self.pos, START, -1
        pos = start
        while True:
            pos, pending, last = self.scan(buffer, pos, pending, last)
            if not pending:
                break
            data = await self.stream.read(READ_BYTES)
            if not data:
                raise RedisConnectionError("Connection closed by server.")
            buffer += data
        self.pos = pos
        raw = raw_reply(buffer, start, pos, last) if type(command) is RawCommand else None
        if raw is not None:
            self.lent = True
            return raw
        self.reader.feed(buffer, start, pos - start)
        reply = self.reader.gets()
        if isinstance(reply, RedisConnectionError):  # as redis-py's parser does
            raise reply
        if isinstance(reply, list) and reply and isinstance(reply[0], RedisConnectionError):
            raise reply[0]
        return reply

    def keep_rest(self) -> None:
        """Bytes nobody asked for go to the connection's reader: the next ready()
        reconnects."""
        if self.pos < len(self.buffer):
            self.reader.feed(self.buffer, self.pos, len(self.buffer) - self.pos)


class _Stall:
    """Cancels the task that made it once ``timeout`` seconds pass with no ``progress``."""

    __slots__ = ("loop", "task", "timeout", "last", "fired", "timer")

    def __init__(self, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.timeout = timeout
        self.last = self.loop.time()
        self.fired = False
        self.timer = self.loop.call_at(self.last + timeout, self._check)

    def progress(self) -> None:
        self.last = self.loop.time()

    def _check(self) -> None:
        due = self.last + self.timeout
        if self.loop.time() < due:  # progress since: look again when it would be due
            self.timer = self.loop.call_at(due, self._check)
        elif self.task is not None:
            self.fired = True
            self.task.cancel()

    def took_back(self) -> bool:
        """Whether the cancellation being raised was this stall's alone: then it is taken
        back (``uncancel``), to be raised as a timeout."""
        return self.fired and self.task is not None and self.task.uncancel() == 0

    def close(self) -> None:
        self.timer.cancel()


def _repeatable(command: tuple) -> bool:
    name = command[0]
    return to_str(name).upper() in REPEATABLE


def _pack(commands: list[tuple], connection: Any) -> list[bytes]:
    """The RESP bytes of each of ``commands``: hiredis's packer in C, much faster than
    redis-py's own (see docs/performance.md), with mapping/core/resp.py's
    ready-made arguments; redis-py's for what hiredis does not take."""
    try:
        return [pack_command(command) for command in commands]
    except TypeError:
        return [b"".join(connection.pack_commands([plain(command)])) for command in commands]


def _chunks(packed: list[bytes]) -> list[bytes]:
    """``packed`` joined into pieces of about WRITE_CHUNK_BYTES (one for a short pipeline)."""
    chunks: list[bytes] = []
    start = size = 0
    for index, command in enumerate(packed):
        size += len(command)
        if size >= WRITE_CHUNK_BYTES:
            chunks.append(b"".join(packed[start : index + 1]))
            start, size = index + 1, 0
    if start < len(packed):
        chunks.append(b"".join(packed[start:]))
    return chunks
