"""Backpressure: a pod holds a bounded number of request bytes between its clients and
Redis, and a busy pod stops reading its clients' sockets instead of queueing without end.

Without it, a pod read whatever its producers sent: the next pipeline grew with everything
read while the last one ran, so each took Redis longer, so the next grew more, until writing
one took longer than the Redis socket timeout. The appends then failed as "not written"
though Redis went on to run them; clients retried and stored records twice, out of order,
and the pod's memory grew to the size of the queue (issue 20).

``AppendBudget`` counts the bytes of the requests being answered: Kafka Produce requests
(the frame) and V1 slices of request lines (adapter/v1/connection.py), from the moment they
start until they are answered. A connection may start one more request while

- its own count is below ``--max-connection-append-bytes`` (or it has none in flight: one
  request is always admitted, whatever its size), and
- the pod's count is below ``--max-append-bytes`` and no other connection is waiting.

Otherwise it waits: its unstarted requests stay where they are, the connection stops reading
its socket (TCP then stops the client), and a connection the pod bound held back joins a
FIFO queue. As appends complete, the queue is served in turns, by deficit round robin: the
connection at the head of the queue gets QUANTUM_BYTES of credit and starts requests while
they fit in its credit, then goes to the back if it has more (keeping what is left of its
credit). So every connection of a saturated pod gets the same bytes through, whatever the
size of its requests (issue 20's unequal service: four producers on one pod had 43 k, 4.4 k,
4.8 k and 4.3 k records/s; turns of one request each still favoured the producers whose
requests happened to be larger).

All of it is O(1) per request: a few counters, flags and a deque (a request larger than the
quantum waits a turn per quantum).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


# Credit a waiting connection gets per turn: the largest Produce request of common clients
# (librdkafka's message.max.bytes, Java's max.request.size), so a turn starts one at least.
QUANTUM_BYTES = 1 << 20


class Share:
    """One connection's part of the budget: what it has in flight and how it is resumed."""

    __slots__ = ("in_flight", "resume", "queued", "turn", "credit", "closed")

    def __init__(self, resume: Callable[[], None]) -> None:
        self.in_flight = 0
        self.resume = resume  # starts what the connection can (its ``_pump``)
        self.queued = False  # waiting in the pod's queue for a turn
        self.turn = False  # its turn: may start requests within its credit
        self.credit = 0  # bytes it may still start in turns (deficit round robin)
        self.closed = False


class AppendBudget:
    """The pod's bound on request bytes in flight, with turns for waiting connections."""

    def __init__(
        self, pod_bytes: int = 0, connection_bytes: int = 0, quantum: int = QUANTUM_BYTES
    ) -> None:
        self.pod_bytes = pod_bytes  # 0: no pod bound
        self.connection_bytes = connection_bytes  # 0: no connection bound
        self.quantum = quantum
        self.in_flight = 0
        self.peak = 0  # highest in_flight since the pod was last idle (see Trimmer)
        self.waiting: deque[Share] = deque()
        self._waking = False
        self.on_idle: Callable[[int], None] | None = None  # called with the peak

    def share(self, resume: Callable[[], None]) -> Share:
        return Share(resume)

    def try_take(self, share: Share, size: int) -> bool:
        """Count ``size`` bytes of a request ``share``'s connection wants to start; False:
        it must wait (``share.resume`` is called when its turn comes, unless it waits for
        its own requests, which resume it as they complete)."""
        if share.in_flight and self.connection_bytes:
            if share.in_flight + size > self.connection_bytes:
                return False
        if share.turn:
            if size > share.credit:  # the rest of its turn is too small: wait for the next
                share.turn = False
                self._enqueue(share)
                return False
            share.credit -= size
        elif self.waiting or self._over(size):
            self._enqueue(share)
            return False
        share.in_flight += size
        self.in_flight += size
        if self.in_flight > self.peak:
            self.peak = self.in_flight
        return True

    def give(self, share: Share, size: int) -> None:
        """The request of ``size`` bytes was answered (or abandoned): let others start."""
        share.in_flight -= size
        self.in_flight -= size
        if self.waiting and not self._waking:
            self._wake()
        if not self.in_flight and self.on_idle is not None:
            peak, self.peak = self.peak, 0
            self.on_idle(peak)

    def forget(self, share: Share) -> None:
        """The connection closed: it is skipped when its turn comes."""
        share.closed = True

    def _over(self, size: int) -> bool:
        return bool(self.pod_bytes and self.in_flight and self.in_flight + size > self.pod_bytes)

    def _enqueue(self, share: Share) -> None:
        if not share.queued:
            share.queued = True
            self.waiting.append(share)

    def _wake(self) -> None:
        """Give turns, in order, while the pod is below its bound. A connection left with
        nothing to start (or held by its own bound) drops its credit, as in deficit round
        robin: credit is only saved up while waiting."""
        self._waking = True
        try:
            while self.waiting and not (self.pod_bytes and self.in_flight >= self.pod_bytes):
                share = self.waiting.popleft()
                share.queued = False
                if share.closed:
                    continue
                share.credit += self.quantum
                share.turn = True
                share.resume()
                share.turn = False
                if not share.queued:
                    share.credit = 0
        finally:
            self._waking = False


# After a burst of at least this many bytes in flight, the pod gives freed memory back to the
# OS once it is idle (see Trimmer).
TRIM_AFTER_BYTES = 4 << 20
TRIM_DELAY_S = 1.0


def _load_malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        return libc.malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


class Trimmer:
    """Gives memory back after a load burst. The bytes of a burst's requests, records and
    replies are freed when it ends, but glibc keeps the freed heap in the process (RSS
    stayed at 378-762 MB after a burst, issue 20): once the pod has been idle for
    TRIM_DELAY_S after a burst, a full collection and ``malloc_trim(0)`` return it. Scheduled
    by the budget going idle, never polled."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: AppendBudget) -> None:
        self.loop = loop
        self.budget = budget
        self.trims = 0
        self._malloc_trim = _load_malloc_trim()
        self._timer: asyncio.TimerHandle | None = None
        budget.on_idle = self._on_idle

    def _on_idle(self, peak: int) -> None:
        if peak >= TRIM_AFTER_BYTES and self._timer is None:
            self._timer = self.loop.call_later(TRIM_DELAY_S, self._trim)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _trim(self) -> None:
        self._timer = None
        if self.budget.in_flight:  # busy again: the next idle moment schedules it
            self.budget.peak = max(self.budget.peak, TRIM_AFTER_BYTES)
            return
        gc.collect()
        if self._malloc_trim is not None:
            self._malloc_trim(0)
        self.trims += 1
        log.debug("gave memory back after a burst")
