"""``serve --workers N``: N pod processes on one port.

Each worker is a whole pod (its own event loop, Redis connection and replicator share)
listening with ``SO_REUSEPORT``, so the kernel spreads new connections over them and one host
uses all its cores; pods are stateless, so nothing is shared but the port. This parent only
supervises: SIGTERM/SIGINT is passed on to every worker (each answers what it has read and
exits), a worker that crashes is started again, and one that exits cleanly on its own signal
is not (the others go on serving).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType

from adapter.settings import Settings

log = logging.getLogger(__name__)
RESTART_DELAY_S = 1.0
_PR_SET_PDEATHSIG = 1
# A worker that fails sooner than this after its start (bad settings, no Redis) would only
# fail again: it is not restarted.
MIN_UPTIME_S = 5.0


def _child(target: Callable[[Settings], None], settings: Settings) -> None:
    """A worker: it goes when the parent goes, even on SIGKILL (Linux), so no orphan keeps
    listening on the port."""
    if sys.platform == "linux":
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            if os.getppid() == 1:  # the parent died before the prctl
                return
    target(settings)


def _for_worker(settings: Settings, index: int) -> Settings:
    """Worker ``index``'s settings: its own metrics port (``--metrics-port`` + index), since
    every worker keeps its own counters."""
    if settings.metrics_port == 0:
        return settings
    return dataclasses.replace(settings, metrics_port=settings.metrics_port + index)


def run_workers(settings: Settings, target: Callable[[Settings], None]) -> None:
    if settings.port == 0:
        raise SystemExit("--workers needs a fixed --port (every worker listens on it)")
    context = multiprocessing.get_context("spawn")
    stopping = False

    started_at: dict[int, float] = {}

    def start(index: int) -> BaseProcess:
        process = context.Process(
            target=_child,
            args=(target, _for_worker(settings, index)),
            name=f"adapter-worker-{index}",
        )
        process.start()
        started_at[index] = time.monotonic()
        return process

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for process in workers:
            if process.is_alive() and process.pid is not None:
                process.terminate()  # SIGTERM: the worker's own graceful stop

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    workers = [start(i) for i in range(settings.workers)]
    log.info("started %d workers on %s:%d", len(workers), settings.host, settings.port)
    failed = False
    try:
        while any(p.is_alive() for p in workers):
            for index, process in enumerate(workers):
                if process.is_alive() or process.exitcode in (0, -signal.SIGTERM) or stopping:
                    continue
                if time.monotonic() - started_at[index] < MIN_UPTIME_S:
                    failed = True
                    continue
                log.error("worker %d exited with %s; starting it again", index, process.exitcode)
                time.sleep(RESTART_DELAY_S)
                workers[index] = start(index)
            time.sleep(0.2)
        failed = failed or any(p.exitcode not in (0, -signal.SIGTERM) for p in workers)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for process in workers:
            if process.is_alive():
                process.terminate()
            process.join(timeout=10)
    if failed and not stopping:
        raise SystemExit(1)
