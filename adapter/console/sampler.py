"""The console's background sampler: every ``interval_s`` it reads the deployment's totals
(mapping/operations/console_rates.py) and keeps the last ``keep`` samples, from which the
deployment page draws produce and fetch rates and a group page its lag over time. Pages
read what it kept: no page scans the deployment.

It reads on a Redis connection of its own (app.py), its reads spread over half the interval,
and the records stored (every log's length) only every ``STORED_EVERY`` samples, so that a
page never waits behind a sample."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from mapping.operations.console_rates import Sample, rates

log = logging.getLogger(__name__)
# Every how many samples the records stored are read (the first sample reads them)
STORED_EVERY = 6
# Topics a group's lag chart draws one by one (those with the most lag); the rest summed
MAX_SERIES = 8


class Sampler:
    def __init__(
        self,
        read: Callable[[bool], Coroutine[Any, Any, Sample]],
        interval_s: float = 5.0,
        keep: int = 120,
    ) -> None:
        self.read = read  # read(stored): one sample, the logs' lengths too when stored
        self.interval_s = interval_s
        self.samples: deque[Sample] = deque(maxlen=keep)
        self.taken = 0
        self.stored: int | None = None  # records stored, as the last sample that read them
        self._drawn: dict[str, str] = {}  # charts drawn since the last sample (see drawn)

    async def sample(self) -> None:
        try:
            found = await self.read(self.taken % STORED_EVERY == 0)
        except Exception:  # Redis away for a moment: the next sample tries again
            log.warning("console: a sample failed", exc_info=True)
            return
        self.taken += 1
        self.samples.append(found)
        self._drawn.clear()
        if found.stored is not None:
            self.stored = found.stored

    async def run(self) -> None:
        while True:
            started = anyio.current_time()
            await self.sample()
            await anyio.sleep(max(0.0, self.interval_s - (anyio.current_time() - started)))

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def rate_series(self) -> tuple[list[float], list[float], list[float]]:
        """(times, produced records/s, consumed records/s) between successive samples."""
        taken = list(self.samples)
        times, produced, consumed = [], [], []
        for before, after in zip(taken, taken[1:], strict=False):
            up, down = rates(before, after)
            times.append(after.at)
            produced.append(round(up, 2))
            consumed.append(round(down, 2))
        return times, produced, consumed

    def lag_series(self, group: str) -> tuple[list[float], dict[str, list[float]]]:
        """(times, topic -> the group's lag in records on it) over the samples kept: the
        ``MAX_SERIES`` - 1 topics with the most lag now, the others summed."""
        taken = list(self.samples)
        now = taken[-1].lags if taken else {}
        topics = sorted({t for s in taken for g, t in s.lags if g == group})
        topics.sort(key=lambda t: -now.get((group, t), 0))
        shown = topics if len(topics) <= MAX_SERIES else topics[: MAX_SERIES - 1]
        series = {t: [float(s.lags.get((group, t), 0)) for s in taken] for t in shown}
        others = topics[len(shown) :]
        if others:
            series[f"{len(others)} other topics"] = [
                float(sum(s.lags.get((group, t), 0) for t in others)) for s in taken
            ]
        return [s.at for s in taken], series

    def drawn(self, name: str, draw: Callable[[], str]) -> str:
        """Chart ``name`` as ``draw()`` draws it, drawn once per sample: pages shown
        between two samples reuse it."""
        if name not in self._drawn:
            self._drawn[name] = draw()
        return self._drawn[name]
