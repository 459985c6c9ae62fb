"""Client quotas on the V1 door: a user over its producer_byte_rate is slowed to it (its
connection muted, as a Kafka client's), another user on the same pod is not, a user over its
consumer_byte_rate or its request_percentage is throttled too, and the pod's metrics show
each quota entity's bytes, request time and throttle time (only entities that have a
quota)."""

from __future__ import annotations

import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from adapter.client import Client
from mapping.core.keys import Keys
from mapping.security.auth import hash_password
from tests.support.cli import CliTarget
from tests.support.pods import RF1, Pod, scrape_metrics
from tests.support.v1 import raw_connection, read_lines
from tests.support.waiting import wait_until

PREFIX = f"v1quotas-{uuid.uuid4().hex[:8]}"
QUOTA = 100_000  # bytes per second
VALUE = "x" * 1000
USERS = ("slow", "fast", "reader", "busy", "idle")


def plain(port: int) -> Client:
    return Client("127.0.0.1", port, timeout=10)


@pytest.fixture(scope="module")
def quota_pod(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    users = tmp_path_factory.mktemp("quota-users") / "users"
    users.write_text("".join(f"{user}:{hash_password('pw')}\n" for user in USERS))
    pod = Pod(
        redis_url, *RF1, "--auth-file", str(users), "--key-prefix", PREFIX,
        connect=plain, metrics=True,
    )  # fmt: skip
    pod.start()
    yield pod
    pod.stop()


def _authenticated(port: int, user: str) -> socket.socket:
    sock = raw_connection(port)
    sock.sendall(f"V1|0|AUTH|{user} pw\n".encode())
    assert read_lines(sock, 1) == [f"V1|0|OK|user={user}".encode()]
    return sock


def _quota_samples(port: int) -> dict[tuple[str, str, str, str], float]:
    """(family, quota, user, client id) -> value of the pod's quota metrics."""
    samples = {}
    for (name, labels), value in scrape_metrics(port).items():
        if name.startswith("adapter_quota_"):
            named = dict(labels)
            samples[(name, named["quota"], named["user"], named["client_id"])] = value
    return samples


def _produce_for(
    port: int, user: str, topic: str, seconds: float, most: int | None = None
) -> tuple[int, float]:
    """PRODUCE lines of ~1 KB pipelined as fast as the pod reads them, for ``seconds`` (or
    until ``most`` lines are answered): the line bytes answered OK and the time taken."""
    sock = _authenticated(port, user)
    sizes: list[int] = []  # by correlation id - 1
    stop = threading.Event()

    def send() -> None:
        try:
            while not stop.is_set() and (most is None or len(sizes) < most):
                batch = []
                for _ in range(16):
                    line = f"V1|{len(sizes) + 1}|PRODUCE|{topic} k:{VALUE}\n".encode()
                    sizes.append(len(line))
                    batch.append(line)
                sock.sendall(b"".join(batch))
        except OSError:
            pass  # closed at the end of the run

    sender = threading.Thread(target=send)
    start = time.monotonic()
    sender.start()
    answered = acked = 0
    buffer = b""
    while time.monotonic() < start + seconds and (most is None or answered < most):
        if not select.select([sock], [], [], 0.05)[0]:
            continue
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buffer += chunk
        *replies, buffer = buffer.split(b"\n")
        for reply in replies:
            _, cid, status, _ = reply.split(b"|", 3)
            assert status == b"OK", reply
            answered += 1
            acked += sizes[int(cid) - 1]
    elapsed = time.monotonic() - start
    stop.set()
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    sender.join()
    return acked, elapsed


def test_a_user_over_its_quota_is_slowed_and_metered(
    quota_pod: Pod, redis_url: str, redis_client: redis.Redis, topic: str
) -> None:
    target = CliTarget(redis_url, Keys(PREFIX), redis_client)
    target.cli("quota", "set", "--user", "slow", "--producer-byte-rate", str(QUOTA))
    target.cli("quota", "set", "--user", "reader", "--consumer-byte-rate", "1000")
    producer_key = ("adapter_quota_bytes_total", "producer_byte_rate", "slow", "")

    partitions: set[bytes] = set()

    def followed() -> bool:  # the pod read the quotas: "slow"'s bytes are measured
        sock = _authenticated(quota_pod.port, "slow")
        sock.sendall(f"V1|1|PRODUCE|{topic} k:v\n".encode())
        reply = read_lines(sock, 1)[0]
        assert reply.startswith(b"V1|1|OK|partition="), reply
        partitions.add(reply.split(b"=", 1)[1].split()[0])
        sock.close()
        return producer_key in _quota_samples(quota_pod.metrics_port)

    wait_until(followed, timeout=10)
    results: dict[str, tuple[int, float]] = {}

    def fast() -> None:
        results["fast"] = _produce_for(quota_pod.port, "fast", topic, 10.5, most=3000)

    other = threading.Thread(target=fast)
    other.start()
    # 10.5 s: Kafka's rate counts at least ten 1 s windows, so a new client may send ten
    # seconds' worth at once; the first sample ages out at 11 s
    results["slow"] = _produce_for(quota_pod.port, "slow", topic, 10.5)
    other.join()

    slow_bytes, slow_s = results["slow"]
    fast_bytes, fast_s = results["fast"]
    assert abs(slow_bytes / slow_s - QUOTA) <= 0.2 * QUOTA, results
    assert fast_bytes / fast_s > 2 * QUOTA, results

    # a reader over its consumer_byte_rate: its CONSUME replies are counted and it is muted
    # (the replies already due still come)
    sock = _authenticated(quota_pod.port, "reader")
    partition = partitions.pop().decode()  # where the producers' key went
    consume = f"CONSUME|{topic} {partition} 0"
    sock.sendall(b"".join(f"V1|{i}|{consume}\n".encode() for i in range(1, 21)))
    replies = read_lines(sock, 20)
    assert all(r.startswith(f"V1|{i}|OK|messages=".encode()) for i, r in enumerate(replies, 1))
    sock.close()

    samples = _quota_samples(quota_pod.metrics_port)
    assert samples[producer_key] >= slow_bytes
    assert samples[("adapter_quota_throttle_seconds_total", "producer_byte_rate", "slow", "")] > 0
    consumed = ("consumer_byte_rate", "reader", "")
    assert samples[("adapter_quota_bytes_total", *consumed)] >= sum(map(len, replies))
    assert samples[("adapter_quota_throttle_seconds_total", *consumed)] > 0
    # labels only for the entities that have a quota
    assert {user for _, _, user, _ in samples} == {"slow", "reader"}, samples


def _requests_for(port: int, user: str, line: str, seconds: float, counts: dict[str, int]) -> None:
    """``line`` pipelined in batches as fast as the pod reads them, for ``seconds``: the
    replies answered, in ``counts[user]``."""
    sock = _authenticated(port, user)
    stop = threading.Event()

    def send() -> None:
        batch = "".join(f"V1|{i}|{line}\n" for i in range(1, 65)).encode()
        try:
            while not stop.is_set():
                sock.sendall(batch)
        except OSError:
            pass  # closed at the end of the run

    sender = threading.Thread(target=send)
    sender.start()
    answered = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not select.select([sock], [], [], 0.05)[0]:
            continue
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        answered += chunk.count(b"\n")
    stop.set()
    sock.shutdown(socket.SHUT_RDWR)
    sock.close()
    sender.join()
    counts[user] = answered


def test_a_user_over_its_request_percentage_is_muted(
    quota_pod: Pod, redis_url: str, redis_client: redis.Redis, topic: str
) -> None:
    target = CliTarget(redis_url, Keys(PREFIX), redis_client)
    # 0.01 % of one thread: 1 ms of handling per 10 s window, a few slices of requests
    target.cli("quota", "set", "--user", "busy", "--request-percentage", "0.01")
    timed = ("adapter_quota_request_seconds_total", "request_percentage", "busy", "")

    def followed() -> bool:  # the pod read the quota: "busy"'s requests are timed
        sock = _authenticated(quota_pod.port, "busy")
        sock.sendall(f"V1|1|CONSUME|{topic} 0 0\n".encode())
        read_lines(sock, 1)
        sock.close()
        return timed in _quota_samples(quota_pod.metrics_port)

    wait_until(followed, timeout=10)
    counts: dict[str, int] = {}
    line = f"CONSUME|{topic} 0 0"
    other = threading.Thread(target=_requests_for, args=(quota_pod.port, "idle", line, 4.0, counts))
    other.start()
    _requests_for(quota_pod.port, "busy", line, 4.0, counts)
    other.join()

    # muted up to a window after each slice: far fewer requests than its neighbour
    assert counts["busy"] * 5 < counts["idle"], counts
    samples = _quota_samples(quota_pod.metrics_port)
    assert samples[timed] > 0
    assert samples[("adapter_quota_throttle_seconds_total", "request_percentage", "busy", "")] > 0
    assert not any(user == "idle" for _, _, user, _ in samples), samples
