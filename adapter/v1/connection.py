"""One V1 client connection: an ``asyncio.Protocol`` around the sans-I/O core (what both
doors' connections share is in adapter/served.py).

Bytes that arrive are split into lines and answered in slices right in the read callback
(adapter/v1/answer.py starts a whole slice before any of it waits, so the slice's Redis calls
share the pod's next pipeline); when the last reply of a slice is ready it is written in one
go, in request order, and the next slice starts. There is no task per connection or per
read: with anyio streams each read cost a task wake-up, an extra loop turn, cancel scopes
and an ``asyncio.wait`` (docs/performance.md has the figures).

Limits (see adapter/limits.py for the numbers):

- at most one slice (``--max-in-flight`` lines, fewer while replies are large, and at most
  ``--max-connection-append-bytes`` of lines beyond its first) is being answered at once;
- a slice starts only when the pod's append budget allows (adapter/backpressure.py): while
  the pod has ``--max-append-bytes`` of requests in flight, connections wait their turn
  with reading paused;
- reading pauses while a whole next slice is waiting, and while the socket does not take
  the replies (``pause_writing``): a client that pipelines without reading is left with
  full socket buffers, and the pod holds at most one read, one slice and one slice of
  replies for it;
- a connection that sends nothing for ``--idle-timeout-s`` with nothing outstanding, or
  whose peer takes no reply for that long, is closed; one that has not authenticated by
  ``--auth-timeout-s`` too;
- a too-long line gets ``line too long`` after the replies before it, then the connection
  is closed;
- a connection beyond the pod's ``--max-connections`` gets
  ``V1|0|ERR|UNAVAILABLE|too many connections ...`` and is closed (a client may retry, or go
  to another pod);
- a user over a client quota (adapter/quotas.py; with none set, one attribute check per
  slice) has its connection muted for the throttle time: PRODUCE lines are counted as their
  slice starts (the lines after the one that went over wait for the mute to end), CONSUME
  replies once ready; while some request_percentage is set, the time the connection holds
  the event loop starting a slice and making its replies is counted against it once the
  slice is answered (over it, muted as above; the lines' waits on Redis are not counted,
  nor what a command's own task does between them, nor anything before AUTH succeeds);
- a handler bug closes only this connection;
- a Kafka client on the V1 port (its first bytes are a Kafka request frame, not a line:
  ``protocol.classify_first_bytes``) is closed at once, with a log line naming the Kafka
  port (once a minute per host: clients reconnect at once): an answer in V1 would only be
  misread as a frame size.
"""

from __future__ import annotations

import asyncio
import logging
import time

from adapter.auth import Authenticator
from adapter.backpressure import AppendBudget
from adapter.limits import ConnectionSlots
from adapter.quotas import NS_TO_PERCENT, QuotaManager
from adapter.served import TIMER_SLACK_S, ServedConnection
from adapter.v1 import answer, protocol
from adapter.v1.auth_gate import AuthGate
from adapter.v1.handlers import Context, Handler
from mapping.core.errors import BAD_REQUEST, UNAVAILABLE
from mapping.security.quotas import (
    ANONYMOUS_USER,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)

log = logging.getLogger(__name__)

# Lines answered together at most; their replies are sent before the next ones start.
MAX_LINES_AT_ONCE = 1024
REPLY_BYTES_AT_ONCE = 1 << 20
# After "line too long": what the client still sends is read and dropped for this long (at
# most DROP_BYTES): closing a socket with unread input resets it, which could destroy the
# error reply before the client reads it.
LINGER_S = 2.0
DROP_BYTES = 16 << 20


# Commands whose replies carry records: counted against consumer_byte_rate.
CONSUMING = (b"CONSUME", b"SHARE_ACQUIRE")


def _command(line: bytes) -> bytes:
    """The command of a request line as sent (b"" when it has none), without parsing it."""
    second = line.find(b"|", line.find(b"|") + 1)
    third = line.find(b"|", second + 1) if second >= 0 else -1
    return line[second + 1 : third].strip().upper() if third >= 0 else b""


def _address(name: object) -> tuple[str, str]:
    """(host, port) of a socket name (``?`` where the socket has none)."""
    if isinstance(name, tuple) and len(name) >= 2:
        return str(name[0]), str(name[1])
    return "?", "?"


class Flow:
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


class _RefusalLog:
    """When to log a refused Kafka client: once a minute per host, with the count of the
    refusals in between (librdkafka reconnects at once: ~20 connections a second)."""

    EVERY_S = 60.0
    MAX_HOSTS = 1024

    def __init__(self) -> None:
        self._hosts: dict[str, tuple[float, int]] = {}  # host -> (last logged, since)

    def count(self, host: str) -> int | None:
        """None: do not log this one; else how many went unlogged before it."""
        now = time.monotonic()
        last, since = self._hosts.get(host, (-self.EVERY_S, 0))
        if now - last < self.EVERY_S:
            self._hosts[host] = (last, since + 1)
            return None
        if len(self._hosts) >= self.MAX_HOSTS:
            self._hosts.clear()
        self._hosts[host] = (now, 0)
        return since


_KAFKA_REFUSALS = _RefusalLog()


class Connection(ServedConnection):
    def __init__(
        self,
        context: Context,
        table: dict[str, Handler],
        *,
        slots: ConnectionSlots | None = None,
        authenticator: Authenticator | None = None,
        budget: AppendBudget | None = None,
    ) -> None:
        settings = context.pod.settings
        super().__init__(
            slots=slots,
            idle_timeout_s=settings.idle_timeout_s,
            keepalive_s=settings.tcp_keepalive_s,
        )
        self.context = context
        self.table = table
        self.framer = protocol.LineFramer(settings.max_line_bytes)
        self.gate = AuthGate(authenticator, settings.auth_timeout_s, self.loop.time())
        self.flow = Flow(settings.max_in_flight)
        self.budget = budget if budget is not None else AppendBudget()
        self.share = self.budget.share(self._pump)
        self._backlog: list[bytes] = []  # lines read, not yet started
        self._backlog_bytes = 0
        self._slice: list[answer.Started] | None = None  # started, some still waiting
        self._slice_bytes = 0  # taken from the budget for the slice
        self._slice_consumes: list[int] = []  # where its CONSUME lines are (quotas on)
        self._slice_ns = -1  # the slice's time holding the loop so far; -1: not timed
        self.quotas: QuotaManager | None = getattr(context.pod, "quotas", None)
        self._held = False  # the budget refused the next slice: wait for a turn
        self._waiting = 0
        self._eof = False
        self._lingering = False  # "line too long" sent: dropping input until closed
        self._dropped = 0
        # The first bytes, until they tell V1 from a Kafka client; None once they did.
        self._first_bytes: bytes | None = b""

    # --- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and peer:  # the host ACL bindings are matched against
            self.gate.host = str(peer[0])

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        assert self.slots is not None
        refusal = protocol.format_error(
            "0", UNAVAILABLE, f"too many connections: this pod allows {self.slots.maximum}"
        )
        transport.write(refusal)  # type: ignore[attr-defined]
        transport.close()

    def _forget_requests(self) -> None:
        self.budget.forget(self.share)
        started, self._slice = self._slice, None
        if started is not None:
            answer.cancel(started)
            self.budget.give(self.share, self._slice_bytes)
        self._backlog = []
        self._backlog_bytes = 0

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            self._dropped += len(data)
            if self._dropped > DROP_BYTES:
                self.close()
            return
        self._last_activity = self.loop.time()
        if self._first_bytes is not None:
            data = self._first_read(data)
            if not data:
                return
        lines = self.framer.feed(data)
        if lines:
            self._backlog_bytes += sum(map(len, lines))
            if self._backlog:
                self._backlog += lines
            else:
                self._backlog = lines
        self._pump()

    def _first_read(self, data: bytes) -> bytes:
        """The connection's first bytes: what is V1 of them (empty until that is clear). A
        Kafka client is told off in the log and closed."""
        assert self._first_bytes is not None
        data = self._first_bytes + data
        kind = protocol.classify_first_bytes(data)
        if kind is protocol.FirstBytes.UNDECIDED:
            self._first_bytes = data
            return b""
        self._first_bytes = None
        if kind is protocol.FirstBytes.KAFKA:
            self._refuse_kafka_client(data)
            return b""
        return data

    def _refuse_kafka_client(self, data: bytes) -> None:
        settings = self.context.pod.settings
        if not settings.kafka:
            kafka = "this pod serves no Kafka (--no-kafka)"
        elif settings.kafka_advertised_listener:
            kafka = f"Kafka clients bootstrap to {settings.kafka_advertised_listener}"
        elif settings.kafka_port:
            kafka = f"Kafka clients connect to port {settings.kafka_port} (--kafka-port)"
        else:
            kafka = "Kafka clients connect to the port of --kafka-port (see 'serving Kafka')"
        assert self.transport is not None
        peer = _address(self.transport.get_extra_info("peername"))
        repeated = _KAFKA_REFUSALS.count(peer[0])
        if repeated is not None:
            log.warning(
                "a Kafka client (%s request) from %s connected to the V1 port %s: closing the "
                "connection; %s%s",
                protocol.kafka_request_name(data),
                ":".join(peer),
                _address(self.transport.get_extra_info("sockname"))[1],
                kafka,
                f" ({repeated} more from that host since the last such line)" if repeated else "",
            )
        self.close()

    def _input_ended(self) -> None:
        self._eof = True
        if self._first_bytes:  # a few bytes, then the end: V1's to answer
            data, self._first_bytes = self._first_bytes, None
            self.data_received(data)
            return
        self._pump()

    # --- answering ------------------------------------------------------------------------

    def _pump(self) -> None:
        """Start slices while none is waiting; close once all is answered after the end of
        the input (or a too-long line); pause or resume reading."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._held = False
        while (
            self._slice is None
            and self._backlog
            and self._write_stalled_at is None
            and not self._muted
        ):
            count, size = self._next_slice()
            if not self.budget.try_take(self.share, size):
                self._held = True  # resumed when the pod gives this connection its turn
                break
            consumes: list[int] = []
            began = -1
            if self.quotas is not None and self.quotas.active:  # (off: this check per slice)
                count, size, consumes = self._produced(count, size)
                if self.quotas.request_active and self.gate.open:
                    began = time.perf_counter_ns()
            lines = self._backlog[:count]
            del self._backlog[:count]
            self._backlog_bytes -= size
            started = answer.start(self.context, self.table, lines, self.gate)
            self._slice_ns = time.perf_counter_ns() - began if began >= 0 else -1
            futures = {future for future in map(answer.awaited, started) if future is not None}
            if futures:
                self._slice, self._waiting, self._slice_bytes = started, len(futures), size
                self._slice_consumes = consumes
                for future in futures:
                    future.add_done_callback(self._one_done)
                continue
            self.budget.give(self.share, size)
            if not self._reply(started, consumes):
                return
        if self._slice is None and not self._backlog:
            if self.framer.overflowed and not self._lingering:
                self._line_too_long()
                return
            if self._eof:
                self.close()
                return
        self._update_reading()

    def _next_slice(self) -> tuple[int, int]:
        """(lines, bytes) of the next slice: ``flow.lines_at_once`` lines at most, and no
        more than the connection's append bound in bytes beyond its first line."""
        backlog = self._backlog
        most = min(self.flow.lines_at_once, len(backlog))
        bound = self.budget.connection_bytes
        if not bound or self._backlog_bytes <= bound:
            if most == len(backlog):
                return most, self._backlog_bytes
            return most, sum(map(len, backlog[:most]))
        size = len(backlog[0])
        for count in range(1, most):
            if size + len(backlog[count]) > bound:
                return count, size
            size += len(backlog[count])
        return most, size

    def _produced(self, count: int, size: int) -> tuple[int, int, list[int]]:
        """The next slice's ``count`` lines (``size`` bytes) counted against the user's
        quotas as they start: each PRODUCE line's bytes against producer_byte_rate, up to
        the first that takes the user over its quota. The lines after that one wait, the
        connection muted for the throttle time, as the requests a Kafka client pipelined
        behind a throttled one. The slice's lines and bytes then, and where its CONSUME
        lines are (their replies are counted once ready)."""
        assert self.quotas is not None
        user = self.gate.user or ANONYMOUS_USER
        consumes: list[int] = []
        for index, line in enumerate(self._backlog[:count]):
            command = _command(line)
            if command == b"PRODUCE":
                wait = self.quotas.record(PRODUCER_BYTE_RATE, user, "", len(line))
                if wait > 0:
                    self._mute(wait)
                    if index + 1 < count:
                        kept = sum(map(len, self._backlog[: index + 1]))
                        self.budget.give(self.share, size - kept)
                        count, size = index + 1, kept
                    break
            elif command in CONSUMING:
                consumes.append(index)
        return count, size, consumes

    def _consumed(self, replies: list[bytes], consumes: list[int]) -> None:
        """A slice's CONSUME (and SHARE_ACQUIRE) replies counted against the user's
        consumer_byte_rate; over it, the connection is muted for the throttle time (V1
        replies have no field for it)."""
        assert self.quotas is not None
        sent = sum(len(replies[index]) for index in consumes)
        user = self.gate.user or ANONYMOUS_USER
        wait = self.quotas.record(CONSUMER_BYTE_RATE, user, "", sent)
        if wait > 0:
            self._mute(wait)

    def _requested(self, ns: int) -> None:
        """A slice's time holding the event loop counted against the user's
        request_percentage; over it, the connection is muted for the throttle time (unless
        already muted longer)."""
        assert self.quotas is not None
        user = self.gate.user or ANONYMOUS_USER
        wait = self.quotas.record(REQUEST_PERCENTAGE, user, "", ns * NS_TO_PERCENT)
        timer = self._mute_timer
        if wait > 0 and (timer is None or timer.when() < self.loop.time() + wait / 1000.0):
            self._mute(wait)

    def _one_done(self, _: asyncio.Future) -> None:
        if self._slice is None:  # the connection went away meanwhile
            return
        self._waiting -= 1
        if self._waiting:
            return
        started, self._slice = self._slice, None
        self.budget.give(self.share, self._slice_bytes)
        if self._reply(started, self._slice_consumes):
            self._pump()

    def _reply(self, started: list[answer.Started], consumes: list[int]) -> bool:
        """Write a finished slice's replies (``consumes``: where its CONSUME lines are, with
        quotas on); False when the connection was closed instead."""
        assert self.transport is not None
        began = time.perf_counter_ns() if self._slice_ns >= 0 else 0
        try:
            replies = [answer.finish(item) for item in started]
        except Exception:
            log.exception("closing a connection after an unexpected error")
            self.close()
            return False
        if consumes:
            self._consumed(replies, consumes)
        if self._slice_ns >= 0:
            self._requested(self._slice_ns + time.perf_counter_ns() - began)
            self._slice_ns = -1
        data = b"".join(replies)
        self.flow.update(len(started), len(data))
        self._last_activity = self.loop.time()
        self.transport.write(data)
        return True

    def _update_reading(self) -> None:
        bound = self.budget.connection_bytes
        self._set_reading(
            self._eof
            or self._write_stalled_at is not None
            or self._held
            or self._muted
            or len(self._backlog) >= self.flow.lines_at_once
            or bool(bound and self._backlog_bytes >= bound)
        )

    def _line_too_long(self) -> None:
        assert self.transport is not None
        self._lingering = True
        self.transport.write(protocol.format_error("0", BAD_REQUEST, "line too long"))
        if not self.transport.can_write_eof():  # TLS
            self.close()
            return
        self.transport.write_eof()
        self._reading_paused = False
        self.transport.resume_reading()
        self.loop.call_later(LINGER_S, self.close)

    # --- timers -------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        deadlines = []
        if self.idle_s is not None:
            deadlines.append(self._last_activity + self.idle_s)
            if self._write_stalled_at is not None:
                deadlines.append(self._write_stalled_at + self.idle_s)
        auth_deadline = self.gate.closes_at
        if auth_deadline is not None:
            deadlines.append(auth_deadline)
        if deadlines:
            # never sooner than a moment from now: a busy connection is looked at again later
            when = max(min(deadlines), self.loop.time() + 0.1)
            self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport is None or self.closed.done():
            return
        now = self.loop.time() + TIMER_SLACK_S  # asyncio may run a timer a little early
        stalled = self._write_stalled_at
        if self.idle_s is not None and stalled is not None and now - stalled >= self.idle_s:
            # (closing too: close() waits for the buffered replies to go out)
            log.info("closing a connection whose peer took no reply for %ss", self.idle_s)
            self.abort()
            return
        idle = stalled is None and self._slice is None and not self._backlog
        if idle and not self.transport.is_closing():
            auth_deadline = self.gate.closes_at
            idle_too_long = self.idle_s is not None and now - self._last_activity >= self.idle_s
            expired = idle_too_long or (auth_deadline is not None and now >= auth_deadline)
            if expired and not self._input_waiting():
                self.close()  # quietly, as Kafka does
                return
        self._arm_timer()
