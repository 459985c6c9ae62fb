"""A local ``redis-server`` child process: the embedded default of ``serve`` and the test
fixtures' Redis. AOF on by default, so acknowledged records survive a restart."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from mapping.connection.append_module import load_arguments

_PR_SET_PDEATHSIG = 1
try:  # loaded up front: the child must not dlopen between fork and exec
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """In the child before exec: ask Linux for SIGTERM when the parent goes away."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


_ports_given: set[int] = set()
_ports_given_lock = threading.Lock()
_PORT_PICKS = 1000


def free_port() -> int:
    """A port nothing listens on now and that this process was never given before: two
    picks (a pod's V1, Kafka and metrics ports) never collide, however many callers ask.
    Another process may still take it before it is bound: starters retry on a new one."""
    with _ports_given_lock:
        for _ in range(_PORT_PICKS):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port: int = sock.getsockname()[1]
            if port not in _ports_given:
                _ports_given.add(port)
                return port
    raise RuntimeError(f"no free port that was not given out already after {_PORT_PICKS} picks")


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` (with SO_REUSEADDR, as redis-server does)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def redis_dir_on(port: int) -> str | None:
    """The data directory (``CONFIG GET dir``) of the Redis on 127.0.0.1:``port``; None when
    nothing there answers it (not a Redis, AUTH needed, CONFIG renamed...)."""
    client = redis.Redis(
        port=port, socket_connect_timeout=0.5, socket_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        answer = client.config_get("dir")
    except redis.RedisError:
        return None
    finally:
        client.close()
    found = answer.get("dir") or answer.get(b"dir")
    return found.decode() if isinstance(found, bytes) else found


class RedisServerError(RuntimeError):
    """redis-server is missing, exited at start or did not answer in time."""


class DataDirInUse(RedisServerError):
    """Another embedded redis-server (alive, or still shutting down) owns the data directory:
    two servers appending to one AOF would merge two histories."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        self.data_dir = data_dir
        self.holder = holder
        super().__init__(f"data directory {data_dir} is in use by {holder}")


LOCK_FILE = "embedded-redis.lock"


class DataDirLock:
    """An exclusive ``flock`` on ``LOCK_FILE`` in a data directory.

    flock belongs to the open file, not to a process: the redis-server child inherits the
    descriptor, so the lock lasts while either the starter or its redis-server lives (a
    starter SIGKILLed while its server shuts down still keeps a second server off the files),
    and the kernel drops it when the last of them is gone (never a stale lock). The file says
    who holds it, for the message of a start that is refused."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``DataDirInUse``; a refused start writes nothing."""
        if self.fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            holder = _describe_holder(fd, self.path)
            os.close(fd)
            raise DataDirInUse(self.path.parent, holder) from None
        self.fd = fd

    def record(self, redis_pid: int, port: int) -> None:
        """Say in the lock file which processes hold it (read by a refused start)."""
        if self.fd is None:
            return
        holder = {
            "pid": os.getpid(),
            "command": _command_of(os.getpid()),
            "redis_pid": redis_pid,
            "port": port,
        }
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, (json.dumps(holder) + "\n").encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the lock goes once no child holds the file either
            self.fd = None


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    command = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split())
    return command if len(command) <= 200 else command[:197] + "..."  # one line of a message


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe_holder(fd: int, path: Path) -> str:
    """Who holds the lock, from what its holder wrote (the kernel's /proc/locks when it
    wrote nothing yet)."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode() or "null")
    except (OSError, ValueError):
        holder = None
    if not isinstance(holder, dict):
        pid = _lock_owner_pid(path)
        if pid is None:
            return "another process"
        return f"process {pid} ({_command_of(pid) or 'gone'})"
    pid, redis_pid, port = holder.get("pid"), holder.get("redis_pid"), holder.get("port")
    parts = [f"redis-server pid {redis_pid} on port {port}"]
    if isinstance(redis_pid, int) and not _alive(redis_pid):
        parts[0] += " (gone)"
    if isinstance(pid, int):
        started = f"started by pid {pid}"
        if holder.get("command"):
            started += f": {holder['command']}"
        if not _alive(pid):
            started += " (that process is gone, its redis-server lives on)"
        parts.append(started)
    return ", ".join(parts)


def _lock_owner_pid(path: Path) -> int | None:
    try:
        inode = os.stat(path).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            return int(fields[4])
    return None


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
        append_module: bool = True,
    ) -> None:
        """``appendfsync``: ``everysec`` (Redis' default: a crash of the machine or a SIGKILL
        of redis-server can lose the writes of the last second or so, acknowledged or not),
        ``always`` (fsync before every reply: nothing acknowledged is lost, slower) or ``no``.
        ``die_with_parent``: on Linux the server gets SIGTERM when the process that started it
        dies, even by SIGKILL, so an embedded Redis never outlives its pod. ``cluster_bus``:
        a Redis Cluster node, its bus on a port of its own (``bus_port``; Redis' default,
        port + 10000, fails for ports above 55535). ``append_module``: load the streamadapter
        module (mapping/connection/append_module.py) when the install built it."""
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
        self.append_module = append_module
        self.process: subprocess.Popen[bytes] | None = None
        self.data_dir_lock = DataDirLock(self.data_dir)

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
        self.lock_data_dir()
        try:
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
        except BaseException:
            self.unlock_data_dir()
            raise
        raise AssertionError("unreachable")

    def lock_data_dir(self) -> None:
        """Own the data directory (``start`` does it too) or raise ``DataDirInUse``, before
        anything is written there (it may be called first to check, then ``start``)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir_lock.acquire()

    def unlock_data_dir(self) -> None:
        """Let go of the directory (a redis-server still running keeps it locked)."""
        self.data_dir_lock.release()

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
            *(load_arguments(self.data_dir) if self.append_module else []),
            *self.extra_args,
        ]  # fmt: skip
        preexec = _die_with_parent if self.die_with_parent and sys.platform == "linux" else None
        lock_fd = self.data_dir_lock.fd
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=preexec,
            # the server holds the directory's lock as long as it lives (see DataDirLock)
            pass_fds=(lock_fd,) if lock_fd is not None else (),
        )
        self.data_dir_lock.record(self.process.pid, self.port)

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
        self.unlock_data_dir()

    def kill(self) -> None:
        """SIGKILL: what a crash looks like."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
        self.unlock_data_dir()

    def restart(self) -> RedisProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> RedisProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
