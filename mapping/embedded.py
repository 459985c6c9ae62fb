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
    ) -> None:
        """``appendfsync``: ``everysec`` (Redis' default: a crash of the machine or a SIGKILL
        of redis-server can lose the writes of the last second or so, acknowledged or not),
        ``always`` (fsync before every reply: nothing acknowledged is lost, slower) or ``no``.
        ``die_with_parent``: on Linux the server gets SIGTERM when the process that started it
        dies, even by SIGKILL, so an embedded Redis never outlives its pod."""
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
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
        command = [
            binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", "redis.log",
            *self.extra_args,
        ]  # fmt: skip
        preexec = _die_with_parent if self.die_with_parent and sys.platform == "linux" else None
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=preexec
        )
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_connect_timeout=0.5)
        try:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    raise RedisServerError(f"redis-server exited: {self.process.stderr.read()!r}")
                try:
                    if client.ping():
                        return
                except (redis.ConnectionError, redis.BusyLoadingError):
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
