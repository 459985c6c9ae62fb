"""One Kafka client connection: an ``asyncio.Protocol`` thin around the sans-I/O core.

Frames are cut by framing.FrameDecoder and parsed by protocol.parse_request in the read
callback; each request's handler starts at once (a client may pipeline), and responses are
written strictly in request order, as Kafka requires. At most ``max_in_flight`` requests
are open per connection; the frames of one read beyond that wait, and reading pauses until
they started, so a client that pipelines without reading holds at most that many open
requests and one read of frames (each bounded by ``--kafka-max-request-bytes``). While the
client takes no answers (``pause_writing``) nothing new starts and nothing more is read;
one that takes none for ``--idle-timeout-s`` is cut off.

Produce requests also count against the pod's append budget (adapter/backpressure.py): one
that would pass the connection's or the pod's bound of bytes in flight waits unstarted,
reading pauses, and it starts when its appends complete or the pod gives the connection
its turn.

A frame above the size limit, a frame too short for a header or an unknown API key closes
the connection (what was answered before still goes out), as Kafka does. A request its API
module fails on gets INVALID_REQUEST in that API's response, and the connection goes on.
Same limits as V1: the pod's connection slots, idle timeout, TCP keepalive, and the SIGTERM
drain (answer what was read, then close). Every request meets the connection's SASL gate
(sasl.SaslGate, as V1's requests meet its AuthGate) before the handler table: the gate
answers SaslHandshake and SaslAuthenticate itself, and with authentication on they must
succeed before anything but ApiVersions/SaslHandshake/SaslAuthenticate runs (else the
connection closes), within ``--auth-timeout-s`` of connecting. After a SaslHandshake v0 the
frames are raw SASL tokens until the exchange is over: the gate answers them with raw frames.

Client quotas (adapter/quotas.py): Produce bytes count against producer_byte_rate as the
request starts, Fetch records against consumer_byte_rate once read, and, while some
request_percentage is set, each request's handler time against it (the time its steps hold
the event loop, its waits left out), as Kafka's request handler time; not counted, as in
Kafka: what the SASL gate answers, anything before authentication, Produce with acks=0.
Over a quota the connection is muted for the longest throttle time, which every response
carries in throttle_time_ms; a throttled Fetch is answered without its partitions
(fetch.throttled), as Kafka does, and its records come with the next Fetch. A ShareFetch's
records count against consumer_byte_rate too, but a throttled one keeps them: they are
acquired for its member (dropped, they would stay locked until their lock ran out).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from functools import partial
from typing import Any

from adapter.auth import Authenticator
from adapter.backpressure import AppendBudget
from adapter.kafka import errors, fetch, protocol
from adapter.kafka.apis import Handler
from adapter.kafka.fetch_ahead import Reader
from adapter.kafka.framing import FrameDecoder, FrameTooLarge
from adapter.kafka.sasl import SaslGate
from adapter.kafka.versions import FETCH, PRODUCE, SASL_AUTHENTICATE, SHARE_FETCH
from adapter.limits import ConnectionSlots
from adapter.quotas import NS_TO_PERCENT, QuotaManager
from adapter.served import TIMER_SLACK_S, ServedConnection
from mapping.security.quotas import (
    ANONYMOUS_USER,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)

log = logging.getLogger(__name__)

# One open request: its future (the handler's task) or its ready bytes; when it started.
_Open = tuple[protocol.Request, "asyncio.Future[Any] | bytes", float]


# the requests counted against byte-rate quotas
_MEASURED = (PRODUCE, FETCH, SHARE_FETCH)


def _append_bytes(frame: bytes) -> int:
    """The bytes ``frame`` counts against the append budget: its size for a Produce request
    (API key 0, the frame's first two bytes), 0 for any other request."""
    return len(frame) if frame[:2] == b"\x00\x00" else 0


class _Held:
    """Awaits a handler's coroutine and adds up the time its steps hold the event loop
    (``ns``): its waits on Redis or for a long poll are not the pod's work."""

    __slots__ = ("coro", "ns")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.coro = coro
        self.ns = 0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        clock = time.perf_counter_ns
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            start = clock()
            try:
                step = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as stop:
                self.ns += clock() - start
                return stop.value
            except BaseException:
                self.ns += clock() - start
                raise
            self.ns += clock() - start
            sent, thrown = None, None
            try:
                sent = yield step
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # (a cancellation too) goes to the handler
                thrown = exc


def _failure_response(request: protocol.Request) -> bytes | None:
    """The answer to a request its handler failed on: INVALID_REQUEST in the API's
    response; b"" for none at all (Produce with acks=0); None when none can be built."""
    if request.api.key == PRODUCE.key and getattr(request.body, "acks", 1) == 0:
        return b""
    request.error = errors.INVALID_REQUEST
    return protocol.error_response(request)


class KafkaConnection(ServedConnection):
    def __init__(
        self,
        context: Any,
        handlers: dict[int, Handler],
        *,
        max_request_bytes: int,
        max_in_flight: int = 100,
        idle_timeout_s: float = 0.0,
        keepalive_s: int = 0,
        slots: ConnectionSlots | None = None,
        on_answer: Callable[[str, float], None] | None = None,
        authenticator: Authenticator | None = None,
        auth_timeout_s: float = 0.0,
        max_reauth_ms: int = 0,
        on_sasl: Callable[[str, str], None] | None = None,
        budget: AppendBudget | None = None,
    ) -> None:
        super().__init__(slots=slots, idle_timeout_s=idle_timeout_s, keepalive_s=keepalive_s)
        self.budget = budget if budget is not None else AppendBudget()
        self.share = self.budget.share(self._pump)
        self.context = context
        self.handlers = handlers
        self.decoder = FrameDecoder(max_request_bytes)
        self.max_in_flight = max(1, max_in_flight)
        self.on_answer = on_answer
        self._open: deque[_Open] = deque()
        self._frames: deque[bytes] = deque()  # read, not started yet
        self._pumping = False
        self._held = False  # the append budget refused the next frame: wait to be resumed
        self._stopping = False  # no more requests: close once the open ones are answered
        self.gate = SaslGate(authenticator, max_reauth_ms, on_sasl)
        self._authenticating = False  # a SASL request is being decided: start nothing else
        self._auth_timeout_s = auth_timeout_s
        self._auth_timer: asyncio.TimerHandle | None = None
        self.client_host = ""  # "/<peer address>", set once connected
        self.reads_ahead = Reader()  # whether this client takes Fetch's reads ahead
        pod = getattr(context, "pod", None)
        self.quotas: QuotaManager | None = getattr(pod, "quotas", None)

    # --- asyncio callbacks ----------------------------------------------------------------

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        assert self.slots is not None
        log.info("refusing a Kafka connection: %d open", self.slots.active)
        transport.close()  # Kafka has no error to send before a request

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        # Kafka's form (InetAddress.toString): DescribeGroups and ConsumerGroupDescribe show it
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""
        if self._has_slot or self.slots is None:
            if self.gate.required and self._auth_timeout_s > 0:
                self._auth_timer = self.loop.call_later(self._auth_timeout_s, self._on_auth_timeout)

    def _forget_requests(self) -> None:
        self.budget.forget(self.share)  # (cancelled Produce tasks give their bytes back)
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        for _, pending, _ in self._open:
            if isinstance(pending, asyncio.Future):
                pending.cancel()
        self._open.clear()
        self._frames.clear()

    def data_received(self, data: bytes) -> None:
        if self._stopping:
            return
        self._last_activity = self.loop.time()
        try:
            self._frames.extend(self.decoder.feed(data))
        except FrameTooLarge as exc:
            log.info("closing a Kafka connection: %s", exc)
            self._input_ended()
            return
        self._pump()

    def _pump(self) -> None:
        """Start the frames read so far, at most ``max_in_flight`` open at once (one read
        may hold thousands of small requests: the rest wait here, and reading pauses), and
        Produce requests only as the append budget allows."""
        if self._pumping:
            return
        self._pumping = True
        self._held = False
        try:
            while (
                self._frames
                and len(self._open) < self.max_in_flight
                and self._write_stalled_at is None  # the client reads no answers: wait
                and not self._authenticating
                and not self._muted
            ):
                frame = self._frames[0]
                if self.gate.raw_tokens:  # after SaslHandshake v0: a SASL token
                    self._frames.popleft()
                    self._start_raw_token(frame)
                    continue
                size = _append_bytes(frame)
                if size and not self.budget.try_take(self.share, size):
                    self._held = True  # resumed by its own answers or by its turn
                    break
                self._frames.popleft()
                try:
                    request = protocol.parse_request(frame)
                    request.client_host = self.client_host
                    request.reads_ahead = self.reads_ahead
                    if self.gate.user is not None:
                        request.principal = f"User:{self.gate.user}"
                except protocol.CloseConnection as exc:
                    log.info("closing a Kafka connection: %s", exc)
                    self._appended(size)
                    self._frames.clear()
                    self._stopping = True
                    break
                self._start(request, size)
        finally:
            self._pumping = False
        self._flush()

    def _appended(self, size: int, _: object = None) -> None:
        """A Produce request of ``size`` bytes was answered (or went away)."""
        if size:
            self.budget.give(self.share, size)

    # --- answering ------------------------------------------------------------------------

    def _start(self, request: protocol.Request, size: int = 0) -> None:
        """Start answering ``request``; ``size``: its bytes taken from the append budget,
        given back once it is answered."""
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "kafka request %s v%d from %s", request.api.name, request.version, request.client_id
            )
        if not self.gate.admits(request.api.key, self.loop.time()):
            if self.gate.user is None:
                log.info("closing a Kafka connection: %s before authentication", request.api.name)
            else:
                self.gate.session_expired()
                log.info("closing a Kafka connection: %s after its session ended", request.api.name)
            self._appended(size)
            self._frames.clear()
            self._stopping = True
            return
        if request.error:
            self._appended(size)
            reply = protocol.error_response(request)
            if reply is None:  # nothing can be answered: close after the earlier answers
                self._frames.clear()
                self._stopping = True
                return
            self._open.append((request, reply, 0.0))
            return
        gate_answer = self.gate.answer(request)
        if gate_answer is not None:  # SaslHandshake, SaslAuthenticate
            task = asyncio.ensure_future(gate_answer)
            self._authenticating = True
            task.add_done_callback(self._on_authentication_done)  # before _on_done's flush
        else:
            answer = self.handlers[request.api.key](self.context, request)
            quotas = self.quotas
            if quotas is not None and quotas.active:
                timed = quotas.request_active and self._timed(request)
                if timed or request.api in _MEASURED:
                    answer = self._measured(request, answer, self._produced(request, size), timed)
            task = self.loop.create_task(answer)
        if size:  # before _on_done: its flush may start this connection's next Produce
            task.add_done_callback(partial(self._appended, size))
        self._open.append((request, task, self.loop.time()))
        task.add_done_callback(self._on_done)

    def _timed(self, request: protocol.Request) -> bool:
        """Whether the request's time counts against request_percentage: not before
        authentication (Kafka's authenticator answers those), nor a Produce with acks=0
        (answered by none, exempt in Kafka)."""
        if self.gate.required and self.gate.user is None:
            return False
        return request.api is not PRODUCE or getattr(request.body, "acks", 1) != 0

    def _produced(self, request: protocol.Request, size: int) -> int:
        """A Produce request counted against the client's producer_byte_rate as it starts
        (Kafka answers a connection's requests one at a time: over the quota, the requests
        the client pipelined behind this one wait, muted); its throttle time (ms)."""
        if request.api is not PRODUCE:
            return 0
        assert self.quotas is not None
        user = self.gate.user or ANONYMOUS_USER
        wait = self.quotas.record(PRODUCER_BYTE_RATE, user, request.client_id or "", size)
        if wait > 0:
            self._mute(wait)
        return wait

    async def _measured(
        self, request: protocol.Request, answer: Any, wait: int, timed: bool
    ) -> Any:
        """``answer`` with its throttle time, the longest of its quotas' (as Kafka's): a
        Produce's bytes, counted as it started; its handler time against request_percentage
        when ``timed``; a Fetch's records against consumer_byte_rate once read, as Kafka's
        ClientQuotaManager counts them. Over a quota, the response carries the throttle time
        and the connection is muted that long (KIP-219); a throttled Fetch goes without its
        records (kept for the next one) and they are not counted."""
        quotas = self.quotas
        assert quotas is not None
        user = self.gate.user or ANONYMOUS_USER
        client_id = request.client_id or ""
        if request.api is FETCH:
            most = quotas.max_in_window(CONSUMER_BYTE_RATE, user, client_id)
            body = request.body
            if most is not None and not 0 < body.max_bytes <= most:
                body.max_bytes = max(1, int(most))  # Kafka's bound: one window's quota
        requested = 0
        if timed:
            held = _Held(answer)
            try:
                response = await held
            except Exception:  # its error response is throttled too
                self._mute_for(
                    quotas.record(REQUEST_PERCENTAGE, user, client_id, held.ns * NS_TO_PERCENT)
                )
                raise
            requested = quotas.record(REQUEST_PERCENTAGE, user, client_id, held.ns * NS_TO_PERCENT)
        else:
            response = await answer
        if request.api in (FETCH, SHARE_FETCH):
            sent = sum(
                len(p.records or b"")
                for topic in getattr(response, "responses", ())
                for p in topic.partitions
            )
            wait = quotas.record(CONSUMER_BYTE_RATE, user, client_id, sent, unless=requested)
            if max(wait, requested) > 0 and isinstance(response, fetch.FetchAnswer):
                response = fetch.throttled(self.context, request, response)
            self._mute_for(max(wait, requested))
        else:
            self._mute_for(requested)  # (a Produce's own wait muted as it started)
        wait = max(wait, requested)
        if wait > 0 and response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = wait
        return response

    def _mute_for(self, wait_ms: int) -> None:
        """Mute for ``wait_ms`` unless already muted longer."""
        if wait_ms <= 0:
            return
        timer = self._mute_timer
        if timer is not None and timer.when() >= self.loop.time() + wait_ms / 1000.0:
            return
        self._mute(wait_ms)

    def _start_raw_token(self, token: bytes) -> None:
        task = asyncio.ensure_future(self.gate.raw_token(token))
        self._authenticating = True
        task.add_done_callback(self._on_authentication_done)
        # among the open requests it stands as the SaslAuthenticate it replaces (its answer:
        # the frame the gate builds, never raising)
        stand_in = protocol.Request(SASL_AUTHENTICATE, 0, 0, None, None)
        self._open.append((stand_in, task, self.loop.time()))
        task.add_done_callback(self._on_done)

    def _on_authentication_done(self, _: asyncio.Future[Any]) -> None:
        self._authenticating = False
        if self.gate.failed:  # answer it, then close (Kafka's rule)
            self._frames.clear()
            self._stopping = True
        elif self.gate.user is not None and self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None

    def _on_auth_timeout(self) -> None:
        self._auth_timer = None
        if self.gate.user is None and not self.closed.done():
            log.info("closing a Kafka connection not authenticated in %ss", self._auth_timeout_s)
            self.abort()

    def _on_done(self, _: asyncio.Future[Any]) -> None:
        self._held = False  # bytes of this connection may have been given back
        self._flush()

    def _flush(self) -> None:
        """Write every answer at the head of the queue that is ready, in request order."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        out: list[bytes] = []
        while self._open:
            request, pending, started = self._open[0]
            if isinstance(pending, bytes):
                out.append(pending)
            elif not pending.done():
                break
            else:
                try:
                    response = pending.result()
                    if isinstance(response, bytes):  # a raw SASL token's frame (or none)
                        out.append(response)
                    elif response is not None:
                        out.append(protocol.encode_response(request, response))
                    if self.on_answer is not None:
                        self.on_answer(request.api.name, self.loop.time() - started)
                except Exception:
                    # A request that decoded but that its API module could not answer (an
                    # array sent as null, a value out of any range): its API's response with
                    # INVALID_REQUEST, and the connection goes on. Only when no response
                    # can be built is the connection closed.
                    log.exception("Kafka %s v%d request failed", request.api.name, request.version)
                    reply = _failure_response(request)
                    if reply is None:
                        self._open.popleft()
                        if out:
                            transport.write(b"".join(out))
                        self.close()
                        return
                    if reply:
                        out.append(reply)
            self._open.popleft()
        if out:
            self._last_activity = self.loop.time()
            transport.write(b"".join(out))
        if (
            self._frames
            and not self._pumping
            and not self._held
            and len(self._open) < self.max_in_flight
            and self._write_stalled_at is None
            and not self._authenticating
            and not self._muted
        ):
            self._pump()
            return
        if self._stopping and not self._open and not self._frames:
            self.close()
            return
        self._update_reading()

    def _update_reading(self) -> None:
        self._set_reading(
            self._stopping
            or bool(self._frames)
            or len(self._open) >= self.max_in_flight
            or self._write_stalled_at is not None
            or self._muted
        )

    def _input_ended(self) -> None:
        """Read no more requests; close once the open ones are answered."""
        self._stopping = True
        self._flush()

    # --- timers -------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        if self.idle_s is None:
            return
        when = max(self._last_activity + self.idle_s, self.loop.time() + 0.1)
        self._timer = self.loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport is None or self.closed.done() or self.idle_s is None:
            return
        now = self.loop.time() + TIMER_SLACK_S
        stalled = self._write_stalled_at
        if stalled is not None and now - stalled >= self.idle_s:
            log.info("closing a Kafka connection whose peer took no answer for %ss", self.idle_s)
            self.abort()
            return
        if (
            not self._open
            and not self._frames
            and now - self._last_activity >= self.idle_s
            and not self._input_waiting()
        ):
            self.close()  # quietly, as Kafka does (connections.max.idle.ms)
            return
        self._arm_timer()
