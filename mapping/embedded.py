"""A local ``redis-server`` child process: the embedded default of ``serve`` and the test
fixtures' Redis. AOF on by default, so acknowledged records survive a restart."""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

_PR_SET_PDEATHSIG = 1
try:  # loaded up front: the child must not dlopen between fork and exec
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child before exec: ask Linux for SIGTERM when the parent goes away."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` (with SO_REUSEADDR, as redis-server does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class RedisServerError(RuntimeError):
    """redis-server is missing, exited at start or did not answer in time."""


class _PortTaken(Exception):
    """redis-server could not bind its port (or its cluster bus port)."""


_PORT_ATTEMPTS = 5


class RedisProcess:
    def __init__(
        self,
        data_dir: Path,
        port: int | None = None,
        *,
        appendonly: bool = True,
        appendfsync: str = "everysec",
        extra_args: list[str] | None = None,
        die_with_parent: bool = True,
        cluster_bus: bool = False,
    ) -> None:
        """``appendfsync``: ``everysec`` (Redis' default: a crash of the machine or a SIGKILL
        of redis-server can lose the writes of the last second or so, acknowledged or not),
        ``always`` (fsync before every reply: nothing acknowledged is lost, slower) or ``no``.
        ``die_with_parent``: on Linux the server gets SIGTERM when the process that started it
        dies, even by SIGKILL, so an embedded Redis never outlives its pod. ``cluster_bus``:
        a Redis Cluster node, its bus on a port of its own (``bus_port``; Redis' default,
        port + 10000, fails for ports above 55535)."""
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
        self.data_dir = Path(data_dir)
        # A port picked here may be taken by another process before redis-server binds it:
        # then the first start picks again (a port given by the caller is kept).
        self._ports_picked = port is None
        self.port = port or free_port()
        self.bus_port = free_port() if cluster_bus else None
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.die_with_parent = die_with_parent
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> RedisProcess:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError(
                "redis-server is not installed (apt-get install redis-server, or "
                "./tools/bootstrap.sh run)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._spawn(binary)
                self._wait_ready(timeout_s)
                return self
            except _PortTaken as taken:
                if not self._ports_picked or attempt == _PORT_ATTEMPTS - 1:
                    raise RedisServerError(str(taken)) from None
                self.port = free_port()
                self.bus_port = free_port() if self.bus_port is not None else None
        raise AssertionError("unreachable")

    def _spawn(self, binary: str) -> None:
        bus = ["--cluster-port", str(self.bus_port)] if self.bus_port is not None else []
        command = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", "redis.log",
            *bus,
            *self.extra_args,
        ]  # fmt: skip
        preexec = _die_with_parent if self.die_with_parent and sys.platform == "linux" else None
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=preexec
        )

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = (self.data_dir / "redis.log").read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        # A read timeout too (whoever took the port may accept and never answer), and no
        # retries: redis-py's default turns one such PING into ~9 s.
        client = redis.Redis(
            port=self.port,
            socket_connect_timeout=0.5,
            socket_timeout=0.5,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    stderr = self.process.stderr.read() if self.process.stderr else b""
                    log = self._log_tail()
                    self.process = None
                    message = f"redis-server on port {self.port} exited: {stderr!r} {log}"
                    if "Address already in use" in log:
                        raise _PortTaken(message)
                    raise RedisServerError(message)
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
                    pass
                if time.monotonic() > deadline:
                    raise RedisServerError(f"redis-server on port {self.port} did not start")
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """Terminate gracefully (SIGTERM: Redis flushes its AOF)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: what a crash looks like."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def restart(self) -> RedisProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
