"""Fault injection over real TCP: a pod SIGKILLed in the middle of pipelined produces.
Clients reconnect to another pod; everything acknowledged is stored exactly once, where it
was acknowledged. (Redis killed, stopped or paused under load: tests/faults/test_outage.py.)"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from adapter.client import Client, produce_args
from mapping.connection.embedded import RedisProcess
from mapping.core.codec import offset_of
from mapping.core.keys import DEFAULT_PREFIX, Keys
from tests.faults.test_outage import all_records
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]


class FailoverProducer(threading.Thread):
    """Pipelines batches of produces to the first pod that answers, moving to the next
    when its connection dies. Values are unique: ``v<thread>-<n>``."""

    def __init__(self, name: str, ports: list[int], topic: str) -> None:
        super().__init__(daemon=True)
        self.tag, self.ports, self.topic = name, ports, topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.attempted: set[bytes] = set()
        self.reconnects = 0
        self.sent = 0
        self.errors: dict[str, int] = {}
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            port_index = 0
            while not self.stopping.is_set():
                try:
                    with Client("127.0.0.1", self.ports[port_index], timeout=20) as client:
                        while not self.stopping.is_set():
                            self._produce_batch(client)
                except (ConnectionError, OSError):
                    # the pod died under us: the batch in flight is unknown, go elsewhere
                    self.reconnects += 1
                    port_index = min(port_index + 1, len(self.ports) - 1)
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def _produce_batch(self, client: Client) -> None:
        values = [f"v{self.tag}-{i}".encode() for i in range(self.sent, self.sent + 50)]
        self.sent += 50
        self.attempted.update(values)
        replies = client.pipeline(
            ("PRODUCE", produce_args(self.topic, f"k{i % 7}", v)) for i, v in enumerate(values)
        )
        for value, reply in zip(values, replies, strict=True):
            if not reply.ok:  # unknown outcome: may or may not be stored
                self.errors[reply.code] = self.errors.get(reply.code, 0) + 1
                continue
            fields = reply.fields()
            self.acked[value] = (int(fields["partition"]), int(fields["offset"]))

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive()
        assert self.failure is None, self.failure


@pytest.mark.slow
def test_pod_killed_mid_pipeline_loses_nothing_acknowledged(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    victim = start_pod(redis_url, *RF1)
    survivor = start_pod(redis_url, *RF1)
    producers = [FailoverProducer(str(i), [victim.port, survivor.port], topic) for i in range(4)]
    for producer in producers:
        producer.start()
    wait_until(lambda: all(len(p.acked) > 200 for p in producers), timeout=30)
    victim.kill()  # SIGKILL, with pipelines in flight
    before = {p.tag: len(p.acked) for p in producers}
    wait_until(
        lambda: all(p.reconnects and len(p.acked) > before[p.tag] + 200 for p in producers),
        timeout=30,
    )
    for producer in producers:
        producer.stop()

    with survivor.client() as client:
        check_exactly_once(client, topic, producers, redis_url)


def check_exactly_once(
    client: Client, topic: str, producers: list[FailoverProducer], redis_url: str
) -> None:
    """Every acknowledged record stored once where it was acknowledged, nothing foreign,
    offsets strictly increasing in each partition's log order."""
    records = all_records(client, topic)
    values = [v for _, _, v in records]
    assert len(values) == len(set(values)), "a record was stored twice"
    attempted = set().union(*(p.attempted for p in producers))
    assert set(values) <= attempted
    stored = {v: (p, o) for p, o, v in records}
    misplaced = {
        value: place
        for producer in producers
        for value, place in producer.acked.items()
        if stored.get(value) != place
    }
    assert not misplaced, _misplaced(misplaced, stored, redis_url, topic, producers)
    for partition in range(3):  # offsets strictly increase in log order
        offsets = [o for p, o, _ in records if p == partition]
        assert offsets == sorted(set(offsets))


def _misplaced(
    misplaced: dict[bytes, tuple[int, int]],
    stored: dict[bytes, tuple[int, int]],
    redis_url: str,
    topic: str,
    producers: list[FailoverProducer],
) -> str:
    """What tells a lost write (not in the log), a record CONSUME skipped (in the log where
    acknowledged) and an acknowledgement of another place (in the log elsewhere) apart."""
    keys = Keys(DEFAULT_PREFIX)
    logged: dict[bytes, tuple[int, int]] = {}
    ends = []
    with redis.Redis.from_url(redis_url) as direct:
        for partition in range(3):
            part = keys.partition(topic, partition)
            for entry, fields in direct.xrange(part.log):
                logged[fields[b"value"]] = (partition, offset_of(entry))
            ends.append(direct.hmget(part.state, "log_end", "hw"))
    lines = [
        f"{len(misplaced)} acknowledged records not where acknowledged; (log_end, hw) per "
        f"partition {ends}; producers' errors {[p.errors for p in producers]}, reconnects "
        f"{[p.reconnects for p in producers]}"
    ]
    for value, place in sorted(misplaced.items())[:10]:
        lines.append(
            f"{value!r}: acknowledged at {place}, consumed at {stored.get(value)}, "
            f"in the log at {logged.get(value)}"
        )
    return "\n".join(lines)


@pytest.mark.slow
def test_redis_killed_under_two_pods_loses_nothing_acknowledged(
    start_pod: StartPod, tmp_path: Path, topic: str
) -> None:
    """Redis SIGKILLed and restarted from its AOF (appendfsync always) while four clients
    produce through two pods: nothing acknowledged is lost or doubled, and offsets given
    after the restart are above every offset given before it."""
    server = RedisProcess(tmp_path / "redis", appendfsync="always").start()
    try:
        pods = [start_pod(server.url, *RF1, "--redis-timeout-ms", "1000") for _ in range(2)]
        producers = [
            FailoverProducer(str(i), [pods[i % 2].port, pods[(i + 1) % 2].port], topic)
            for i in range(4)
        ]
        for producer in producers:
            producer.start()
        wait_until(lambda: all(len(p.acked) > 200 for p in producers), timeout=30)
        server.kill()
        wait_until(lambda: any(p.errors.get("UNAVAILABLE") for p in producers), timeout=30)
        before = {p.tag: dict(p.acked) for p in producers}
        server.start()
        wait_until(
            lambda: all(len(p.acked) > len(before[p.tag]) + 200 for p in producers), timeout=60
        )
        for producer in producers:
            producer.stop()
        assert {code for p in producers for code in p.errors} == {"UNAVAILABLE"}
        with pods[0].client() as client:
            check_exactly_once(client, topic, producers, server.url)
        for partition in range(3):
            old = [o for p in before.values() for (q, o) in p.values() if q == partition]
            new = [
                o
                for p in producers
                for v, (q, o) in p.acked.items()
                if q == partition and v not in before[p.tag]
            ]
            if old and new:
                assert min(new) > max(old)
    finally:
        server.kill()
