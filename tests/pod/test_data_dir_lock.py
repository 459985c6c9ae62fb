"""One embedded redis-server per data directory: a second ``serve`` on a directory in use
refuses before it starts or writes anything (whatever its port), saying who holds it; once
the holder is gone (stopped, or SIGKILLed and its redis-server gone too) a start works."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.client.wire import ProduceReply
from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.pods import RF1, Pod
from tests.support.procfs import children, cmdline
from tests.support.waiting import port_open, wait_until

Snapshot = dict[str, tuple[int, int]]


def _embedded_pod(data_dir: Path) -> Pod:
    """A pod with its own embedded Redis in ``data_dir``, on any free Redis port (the advice
    a busy default port used to give)."""
    return Pod(None, "--data-dir", str(data_dir), "--embedded-redis-port", "0", *RF1)


def _redis_server_of(pod: Pod) -> int:
    assert pod.process is not None
    found = [pid for pid in children(pod.process.pid) if b"redis-server" in cmdline(pid)]
    assert len(found) == 1, found
    return found[0]


def _snapshot(data_dir: Path) -> Snapshot:
    """Every file under the directory (the AOF's included): size and modification time."""
    return {
        str(path.relative_to(data_dir)): (path.stat().st_size, path.stat().st_mtime_ns)
        for path in sorted(data_dir.rglob("*"))
        if path.is_file()
    }


def _second_serve(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``serve`` on ``data_dir``, expected to refuse; one that serves instead is stopped."""
    command = [
        sys.executable, "-m", "adapter", "serve", "--data-dir", str(data_dir),
        "--embedded-redis-port", "0", "--port", str(free_port()),
        "--kafka-port", str(free_port()), *RF1,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.terminate()
        stdout, stderr = process.communicate(timeout=20)
        pytest.fail(f"a second serve on {data_dir} ran: {stdout} {stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    started: list[Pod] = []
    yield started
    for pod in started:
        pod.stop()


def _produce_one(pod: Pod) -> ProduceReply:
    with pod.client() as client:
        return client.produce("orders", "k", "created")


def _still_there(pod: Pod, produced: ProduceReply) -> bool:
    with pod.client() as client:
        found = client.consume("orders", produced.partition, produced.offset).records
    return found == [(produced.offset, b"created")]


@pytest.mark.slow
def test_a_second_serve_on_a_data_directory_in_use_refuses_and_writes_nothing(
    tmp_path: Path, pods: list[Pod]
) -> None:
    data_dir = tmp_path / "data"
    first = _embedded_pod(data_dir)
    pods.append(first)
    first.start()
    record = _produce_one(first)
    assert first.process is not None
    server_pid = _redis_server_of(first)
    # both held still: no write of theirs (a registration refresh, an expiry) can hide or
    # pass for one of the second start's
    held = [first.process.pid, server_pid]
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    try:
        before = _snapshot(data_dir)
        assert any(name.endswith(".aof") for name in before), before
        refused = _second_serve(data_dir)
        after = _snapshot(data_dir)
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    assert refused.returncode != 0, refused.stdout
    said = refused.stderr
    assert f"data directory {data_dir} is in use" in said, said
    assert f"redis-server pid {server_pid} on port " in said, said
    assert f"started by pid {first.process.pid}: " in said and "adapter serve" in said, said
    assert "--data-dir" in said and "stop that process" in said, said
    assert "embedded redis-server with AOF" not in refused.stdout  # nothing started
    assert after == before

    # once the first has stopped (its redis-server with it), a start works on the files
    first.stop()
    wait_until(lambda: not os.path.exists(f"/proc/{server_pid}/fd"), timeout=15)
    again = _embedded_pod(data_dir)
    pods.append(again)
    again.start()
    assert _still_there(again, record)


@pytest.mark.slow
def test_a_sigkilled_pod_keeps_its_directory_until_its_redis_server_is_gone(
    tmp_path: Path, pods: list[Pod]
) -> None:
    """The redis-server outlives its killed pod a moment (it gets SIGTERM then, and flushes):
    it holds the directory meanwhile; afterwards no stale lock is left behind."""
    data_dir = tmp_path / "data"
    first = _embedded_pod(data_dir)
    pods.append(first)
    first.start()
    record = _produce_one(first)
    assert first.process is not None
    pod_pid, server_pid = first.process.pid, _redis_server_of(first)
    os.kill(server_pid, signal.SIGSTOP)  # its shutdown held back: the window made wide
    try:
        first.kill()
        before = _snapshot(data_dir)
        refused = _second_serve(data_dir)
        after = _snapshot(data_dir)
    finally:
        os.kill(server_pid, signal.SIGCONT)  # its pending SIGTERM: it shuts down
    assert refused.returncode != 0, refused.stdout
    said = refused.stderr
    assert f"redis-server pid {server_pid} on port " in said, said
    assert f"started by pid {pod_pid}" in said and "that process is gone" in said, said
    assert after == before

    wait_until(lambda: not os.path.exists(f"/proc/{server_pid}/fd"), timeout=15)
    again = _embedded_pod(data_dir)
    pods.append(again)
    again.start()
    assert _still_there(again, record)


def test_a_busy_port_that_serves_this_directory_is_never_joined_by_a_second_server(
    tmp_path: Path,
) -> None:
    """A redis-server started by hand on the data directory (no lock of ours): the busy
    port's advice is to serve it, not to start another server on other port."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    port = free_port()
    by_hand = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_until(lambda: b"redis-server" in cmdline(by_hand.pid) and port_open(port))
        failed = subprocess.run(
            [sys.executable, "-m", "adapter", "serve", "--data-dir", str(data_dir),
             "--embedded-redis-port", str(port), "--port", "0", "--kafka-port", "0"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        by_hand.terminate()
        by_hand.wait(timeout=10)
    assert failed.returncode != 0
    assert f"port {port} is a redis-server on this data directory" in failed.stderr
    assert f"--redis-url redis://127.0.0.1:{port}/0" in failed.stderr
    assert "--embedded-redis-port 0" not in failed.stderr
