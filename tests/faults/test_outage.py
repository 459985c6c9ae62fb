"""Redis going away under a pod: killed, stopped, paused. A pod answers UNAVAILABLE
promptly (bounded by --redis-timeout-ms), keeps its connections, and serves again once
Redis is back; acknowledged records survive a restart exactly once."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from adapter.client import Client
from mapping.connection.embedded import RedisProcess
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

StartPod = Callable[..., Pod]
TIMEOUT = ("--redis-timeout-ms", "1000")


class Producer(threading.Thread):
    """Produces numbered values to one topic until stopped, remembering which were acked."""

    def __init__(self, port: int, topic: str) -> None:
        super().__init__(daemon=True)
        self.port, self.topic = port, topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.attempted: set[bytes] = set()
        self.errors: dict[str, int] = {}
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            with Client("127.0.0.1", self.port, timeout=20) as client:
                i = 0
                while not self.stopping.is_set():
                    batch = [(f"k{j % 11}", f"v{j}") for j in range(i, i + 20)]
                    i += 20
                    self.attempted.update(v.encode() for _, v in batch)
                    requests = [("PRODUCE", f"{self.topic} {k}:{v}") for k, v in batch]
                    for (_, value), reply in zip(batch, client.pipeline(requests), strict=True):
                        if reply.ok:
                            fields = reply.fields()
                            self.acked[value.encode()] = (
                                int(fields["partition"]),
                                int(fields["offset"]),
                            )
                        else:
                            self.errors[reply.code] = self.errors.get(reply.code, 0) + 1
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        assert not self.is_alive()
        assert self.failure is None, self.failure


def all_records(client: Client, topic: str) -> list[tuple[int, int, bytes]]:
    """The producer's records (values ``v<n>``; probes and one-off requests left out)."""
    records = []
    for partition in range(3):
        position = 0
        while True:
            reply = client.consume(topic, partition, position)
            records += [(partition, o, v) for o, v in reply.records if v.startswith(b"v")]
            if not reply.records:
                break
            position = reply.next_offset or position
    return records


def check_after_restart(client: Client, producer: Producer) -> int:
    """Every acked record exactly once where it was acked; nothing foreign, no duplicates.
    Returns how many records answered UNAVAILABLE were written anyway."""
    records = all_records(client, producer.topic)
    values = [v for _, _, v in records]
    assert len(values) == len(set(values)), "a record was stored twice"
    assert set(values) <= producer.attempted
    stored = {v: (p, o) for p, o, v in records}
    for value, place in producer.acked.items():
        assert stored.get(value) == place, value
    return len(set(values) - set(producer.acked))


def wait_serving(client: Client, topic: str) -> None:
    wait_until(lambda: client.request("PRODUCE", f"{topic} probe:x").ok, timeout=30, interval=0.2)


def produced_some(producer: Producer, more_than: int) -> bool:
    return len(producer.acked) > more_than


@pytest.mark.slow
def test_redis_stopped_and_restarted_under_load(
    start_pod: StartPod, own_redis: RedisProcess, topic: str
) -> None:
    pod = start_pod(own_redis.url, *RF1, *TIMEOUT)
    producer = Producer(pod.port, topic)
    producer.start()
    wait_until(lambda: produced_some(producer, 200))
    own_redis.stop()  # SIGTERM: Redis flushes its AOF
    with pod.client(timeout=20) as client:
        # during the outage: prompt UNAVAILABLE answers, the connection stays usable
        for command in (f"PRODUCE|{topic} user1:x", f"CONSUME|{topic} 0 0", f"PRODUCE|{topic} z:z"):
            reply = client.request(*command.split("|"))
            assert (reply.ok, reply.code) == (False, "UNAVAILABLE"), reply
            assert client.ping() == "pong"
        wait_until(lambda: producer.errors.get("UNAVAILABLE", 0) > 0)
        acked_before = len(producer.acked)
        own_redis.start()
        wait_serving(client, topic)
        wait_until(lambda: produced_some(producer, acked_before + 100), timeout=30)
        producer.stop()
        assert set(producer.errors) == {"UNAVAILABLE"}
        check_after_restart(client, producer)


@pytest.mark.slow
def test_redis_killed_with_appendfsync_always_loses_nothing_acked(
    start_pod: StartPod, tmp_path: Path, topic: str
) -> None:
    server = RedisProcess(tmp_path / "redis", appendfsync="always").start()
    try:
        pod = start_pod(server.url, *RF1, *TIMEOUT)
        producer = Producer(pod.port, topic)
        producer.start()
        wait_until(lambda: produced_some(producer, 300))
        server.kill()  # SIGKILL: no chance to flush anything
        wait_until(lambda: producer.errors.get("UNAVAILABLE", 0) > 0)
        server.start()
        with pod.client(timeout=20) as client:
            wait_serving(client, topic)
            producer.stop()
            check_after_restart(client, producer)
    finally:
        server.kill()


@pytest.mark.slow
def test_redis_killed_with_appendfsync_everysec(
    start_pod: StartPod, own_redis: RedisProcess, topic: str
) -> None:
    """The fixture's Redis uses appendfsync everysec. A SIGKILL of redis-server alone loses
    nothing that reached the AOF file (the write happens before the reply; only the fsync
    is once a second), but Redis may postpone that write while a slow fsync runs, and a
    crash of the machine loses up to about a second of acknowledged records. So this only
    checks what always holds: no duplicates, nothing foreign, and service resumes."""
    pod = start_pod(own_redis.url, *RF1, *TIMEOUT)
    producer = Producer(pod.port, topic)
    producer.start()
    wait_until(lambda: produced_some(producer, 300))
    own_redis.kill()
    wait_until(lambda: producer.errors.get("UNAVAILABLE", 0) > 0)
    own_redis.start()
    with pod.client(timeout=20) as client:
        wait_serving(client, topic)
        producer.stop()
        records = all_records(client, topic)
        values = [v for _, _, v in records]
        assert len(values) == len(set(values))
        assert set(values) <= producer.attempted
        lost = set(producer.acked) - set(values)
        # not asserted empty (see the docstring); reported when it happens
        if lost:
            print(f"appendfsync everysec: {len(lost)} acknowledged records lost to SIGKILL")


@pytest.mark.slow
def test_redis_paused_answers_unavailable_then_recovers(
    start_pod: StartPod, own_redis: RedisProcess, topic: str
) -> None:
    pod = start_pod(own_redis.url, *RF1, *TIMEOUT)
    assert own_redis.process is not None
    with pod.client(timeout=30) as client, pod.client(timeout=30) as other:
        before = client.produce(topic, "user1", "before")
        own_redis.process.send_signal(signal.SIGSTOP)
        try:
            replies = client.pipeline(
                [("PRODUCE", f"{topic} user1:during"), ("CONSUME", f"{topic} 2 0"), ("PING", "")]
            )
            assert [r.code for r in replies[:2]] == ["UNAVAILABLE", "UNAVAILABLE"], replies
            assert replies[2].payload == "pong"
            # another connection is not stuck behind the first one
            reply = other.request("CONSUME", f"{topic} 2 0")
            assert reply.code == "UNAVAILABLE"
            assert other.ping() == "pong"
        finally:
            own_redis.process.send_signal(signal.SIGCONT)
        wait_serving(client, topic)
        after = client.produce(topic, "user1", "after")
        assert after.offset > before.offset
        values = [v for _, v in client.consume(topic, 2, 0).records]
        assert values[0] == b"before" and values[-1] == b"after"
        # a produce that timed out may still have been applied once Redis woke up
        assert values.count(b"during") <= 1


@pytest.mark.parametrize("stop", ["kill", "stop"])
def test_an_idle_pod_answers_its_first_requests_after_a_redis_restart(
    start_pod: StartPod, tmp_path: Path, topic: str, stop: str
) -> None:
    """Redis restarts while the pod is idle: the pod's connections to the old server are
    closed under it, and the first requests after the restart are answered, not failed with
    UNAVAILABLE on a dead connection (redis-py 8's pools skipped that check by default)."""
    server = RedisProcess(tmp_path / "redis", appendfsync="always").start()
    try:
        pod = start_pod(server.url, *RF1, *TIMEOUT)
        clients = [pod.client(timeout=20) for _ in range(4)]
        try:
            # several connections busy at once, so the pod's pool holds more than one
            threads = [
                threading.Thread(target=c.produce_many, args=(topic, [(b"k", b"v")] * 200))
                for c in clients
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            getattr(server, stop)()
            server.start()
            for client in clients:
                produced = client.request("PRODUCE", f"{topic} after:restart")
                assert produced.ok, produced
                consumed = client.request("CONSUME", f"{topic} 0 0")
                assert consumed.ok, consumed
                joined = client.request("JOIN", f"g-{topic} {topic} member")
                assert joined.ok, joined
        finally:
            for client in clients:
                client.close()
    finally:
        server.kill()
