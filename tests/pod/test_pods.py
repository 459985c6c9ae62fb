"""Pods started with their own options, several pods on one Redis, startup checks and
the embedded mode."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mapping.connection.embedded import RedisProcess, free_port
from mapping.core.keys import Keys
from tests.support import ROOT
from tests.support.pods import RF1, Pod
from tests.support.v1 import closed_by_peer, exchange, raw_connection, read_lines
from tests.support.waiting import port_open, wait_until

StartPod = Callable[..., Pod]


def test_consume_per_call_limit(start_pod: StartPod, redis_url: str, topic: str) -> None:
    pod = start_pod(redis_url, *RF1, "--consume-max-records", "5")
    with pod.client() as client:
        produced = client.produce_many(topic, [("user1", f"v{i}") for i in range(12)])
        offsets = [p.offset for p in produced]
        batches = []
        position = 0
        for _ in range(3):
            reply = client.consume(topic, 2, position)
            batches.append(reply.records)
            assert reply.high_watermark == offsets[-1]
            position = reply.next_offset or position
        assert [len(b) for b in batches] == [5, 5, 2]
        assert [o for b in batches for o, _ in b] == offsets
        assert client.consume(topic, 2, position).records == []


def test_consume_bounded_by_high_watermark(
    start_pod: StartPod, own_redis: RedisProcess, topic: str
) -> None:
    """With replication factor 3 and nobody replicating, hw stays -1: records are in the log
    but CONSUME shows none of them. (A Redis of its own: on the shared one, another pod's
    replicator could play the followers.)"""
    redis_url = own_redis.url
    pod = start_pod(redis_url, "--no-replicator", "--replica-lag-max-ms", "600000")
    with pod.client() as client:
        produced = client.produce_many(topic, [("user1", "a"), ("user1", "b")])
        assert all(p.high_watermark < p.offset for p in produced)
        reply = client.consume(topic, 2, 0)
        assert reply.records == [] and reply.high_watermark == -1
    entries = redis.Redis.from_url(redis_url).xlen(Keys().partition(topic, 2).log)
    assert entries == 2


def test_line_too_long_closes_the_connection(start_pod: StartPod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1, "--max-line-bytes", "64")
    # a complete line that is too long, after a good one
    sock = raw_connection(pod.port)
    sock.sendall(b"V1|1|PING|\n" + b"V1|2|PRODUCE|t k:" + b"x" * 100 + b"\nV1|3|PING|\n")
    assert read_lines(sock, 3) == [b"V1|1|OK|pong", b"V1|0|ERR|BAD_REQUEST|line too long"]
    assert wait_until(lambda: closed_by_peer(sock))
    sock.close()
    # an unterminated line that grows too long
    sock = raw_connection(pod.port)
    sock.sendall(b"V1|1|PING|" + b"y" * 200)
    assert read_lines(sock, 2) == [b"V1|0|ERR|BAD_REQUEST|line too long"]
    sock.close()
    # a line right at the limit is fine, and the pod serves others
    with pod.client() as client:
        line = b"V1|1|PRODUCE|" + b"t" * 20 + b" k:" + b"v" * 28
        assert len(line) == 64
        assert exchange(client, line).ok
        assert client.ping() == "pong"


def test_two_pods_share_one_redis(start_pod: StartPod, redis_url: str, topic: str) -> None:
    first, second = start_pod(redis_url, *RF1), start_pod(redis_url, *RF1)
    with first.client() as a, second.client() as b:
        produced = a.produce_many(topic, [("user1", "from-a"), ("user2", "also-a")])
        produced += b.produce_many(topic, [("user1", "from-b")])
        for reader in (a, b):
            seen = {
                (partition, offset, value)
                for partition in range(3)
                for offset, value in reader.consume(topic, partition, 0).records
            }
            assert seen == {
                (p.partition, p.offset, v)
                for p, v in zip(produced, [b"from-a", b"also-a", b"from-b"], strict=True)
            }
        # roles are shared through Redis too
        assert a.request("SET_PARTITION_ROLE", f"{topic} 2 follower").ok
        assert b.request("PRODUCE", f"{topic} user1:x").code == "NOT_LEADER"
        assert b.request("SET_PARTITION_ROLE", f"{topic} 2 leader").ok
        assert a.request("PRODUCE", f"{topic} user1:x").ok


def test_sequence_bits_pin(redis_url: str) -> None:
    prefix = f"pin-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    client.hset(Keys(prefix).meta, "sequence_bits", 10)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "adapter",
            "serve",
            "--redis-url",
            redis_url,
            "--key-prefix",
            prefix,
            "--sequence-bits",
            "8",
            "--port",
            str(free_port()),
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "10 sequence bits" in output and "--sequence-bits 10" in output, output
    assert "Traceback" not in output, output
    assert int(client.hget(Keys(prefix).meta, "sequence_bits")) == 10


def test_first_pod_pins_sequence_bits(start_pod: StartPod, redis_url: str) -> None:
    prefix = f"pin-{uuid.uuid4().hex[:8]}"
    start_pod(redis_url, "--key-prefix", prefix, "--sequence-bits", "8")
    stored = redis.Redis.from_url(redis_url).hget(Keys(prefix).meta, "sequence_bits")
    assert int(stored) == 8


def test_client_reset_closes_only_that_connection(pod: Pod, topic: str) -> None:
    with pod.client() as other:
        for half in (b"V1|1|PRODUCE|" + topic.encode() + b" us", b"V1|2|PI", b"garbage"):
            sock = raw_connection(pod.port)
            sock.sendall(half)
            # SO_LINGER 0: close() sends a RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
            assert other.ping() == "pong"
        # a reset while the pod has replies to send
        sock = raw_connection(pod.port)
        sock.sendall(b"".join(b"V1|%d|CONSUME|%s 2 0\n" % (i, topic.encode()) for i in range(2000)))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        assert other.ping() == "pong"
        assert other.produce(topic, "user1", "still-here").partition == 2
    with pod.client() as fresh:
        assert fresh.ping() == "pong"


def test_sigterm_stops_a_pod_cleanly(start_pod: StartPod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1)
    with pod.client() as client:
        assert client.ping() == "pong"
    assert pod.process is not None
    pod.process.send_signal(signal.SIGTERM)
    assert pod.process.wait(timeout=15) == 0
    assert not port_open(pod.port)


# --- the embedded mode ---------------------------------------------------------------------


class Embedded:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.log_path = data_dir.parent / f"embedded-{self.port}.log"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "adapter",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(self.port),
                *RF1,
            ],  # fmt: skip
            cwd=ROOT,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.pod = Pod("unused", port=self.port)
        self.pod.process = self.process
        self.pod.log_path = self.log_path
        wait_until(self.pod._answers, timeout=30)
        match = re.search(r"redis://127\.0\.0\.1:(\d+)/0", self.log_path.read_text())
        assert match, self.log_path.read_text()
        self.redis_port = int(match.group(1))

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def embedded() -> Iterator[Callable[[Path], Embedded]]:
    started: list[Embedded] = []

    def start(data_dir: Path) -> Embedded:
        server = Embedded(data_dir)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.mark.slow
def test_embedded_redis_serves_and_stops_with_the_pod(
    embedded: Callable[[Path], Embedded], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = embedded(data_dir)
    client = redis.Redis(port=server.redis_port)
    assert client.config_get("appendonly")["appendonly"] == "yes"
    with server.pod.client() as pod_client:
        produced = pod_client.produce("orders", "user1", "created")
        assert pod_client.consume("orders", 2, 0).records == [(produced.offset, b"created")]
    client.close()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=20) == 0
    wait_until(lambda: not port_open(server.redis_port), timeout=15)
    assert any(data_dir.rglob("*.aof")), list(data_dir.rglob("*"))

    # a second start on the same data dir finds the record (AOF)
    again = embedded(data_dir)
    with again.pod.client() as pod_client:
        assert pod_client.consume("orders", 2, 0).records == [(produced.offset, b"created")]
    # even a SIGKILLed pod takes its redis-server along (parent-death signal)
    again.process.kill()
    again.process.wait(timeout=10)
    wait_until(lambda: not port_open(again.redis_port), timeout=15)


def test_consume_pages_hold_every_record_up_to_their_high_watermark(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    """After new writes, a CONSUME from an earlier position on a pod that read the partition
    before returns every record up to the hw it reports, on that pod and on another: a
    reader that moves on to hw + 1 skips nothing."""
    first, second = start_pod(redis_url, *RF1), start_pod(redis_url, *RF1)
    produced: list[int] = []
    with first.client() as writer, first.client() as same, second.client() as other:
        for round_ in range(8):
            produced.append(writer.produce(topic, "user1", f"v{round_}", acks="all").offset)
            for reader in (same, other):
                reply = reader.consume(topic, 2, 0)
                assert len(reply.records) < 1000  # not full: every record <= hw is here
                assert reply.high_watermark >= produced[-1]
                assert [o for o, _ in reply.records] == [
                    o for o in produced if o <= reply.high_watermark
                ]
