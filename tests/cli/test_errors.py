"""Every command fails in one line naming the cause, with a non-zero exit, never a
traceback (adapter/cli/errors.py): Redis down, a refused login, a bad URL, a busy port
(naming the listener), a missing TLS file, sentinels or a cluster out of reach. Run as a
user runs them: ``python -m adapter ...`` as a process of its own."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from mapping.connection.embedded import RedisProcess, free_port
from tests.support import ROOT

PASSWORD = "errors-Pw7"


@dataclass
class Failure:
    returncode: int
    stdout: str
    stderr: str

    @property
    def line(self) -> str:
        """The one line a command (not serve: a pod logs before) printed on failing."""
        assert self.returncode != 0, self.stdout
        assert "Traceback" not in self.stderr, self.stderr
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        assert lines[0].startswith("Error: "), lines[0]
        return lines[0]

    @property
    def last_line(self) -> str:
        """``serve``: its log lines, then the one line saying why it stopped."""
        assert self.returncode != 0, self.stdout
        assert "Traceback" not in self.stderr, self.stderr
        last = self.stderr.splitlines()[-1]
        assert last.startswith("Error: "), self.stderr
        return last


def adapter(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Failure:
    # Nothing of the run's ADAPTER_* variables; pods on no fixed Kafka or embedded Redis port.
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTER_")}
    environment |= {"ADAPTER_KAFKA_PORT": "0", "ADAPTER_EMBEDDED_REDIS_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "adapter", *args],
        cwd=ROOT,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Failure(done.returncode, done.stdout, done.stderr)


def closed_port() -> int:
    """A port nothing listens on (free_port's socket is closed again)."""
    return free_port()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def protected(own_redis: RedisProcess) -> str:
    """The URL of a Redis that requires PASSWORD."""
    client = redis.Redis(port=own_redis.port)
    client.config_set("requirepass", PASSWORD)
    client.close()
    return own_redis.url


# --- Redis out of reach ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "topics"],
        ["topic", "create", "orders"],  # through a pod's parts, on an event loop
        ["group", "delete", "billing"],
        ["user", "list"],
    ],
)
def test_redis_down_names_the_url(command: list[str]) -> None:
    port = closed_port()
    url = f"redis://127.0.0.1:{port}/0"
    line = adapter(*command, "--redis-url", url).line
    assert f"cannot reach Redis at {url}" in line
    assert f"Error 111 connecting to 127.0.0.1:{port}" in line  # ECONNREFUSED


def test_serve_with_redis_down_names_the_url() -> None:
    url = f"redis://127.0.0.1:{closed_port()}/0"
    failed = adapter("serve", "--redis-url", url, "--redis-startup-timeout-s", "1", "--port", "0")
    assert f"cannot reach Redis at {url} within 1s" in failed.last_line


def test_a_pod_out_of_reach() -> None:
    port = closed_port()
    for command in (["ping"], ["request", "PING"]):
        line = adapter(*command, "--port", str(port)).line
        assert f"no answer from 127.0.0.1:{port}" in line


def test_sentinels_out_of_reach() -> None:
    sentinels = f"127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}"
    line = adapter(
        "inspect", "topics", "--redis-sentinel", sentinels, "--redis-sentinel-master", "mymaster"
    ).line
    assert "no sentinel named the primary of Redis at redis+sentinel://" in line
    assert "mymaster" in line


def test_cluster_out_of_reach() -> None:
    url = f"redis+cluster://127.0.0.1:{closed_port()}"
    line = adapter("inspect", "topics", "--redis-url", url).line
    assert f"Redis at {url} (a cluster)" in line
    assert "Connection refused" in line


# --- logging in -----------------------------------------------------------------------------


def test_no_password(protected: str) -> None:
    line = adapter("inspect", "topics", "--redis-url", protected).line
    assert f"Redis at {protected} requires a password (NOAUTH" in line
    assert "ADAPTER_REDIS_PASSWORD" in line


def test_wrong_password(protected: str) -> None:
    wrong = {"ADAPTER_REDIS_PASSWORD": "not-it"}
    line = adapter("topic", "trim", "--redis-url", protected, env=wrong).line
    assert f"Redis at {protected} refused the login (WRONGPASS" in line
    assert "not-it" not in line  # never the password


def test_password_in_the_url_stays_out(protected: str) -> None:
    url = protected.replace("redis://", "redis://default:not-it@")
    line = adapter("inspect", "topics", "--redis-url", url).line
    assert "refused the login (WRONGPASS" in line
    assert "not-it" not in line and "default:***@" in line


def test_serve_with_a_wrong_password(protected: str) -> None:
    wrong = {"ADAPTER_REDIS_PASSWORD": "not-it"}
    failed = adapter("serve", "--redis-url", protected, "--port", "0", env=wrong)
    assert "refused the credentials" in failed.last_line


# --- bad URLs and files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:6379/0", "unknown scheme http://"),
        ("127.0.0.1:6379", "not a URL"),
        ("redis://127.0.0.1:port/0", "the port is not a number"),
        ("redis://:s3cret@127.0.0.1:99999/0", "the port is not a number"),
        ("redis:///0", "no host"),
        ("redis://127.0.0.1:6379/orders", "the database 'orders' is not a number"),
        ("redis+sentinel://127.0.0.1:26379", "ends with /NAME"),
    ],
)
def test_bad_urls(url: str, why: str) -> None:
    for command in (["inspect", "topics"], ["serve"]):
        failed = adapter(*command, "--redis-url", url)
        assert failed.returncode == 2  # a usage error, as click's
        assert why in failed.line
        assert "s3cret" not in failed.line
        assert f"(see 'python -m adapter {command[0]}" in failed.line


def test_missing_tls_files(tmp_path: Path) -> None:
    missing = str(tmp_path / "server.pem")
    failed = adapter("serve", "--tls-cert", missing, "--tls-key", missing)
    assert failed.returncode == 2 and "--tls-cert" in failed.line and missing in failed.line
    failed = adapter(
        "inspect", "topics", "--redis-url", "rediss://127.0.0.1:6379/0", "--redis-tls-ca", missing
    )
    assert failed.returncode == 2 and "--redis-tls-ca" in failed.line and missing in failed.line


def test_a_keytab_the_pod_cannot_use(tmp_path: Path) -> None:
    """Named at once, before the pod waits for its Redis (here: none)."""
    pytest.importorskip("gssapi")
    empty = tmp_path / "empty.keytab"
    empty.write_bytes(b"")
    url = f"redis://127.0.0.1:{closed_port()}/0"
    failed = adapter("serve", "--redis-url", url, "--port", "0", "--kerberos-keytab", str(empty))
    assert f"--kerberos-keytab {empty}:" in failed.last_line
    assert "is nonexistent or empty" in failed.last_line


# --- serve: listeners -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "listener"),
    [("--port", "V1"), ("--kafka-port", "Kafka"), ("--metrics-port", "metrics")],
)
def test_a_busy_port_names_its_listener(
    redis_url: str, busy_port: int, option: str, listener: str
) -> None:
    ports = {"--port": "0", "--kafka-port": "0", option: str(busy_port)}
    args = [arg for pair in ports.items() for arg in pair]
    failed = adapter("serve", "--redis-url", redis_url, *args)
    line = failed.last_line
    assert f"cannot listen for {listener} on " in line  # (metrics: on 0.0.0.0)
    assert f":{busy_port} ({option} {busy_port})" in line
    assert "the port is in use" in line


def test_workers_say_why_they_stopped(redis_url: str, busy_port: int) -> None:
    failed = adapter(
        "serve", "--redis-url", redis_url, "--workers", "2", "--port", str(busy_port),
        "--kafka-port", "0",
    )  # fmt: skip
    assert failed.returncode != 0 and "Traceback" not in failed.stderr, failed.stderr
    errors = [line for line in failed.stderr.splitlines() if line.startswith("Error: worker: ")]
    assert len(errors) == 2, failed.stderr
    assert all(f"cannot listen for V1 on 127.0.0.1:{busy_port}" in line for line in errors)


# --- the traceback, when asked for --------------------------------------------------------------


def test_debug_shows_the_traceback() -> None:
    url = f"redis://127.0.0.1:{closed_port()}/0"
    failed = adapter("inspect", "topics", "--redis-url", url, env={"ADAPTER_LOG_LEVEL": "DEBUG"})
    assert failed.returncode != 0
    assert "Traceback" in failed.stderr and "ConnectionError" in failed.stderr
