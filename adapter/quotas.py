"""The pod's client quotas: its copy of the quotas in Redis (read at start and on every change
notice), the rates it measures against them and the throttle times they give, as Kafka's
ClientQuotaManager (mapping/security/quotas.py has the rules).

With no quota set anywhere, ``active`` is false and the front doors ask nothing else: no
Redis call, no lookup per request; with no request_percentage set anywhere,
``request_active`` is false and no request is timed. The rates are this pod's own: a client
spread over several pods gets its quota on each, as a Kafka client gets its quota on each
broker.

request_percentage is measured as Kafka's ClientRequestQuotaManager measures it: each
request's handler time, as a percentage of one second (a rate in percent of one thread),
its throttle time bounded by one window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from mapping.security.quotas import (
    REQUEST_PERCENTAGE,
    Quotas,
    QuotaStore,
    Rate,
    quota_of,
    throttle_ms,
)

log = logging.getLogger(__name__)

# a request's handler time (ns) as a percentage of one second (NanosToPercentagePerSecond)
NS_TO_PERCENT = 100.0 / 1e9

# (quota key, user, client id) pairs remembered at most (all forgotten at once beyond)
MAX_REMEMBERED = 10_000

# what the metrics hear of each measured request: quota key, user, client id (the entity's
# measured names, "" for a part it has not), value (bytes; for request_percentage the
# request's time in seconds), throttle time (ms)
OnRecord = Callable[[str, str, str, float, int], None]


class QuotaManager:
    def __init__(
        self,
        store: QuotaStore | None = None,
        *,
        samples: int = 11,
        window_ms: int = 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.samples = samples
        self.window_ms = window_ms
        self.clock = clock
        self.quotas: Quotas = {}
        self.active = False  # some quota is set: measure
        self.request_active = False  # some request_percentage is set: time the requests
        self.on_record: OnRecord | None = None
        # (key, user, client id) -> (bound, measured names) or None: the precedence walked once
        self._found: dict[tuple[str, str, str], tuple[float, tuple[str, str]] | None] = {}
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._reloads: set[asyncio.Future[None]] = set()

    async def run(self, subscriber: Any) -> None:
        """Follow the quotas in Redis: subscribe to their change notices, then read them."""
        if self.store is None:
            return
        subscriber.on_reconnect(self._changed)  # notices may have been missed: read again
        await subscriber.subscribe(self.store.keys.client_quotas_changed_channel, self._changed)
        await self.load()

    async def load(self) -> None:
        assert self.store is not None
        try:
            quotas = await self.store.load()
        except Exception:  # Redis away: the reconnect reads them again
            log.warning("could not read the client quotas", exc_info=True)
            return
        self.set(quotas)

    def set(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self._found = {}
        self.active = bool(quotas)
        self.request_active = any(REQUEST_PERCENTAGE in values for values in quotas.values())
        if not quotas:
            self._rates = {}

    def _changed(self, _data: bytes | None = None) -> None:
        task = asyncio.ensure_future(self.load())
        self._reloads.add(task)
        task.add_done_callback(self._reloads.discard)

    def _find(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        wanted = (key, user, client_id)
        found = self._found.get(wanted, False)
        if found is False:
            found = quota_of(self.quotas, key, user, client_id)
            if len(self._found) >= MAX_REMEMBERED:
                self._found = {}
            self._found[wanted] = found
        return found

    def max_in_window(self, key: str, user: str, client_id: str) -> float | None:
        """The most the pair may count at once without being throttled whatever it did
        before (Kafka's getMaxValueInQuotaWindow: a Fetch asks no more bytes than that);
        None without a quota."""
        found = self._find(key, user, client_id)
        if found is None:
            return None
        return found[0] * (self.samples - 1) * self.window_ms / 1000.0

    def record(
        self, key: str, user: str, client_id: str, value: float, *, unless: int | None = None
    ) -> int:
        """Count ``value`` (bytes; for request_percentage a request's time in percent of a
        second) against quota ``key`` of the pair; the time (ms) its connection must wait, 0
        when within its quota or when it has none. ``unless``: the throttle time another
        quota gives the request; when it or this one is above 0 the value is taken back (a
        throttled Fetch sends no records: Kafka's unrecordQuotaSensor)."""
        found = self._find(key, user, client_id)
        if found is None:
            return 0
        bound, (measured_user, measured_client) = found
        rate_key = (key, measured_user, measured_client)
        rate = self._rates.get(rate_key)
        if rate is None:
            if len(self._rates) >= MAX_REMEMBERED:
                self._forget_idle()
            rate = self._rates[rate_key] = Rate(self.samples, self.window_ms)
        now_ms = self.clock() * 1000.0
        rate.record(value, now_ms)
        wait = throttle_ms(rate, bound, now_ms)
        if key == REQUEST_PERCENTAGE:
            # at most one window (ClientRequestQuotaManager's boundedThrottleTime); the
            # metrics hear its time in seconds (percent of a second / 100)
            wait = min(wait, self.window_ms)
            if self.on_record is not None:
                self.on_record(key, measured_user, measured_client, value / 100.0, wait)
            return wait
        if unless is not None and (wait > 0 or unless > 0):
            rate.record(-value, now_ms)
            value = 0.0
        if self.on_record is not None:
            self.on_record(key, measured_user, measured_client, value, wait)
        return wait

    def _forget_idle(self) -> None:
        now_ms = self.clock() * 1000.0
        self._rates = {
            k: r for k, r in self._rates.items() if r.window_size_ms(now_ms) and r.measure(now_ms)
        }
