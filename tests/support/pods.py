"""The one pod launcher: ``python -m adapter serve`` as a child process on free ports, for
the tests and the benchmarks alike."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from adapter.client import Client
from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.procfs import children, cmdline, listening
from tests.support.waiting import wait_until

# Single-replica topics: the hw follows every produce, so records are visible at once
# (replication has its own tests).
RF1 = ("--default-replication-factor", "1", "--default-min-insync-replicas", "1")
LOG_DIR = Path(os.environ.get("ADAPTER_TEST_LOGS", "/tmp/adapter-test-logs"))
# Starts of a pod that lost a race for a port it picked (another process bound it between
# the pick and the pod's listen) before it gives up.
PORT_ATTEMPTS = 5
# What `adapter.sockets.ListenError` says when a listener's port is taken.
_PORT_TAKEN = re.compile(r"cannot listen for \w+ on \S+ \((--[\w-]+) \d+\): the port is in use")


def plain_client(port: int) -> Client:
    """A V1 client that does not AUTH: a pod's ``connect`` where its users must log in (the
    start check takes any answer, a refusal too)."""
    return Client("127.0.0.1", port, timeout=10)


def stop_process(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """A child process stopped: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class Pod:
    """``python -m adapter serve`` as a child process, up once it answers a V1 PING.

    - ``redis_url``: its ``--redis-url``; None when ``args`` name the Redis (sentinels);
    - ``port``, ``kafka_port``: V1 and Kafka ports, free ones unless given (a ``kafka_port``
      of 0 lets the pod pick its own);
    - ``connect``: how a client reaches it (TLS, AUTH): it is up once such a client gets any
      V1 answer to PING (``AUTH_REQUIRED`` counts: the pod answered);
    - ``workers``: ``--workers N``; up once every worker listens;
    - ``log_dir``: its output goes to ``pod-<port>.log`` there (appended); None: its stdout
      is dropped and its log (stderr) goes to this process's stderr (the benchmarks);
    - ``metrics``: serve Prometheus metrics on a free ``metrics_port`` of its own.

    Ports it picks come from ``free_port`` (never one given out before in this run); a start
    that finds one of them taken all the same starts again on new ones (``start``).
    """

    def __init__(
        self,
        redis_url: str | None,
        *args: str,
        port: int | None = None,
        kafka_port: int | None = None,
        connect: Callable[[int], Client] | None = None,
        workers: int = 1,
        log_dir: Path | None = LOG_DIR,
        metrics: bool = False,
    ) -> None:
        self.redis_url = redis_url
        self.args = list(args)
        # the options whose port this pod picked: the ones a lost race lets it pick again
        self.picked: set[str] = set()
        if not port:
            self.picked.add("--port")
        if kafka_port is None:
            self.picked.add("--kafka-port")
        if metrics:
            self.picked.add("--metrics-port")
        self.port = port or free_port()
        self.kafka_port = free_port() if kafka_port is None else kafka_port
        self.metrics_port: int | None = free_port() if metrics else None
        self.connect = connect
        self.workers = workers
        self.log_dir = log_dir
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    def start(self, timeout: float = 20.0) -> Pod:
        """Start it and wait until it answers (a pod that never does is stopped again). A
        pod that exits because a port it picked was taken meanwhile is started again on new
        ports (up to ``PORT_ATTEMPTS`` starts): ``port``, ``kafka_port`` and
        ``metrics_port`` are read after the start."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            log_start = self._spawn()
            try:
                wait_until(self._answers, timeout=timeout)
                if self.workers > 1:  # every worker listening first, or one takes every one
                    wait_until(self._every_worker_listens, timeout=timeout)
                return self
            except BaseException:
                self.stop()
                if attempt == PORT_ATTEMPTS or not self._lost_a_port(log_start):
                    raise
            self._pick_ports_again()
        raise AssertionError("unreachable")

    def _spawn(self) -> int:
        """Start the process; where this start's part of its log begins."""
        command = [
            sys.executable, "-m", "adapter", "serve",
            *(("--redis-url", self.redis_url) if self.redis_url is not None else ()),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--kafka-port", str(self.kafka_port),
            *(("--metrics-port", str(self.metrics_port)) if self.metrics_port else ()),
            *self.args,
            *(("--workers", str(self.workers)) if self.workers > 1 else ()),
        ]  # fmt: skip
        if self.log_dir is None:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
            return 0
        self.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.log_dir / f"pod-{self.port}.log"
        # A restart of this pod appends to its log; a first start on this port begins it anew
        # (a log left by another run's pod on the same port is not this one's).
        mode = "ab" if path == self.log_path else "wb"
        self.log_path = path
        with self.log_path.open(mode) as log:
            log_start = log.tell()
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return log_start

    def _lost_a_port(self, log_start: int) -> bool:
        """The pod exited because a port it picked was taken (its log says so)."""
        if self.process is None or self.process.returncode in (None, 0):
            return False
        if self.log_path is None or not self.log_path.exists():
            return False
        this_start = self.log_path.read_bytes()[log_start:].decode(errors="replace")
        taken = set(_PORT_TAKEN.findall(this_start))
        return bool(taken) and taken <= self.picked

    def _pick_ports_again(self) -> None:
        if "--port" in self.picked:
            self.port = free_port()
        if "--kafka-port" in self.picked:
            self.kafka_port = free_port()
        if "--metrics-port" in self.picked:
            self.metrics_port = free_port()

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"pod exited with {self.process.returncode}: {self.log()}")
        try:
            if self.connect is None:
                with Client("127.0.0.1", self.port, timeout=2) as client:
                    return client.ping() == "pong"
            with self.connect(self.port) as client:
                return client.request("PING").correlation_id != ""
        except OSError:  # (ssl.SSLError included)
            return False

    def _every_worker_listens(self) -> bool:
        pids = self.pids()
        return len(pids) == self.workers and all(listening(pid, self.port) for pid in pids)

    def pids(self) -> list[int]:
        """The serving processes: the pod, or its workers under ``--workers``."""
        assert self.process is not None
        if self.workers == 1:
            return [self.process.pid]
        return [
            pid
            for pid in children(self.process.pid)
            if b"spawn_main" in cmdline(pid)  # not multiprocessing's resource tracker
        ]

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    @property
    def bootstrap(self) -> str:
        """Kafka clients' ``bootstrap.servers`` for this pod."""
        return f"127.0.0.1:{self.kafka_port}"

    def client(self, timeout: float = 30.0) -> Client:
        if self.connect is not None:
            return self.connect(self.port)
        return Client("127.0.0.1", self.port, timeout=timeout)

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        stop_process(self.process, timeout)


def start_all(pods: Sequence[Pod], timeout: float = 20.0) -> None:
    """Start ``pods`` in order; when one fails, stop the ones already started before raising:
    a fixture that fails half-way leaves no pod running."""
    started: list[Pod] = []
    try:
        for pod in pods:
            pod.start(timeout)
            started.append(pod)
    except BaseException:
        for pod in reversed(started):
            pod.stop()
        raise


def scrape_metrics(port: int) -> dict[tuple[str, tuple], float]:
    """Every sample of a pod's Prometheus endpoint on ``port``: (name, sorted labels) ->
    value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples
