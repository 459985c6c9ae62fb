"""Load processes that start together: each sets up (connects, joins its group), says it is
ready, waits for the word, works, and reports what it did and the CPU it used; meanwhile
this process samples the CPU of the pods, the Redis nodes and the machine, and reads it
over the window the reports span."""

from __future__ import annotations

import multiprocessing
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.procfs import cpu_seconds, host_cpu_seconds

CONTEXT = multiprocessing.get_context("spawn")


@dataclass
class Report:
    """One load process's work: ``records`` between ``started`` and ``ended`` (both
    ``time.monotonic()``, one clock for every process of the machine), the CPU seconds it
    used over ``wall_s`` from the word to its end."""

    records: int = 0
    started: float = 0.0
    ended: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    errors: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Clock:
    """A load process's CPU and wall clocks from the word on."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.cpu = time.process_time()  # every thread of the process (librdkafka's too)

    def report(self, records: int, started: float | None = None, ended: float | None = None,
               **kwargs: Any) -> Report:  # fmt: skip
        now = time.monotonic()
        return Report(records, self.wall if started is None else started,
                      now if ended is None else ended, time.process_time() - self.cpu,
                      now - self.wall, **kwargs)  # fmt: skip


@dataclass
class Outcome:
    reports: list[Report]
    seconds: float  # the work's window: the earliest start reported to the latest end
    # "pods", "redis", "loaders": each process's share of a core; "host": the machine's busy
    # share of all its cores
    cpu: dict[str, list[float]]
    # what ``probe`` read at the word and after the last report (run's docstring)
    probed: tuple[Any, Any] | None = None

    @property
    def records(self) -> int:
        return sum(r.records for r in self.reports)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.reports)

    @property
    def note(self) -> str:
        return next((r.note for r in self.reports if r.note), "")

    @property
    def _working(self) -> list[Report]:
        """The reports of the processes that did some work (they make the window)."""
        return [r for r in self.reports if r.records]

    @property
    def spans(self) -> list[list[float]]:
        """Each working process's [start, end] in seconds from the window's start: a row
        whose window one late starter or straggler stretched shows it here."""
        busy = self._working
        if not busy:
            return []
        origin = min(r.started for r in busy)
        return [[round(r.started - origin, 3), round(r.ended - origin, 3)] for r in busy]

    @property
    def rate(self) -> float:
        """Records per second from the first process's start to the last one's end."""
        busy = self._working
        if not busy:
            return 0.0
        span = max(r.ended for r in busy) - min(r.started for r in busy)
        return self.records / span if span > 0 else 0.0


def _entry(target: Callable[..., Report], args: tuple, ready: Any, go: Any, out: Any) -> None:
    """A load process: ``target(*args, ready, go)`` returns its report; a failure is
    reported too (the parent never waits for a process that died)."""
    try:
        report = target(*args, ready, go)
    except Exception as exc:
        report = Report(errors=1, note=f"{exc!r} {traceback.format_exc(limit=3)[-600:]}")
    ready.set()
    out.put(report)


class Sampler:
    """The CPU seconds of some processes and of the machine, every ``period`` seconds in a
    thread, so the usage over any window inside the sampling can be read afterwards."""

    def __init__(self, pids: list[int], period: float = 0.02) -> None:
        self.pids = pids
        self.period = period
        self.samples: list[tuple[float, list[float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        values = [*host_cpu_seconds(), *(cpu_seconds(pid) for pid in self.pids)]
        self.samples.append((time.monotonic(), values))

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def __enter__(self) -> Sampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def usage(self, start: float, end: float) -> tuple[float, list[float]]:
        """(the machine's busy share of all cores, each pid's share of one core) from the
        last sample at or before ``start`` to the first at or after ``end``."""
        first = max((s for s in self.samples if s[0] <= start), default=self.samples[0])
        last = min((s for s in self.samples if s[0] >= end), default=self.samples[-1])
        seconds = last[0] - first[0]
        busy, all_cores, *used = [b - a for a, b in zip(first[1], last[1], strict=True)]
        host = busy / all_cores if all_cores else 0.0
        return host, [u / seconds if seconds > 0 else 0.0 for u in used]


def run(
    target: Callable[..., Report],
    arg_sets: list[tuple],
    watched: dict[str, list[int]],
    timeout_s: float,
    settled: Callable[[], bool] | None = None,
    probe: Callable[[], Any] | None = None,
) -> Outcome:
    """One process per ``arg_sets`` entry running ``target``; the word goes once all are
    ready (and ``settled()`` says so, e.g. a group has its assignment); ``watched`` names
    the pids whose CPU is read, by role, over the work's window: from the earliest start
    the reports give to their latest end. ``probe`` (Redis' command statistics, say) is
    called just before the word and once every report is in."""
    out = CONTEXT.Queue()
    go = CONTEXT.Event()
    readies = [CONTEXT.Event() for _ in arg_sets]
    processes = [
        CONTEXT.Process(target=_entry, args=(target, args, ready, go, out), daemon=True)
        for args, ready in zip(arg_sets, readies, strict=True)
    ]
    for process in processes:
        process.start()
    try:
        deadline = time.monotonic() + 120
        for ready in readies:
            if not ready.wait(max(0.1, deadline - time.monotonic())):
                raise RuntimeError("a load process did not get ready in 120 s")
        while settled is not None and not settled():
            if time.monotonic() > deadline:
                raise RuntimeError("the load processes did not settle in 120 s")
            time.sleep(0.05)
        with Sampler([pid for group in watched.values() for pid in group]) as sampler:
            before = probe() if probe is not None else None
            began = time.monotonic()
            go.set()
            reports = [out.get(timeout=timeout_s) for _ in processes]
            finished = time.monotonic()
            probed = (before, probe()) if probe is not None else None
    finally:
        go.set()
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    worked = [r for r in reports if r.records] or reports
    start = min((r.started for r in worked if r.started), default=began)
    end = max((r.ended for r in worked if r.ended), default=finished)
    host, used = sampler.usage(start, end)
    cpu: dict[str, list[float]] = {}
    for role, group in watched.items():
        cpu[role], used = used[: len(group)], used[len(group) :]
    cpu["loaders"] = [r.cpu_s / r.wall_s if r.wall_s else 0.0 for r in reports]
    cpu["host"] = [host]
    return Outcome(reports, end - start, cpu, probed)
