"""A short soak: many connections opening and closing with mixed commands, bad input and
abrupt closes, for a bounded time; the pod keeps answering correctly and neither its file
descriptors nor its memory grow."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable

import pytest

from adapter.client import Client
from tests.support.pods import RF1, Pod
from tests.support.procfs import fd_count, rss_bytes
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]
SOAK_S = 6.0  # per phase; two phases
THREADS = 8


def session(port: int, topic: str, rng: random.Random) -> None:
    """One connection's life: a few mixed requests, then one of several ways to end."""
    with Client("127.0.0.1", port, timeout=30) as client:
        key = f"k{rng.randrange(20)}"
        replies = client.pipeline(
            [
                ("PING", ""),
                ("PRODUCE", f"{topic} {key}:v{rng.randrange(10**6)}"),
                ("CONSUME", f"{topic} {rng.randrange(3)} 0"),
                ("OFFSET", f"g {topic} 0"),
                ("NOPE", ""),
                ("PRODUCE", f"bad|topic {key}:v"),
            ]
        )
        assert replies[0].payload == "pong" and replies[1].ok and replies[2].ok, replies
        assert replies[4].code == "UNKNOWN_COMMAND" and replies[5].code == "BAD_REQUEST"
        ending = rng.randrange(4)
        if ending == 1:  # garbage, answered with cid 0
            client.send_raw(b"\xff\x00garbage\n")
            assert client.read_response().code == "BAD_REQUEST"
        elif ending == 2:  # requests sent, never read
            client.send_raw(f"V1|9|CONSUME|{topic} 0 0\nV1|10|PING|\n".encode())
        elif ending == 3:  # reset instead of a clean close
            client._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")


def run_phase(port: int, topic: str, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    failures: list[BaseException] = []
    counts = [0] * THREADS

    def worker(index: int) -> None:
        rng = random.Random(index)
        try:
            while time.monotonic() < deadline:
                session(port, topic, rng)
                counts[index] += 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=seconds + 60)
    assert not failures, failures[0]
    return sum(counts)


@pytest.mark.slow
def test_soak_many_short_connections(start_pod: StartPod, redis_url: str, topic: str) -> None:
    pod = start_pod(redis_url, *RF1)
    assert pod.process is not None
    pid = pod.process.pid
    idle_fds = fd_count(pid)
    # warm-up phase: caches, the thread pool and allocator arenas settle
    first = run_phase(pod.port, topic, SOAK_S)
    wait_until(lambda: fd_count(pid) <= idle_fds + 3, timeout=30)  # + Redis connections
    fds_after_warmup = fd_count(pid)
    rss_after_warmup = rss_bytes(pid)
    second = run_phase(pod.port, topic, SOAK_S)
    # every connection of the soak is closed: the pod's descriptors come back down
    wait_until(lambda: fd_count(pid) <= fds_after_warmup, timeout=30)
    grown = rss_bytes(pid) - rss_after_warmup
    print(
        f"soak: {first}+{second} connections, fds {fds_after_warmup}->{fd_count(pid)}, "
        f"rss +{grown >> 10} KiB"
    )
    assert grown < 20 << 20, f"pod memory grew by {grown} bytes over {second} connections"
    with pod.client() as client:
        assert client.ping() == "pong"
    assert "Traceback" not in pod.log()
