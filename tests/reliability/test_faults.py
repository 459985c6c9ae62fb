"""Fault injection over real TCP: a pod SIGKILLed in the middle of pipelined produces.
Clients reconnect to another pod; everything acknowledged is stored exactly once, where it
was acknowledged. (Redis killed, stopped or paused under load: tests/core/test_outage.py.)"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from adapter.client import Client, produce_args
from tests.core.helpers import RF1
from tests.core.test_outage import all_records
from tests.support import Pod, wait_until

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
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            n, port_index = 0, 0
            while not self.stopping.is_set():
                try:
                    with Client("127.0.0.1", self.ports[port_index], timeout=20) as client:
                        while not self.stopping.is_set():
                            values = [f"v{self.tag}-{i}".encode() for i in range(n, n + 50)]
                            n += 50
                            self.attempted.update(values)
                            replies = client.pipeline(
                                ("PRODUCE", produce_args(self.topic, f"k{i % 7}", v))
                                for i, v in enumerate(values)
                            )
                            for value, reply in zip(values, replies, strict=True):
                                assert reply.ok, reply
                                fields = reply.fields()
                                self.acked[value] = (
                                    int(fields["partition"]),
                                    int(fields["offset"]),
                                )
                except (ConnectionError, OSError):
                    # the pod died under us: the batch in flight is unknown, go elsewhere
                    self.reconnects += 1
                    port_index = min(port_index + 1, len(self.ports) - 1)
        except BaseException as exc:  # reported by the test
            self.failure = exc

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
        records = all_records(client, topic)
    values = [v for _, _, v in records]
    assert len(values) == len(set(values)), "a record was stored twice"
    attempted = set().union(*(p.attempted for p in producers))
    assert set(values) <= attempted
    stored = {v: (p, o) for p, o, v in records}
    for producer in producers:
        for value, place in producer.acked.items():
            assert stored.get(value) == place, value
    for partition in range(3):  # offsets strictly increase in log order
        offsets = [o for p, o, _ in records if p == partition]
        assert offsets == sorted(set(offsets))
