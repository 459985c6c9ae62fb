"""Connection limits over real TCP: maximum connections, idle timeout, keepalive, the
per-connection in-flight cap (a client that never reads cannot make a pod buffer without
bound), and the byte limit of CONSUME."""

from __future__ import annotations

import select
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable

import pytest

from adapter.limits import tune_socket
from tests.support.pods import RF1, Pod
from tests.support.procfs import fd_count, rss_bytes
from tests.support.v1 import closed_by_peer, raw_connection, read_lines
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]


def test_connections_beyond_the_maximum_are_refused(start_pod: StartPod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1, "--max-connections", "3")
    held = [pod.client() for _ in range(3)]
    for client in held:
        assert client.ping() == "pong"
    extra = raw_connection(pod.port)
    assert read_lines(extra, 2) == [b"V1|0|ERR|UNAVAILABLE|too many connections: this pod allows 3"]
    assert closed_by_peer(extra)
    extra.close()
    held.pop().close()

    def admitted() -> bool:  # the closed slot is freed once the pod sees the close
        with pod.client(timeout=10) as client:
            return client.request("PING").ok

    wait_until(admitted, timeout=20)
    for client in held:
        assert client.ping() == "pong"
        client.close()


def test_idle_connection_is_closed(start_pod: StartPod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "0.5")
    idle = raw_connection(pod.port, timeout=30)
    idle.sendall(b"V1|1|PING|\n")
    assert read_lines(idle, 1) == [b"V1|1|OK|pong"]
    assert closed_by_peer(idle)  # blocks until the pod closes it
    idle.close()
    with pod.client() as client:
        assert client.ping() == "pong"


def test_a_request_waiting_while_the_pod_was_stalled_is_answered(
    start_pod: StartPod, redis_url: str
) -> None:
    """A pod held up past the idle timeout (SIGSTOP here) runs its timers before it reads
    its sockets: the request that came meanwhile is answered, not closed unread."""
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "1")
    assert pod.process is not None
    sock = raw_connection(pod.port, timeout=30)
    try:
        time.sleep(0.2)  # accepted
        pod.process.send_signal(signal.SIGSTOP)
        try:
            sock.sendall(b"V1|1|PING|\n")
            time.sleep(1.5)
        finally:
            pod.process.send_signal(signal.SIGCONT)
        assert read_lines(sock, 1) == [b"V1|1|OK|pong"]
    finally:
        sock.close()


def test_keepalive_is_set_on_a_socket() -> None:
    with socket.socket() as sock:
        tune_socket(sock, 30)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3


def test_consume_max_bytes(start_pod: StartPod, redis_url: str, topic: str) -> None:
    pod = start_pod(redis_url, *RF1, "--consume-max-bytes", "2500")
    with pod.client() as client:
        values = [bytes([65 + i]) * 1000 for i in range(5)] + [b"x" * 6000, b"y"]
        offsets = [r.offset for r in client.produce_many(topic, [("user1", v) for v in values])]
        partition = client.produce(topic, "user1", "probe").partition
        first = client.consume(topic, partition, 0)
        assert first.records == list(zip(offsets[:2], values[:2], strict=True))
        # a record larger than the limit still comes, alone, so a consumer makes progress
        big = client.consume(topic, partition, offsets[5])
        assert big.records == [(offsets[5], values[5])]


def test_client_that_never_reads_cannot_make_the_pod_buffer(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    """2 MB per CONSUME reply and thousands of CONSUMEs pipelined by a client that reads
    nothing: unbounded buffering would need gigabytes; the pod stops reading instead."""
    pod = start_pod(redis_url, *RF1, "--max-in-flight", "4", "--consume-max-bytes", "0")
    assert pod.process is not None
    with pod.client() as client:
        value = b"v" * 20_000
        partition = client.produce(topic, "user1", value).partition
        client.produce_many(topic, [("user1", value)] * 99)
        assert len(client.consume(topic, partition, 0).records) == 100
    baseline = rss_bytes(pod.process.pid)
    # Up to 128 MB of small requests: more than every kernel buffer on the way can hold
    # (Linux autotunes a receive buffer up to 32 MB), and a pod answering all it reads
    # would need 2 MB per 36-byte request.
    request = f"V1|1|CONSUME|{topic} {partition} 0\n".encode()
    chunk = request * ((1 << 16) // len(request))
    limit = 128 << 20
    sock = raw_connection(pod.port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
    sock.setblocking(False)
    sent = 0
    while sent < limit:
        _, writable, _ = select.select([], [sock], [], 3.0)
        if not writable:
            break  # the pod has stopped reading from this connection
        sent += sock.send(chunk[sent % len(chunk) :])
    assert sent < limit, "the pod read everything a non-reading client sent"
    grown = rss_bytes(pod.process.pid) - baseline
    print(f"sent {sent} bytes; pod RSS grew by {grown >> 20} MiB")
    assert grown < 150 << 20, f"pod grew by {grown} bytes"
    sock.close()
    with pod.client() as client:  # the pod is fine, and drops the abandoned connection
        assert client.ping() == "pong"


def test_keepalive_on_a_pod_connection(start_pod: StartPod, redis_url: str) -> None:
    """The pod's side of a client connection runs a keepalive timer (seen with ``ss -o``)."""
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) is not installed")
    pod = start_pod(redis_url, *RF1, "--tcp-keepalive-s", "7")
    with pod.client() as client:
        assert client.ping() == "pong"
        local_port = client._sock.getsockname()[1]
        shown = subprocess.run(
            ["ss", "-tnoH", "state", "established", f"( dport = :{local_port} )"],
            capture_output=True, text=True, timeout=10,
        ).stdout  # fmt: skip
        assert f":{pod.port}" in shown and "timer:(keepalive" in shown, shown


def test_peer_that_takes_no_reply_is_dropped(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "1", "--consume-max-bytes", "0")
    assert pod.process is not None
    with pod.client() as client:
        partition = client.produce(topic, "user1", "x" * 50_000).partition
        client.produce_many(topic, [("user1", "x" * 50_000)] * 99)
    idle_fds = fd_count(pod.process.pid)
    sock = raw_connection(pod.port)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 12)
    # 5 MB replies that are never read: the pod's send blocks, then it gives up
    sock.sendall(f"V1|1|CONSUME|{topic} {partition} 0\n".encode() * 4)
    wait_until(lambda: "took no reply" in pod.log(), timeout=30)
    wait_until(lambda: fd_count(pod.process.pid) <= idle_fds, timeout=30)
    sock.close()
