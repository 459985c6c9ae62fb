"""--workers (SO_REUSEPORT) and per-connection backpressure, over TCP against real pods."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.pods import RF1, Pod
from tests.support.v1 import raw_connection
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]


def _workers(pod: Pod) -> list[int]:
    """The pod's worker processes (spawned children, not multiprocessing's helpers)."""
    assert pod.process is not None
    found = []
    for task in os.listdir(f"/proc/{pod.process.pid}/task"):
        for child in Path(f"/proc/{pod.process.pid}/task/{task}/children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                found.append(int(child))
    return found


def _sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def _listening(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on ``port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].rsplit(":", 1)[1], 16)
        if local_port == port and fields[3] == "0A" and fields[9] in inodes:
            return True
    return False


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_workers_share_the_port(start_pod: StartPod, redis_url: str, topic: str) -> None:
    pod = start_pod(redis_url, *RF1, "--workers", "2")
    workers = wait_until(lambda: len(_workers(pod)) == 2 and _workers(pod))
    wait_until(lambda: all(_listening(pid, pod.port) for pid in workers), timeout=30)
    before = {pid: _sockets(pid) for pid in workers}
    clients = [pod.client() for _ in range(40)]
    try:
        for i, client in enumerate(clients):
            assert client.produce(topic, f"key{i}", f"value{i}").offset >= 0
        after = {pid: _sockets(pid) for pid in workers}
        # The kernel spreads the 40 connections: both workers hold some of them.
        assert all(after[pid] > before[pid] for pid in workers), (before, after)
        with pod.client() as reader:
            records = [r for p in range(3) for r in reader.consume(topic, p, 0).records]
        assert sorted(v for _, v in records) == sorted(f"value{i}".encode() for i in range(40))
    finally:
        for client in clients:
            client.close()
    pod.signal(signal.SIGTERM)
    assert pod.process is not None
    assert pod.process.wait(timeout=30) == 0
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers)


def test_workers_need_a_fixed_port(redis_url: str) -> None:
    import subprocess
    import sys

    from tests.support import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "adapter", "serve", "--redis-url", redis_url,
         "--port", "0", "--workers", "2"],
        cwd=ROOT, capture_output=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert b"--workers needs a fixed --port" in done.stderr


def test_a_client_that_never_reads_gets_backpressure(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    """CONSUME replies of ~100 KB each to a client that only sends: the pod stops reading
    that connection once its replies cannot be sent, so its memory stays bounded, and it
    keeps serving everybody else."""
    pod = start_pod(redis_url, *RF1)
    assert pod.process is not None
    with pod.client() as client:
        client.produce_many(topic, [("user1", "x" * 1000) for _ in range(100)])
        assert len(client.consume(topic, 2, 0).records) == 100
    rss_before = _rss_kib(pod.process.pid)
    request = f"V1|1|CONSUME|{topic} 2 0\n".encode()
    sock = raw_connection(pod.port)
    sock.setblocking(False)
    chunk = request * 1000
    sent = 0
    blocked_since = None
    # Send until the socket stays full for 2 s (or 64 MB: 640k requests, ~64 GB of replies).
    while sent < 64 << 20:
        try:
            sent += sock.send(chunk)
            blocked_since = None
        except BlockingIOError:
            blocked_since = blocked_since or time.monotonic()
            if time.monotonic() - blocked_since > 2.0:
                break
            time.sleep(0.01)  # retry pace while waiting out the 2 s "stays full" window
    requests_sent = sent // len(request)
    assert sent < 64 << 20, "the pod kept reading a connection whose replies pile up"
    grown_mib = (_rss_kib(pod.process.pid) - rss_before) / 1024
    assert grown_mib < 150, f"pod grew {grown_mib:.0f} MiB for {requests_sent} requests"
    with pod.client() as other:
        assert other.ping() == "pong"
    # The stuck connection still works: what the pod answered arrives in order.
    sock.setblocking(True)
    sock.settimeout(30)
    data = b""
    while data.count(b"\n") < 3:
        data += sock.recv(1 << 20)
    assert data.startswith(b"V1|1|OK|messages=")
    sock.close()
    with pod.client() as other:
        assert other.ping() == "pong"


def test_workers_go_with_a_killed_parent(start_pod: StartPod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1, "--workers", "2")
    workers = wait_until(lambda: len(_workers(pod)) == 2 and _workers(pod))
    pod.kill()  # SIGKILL: no chance to stop them itself
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), timeout=30)
