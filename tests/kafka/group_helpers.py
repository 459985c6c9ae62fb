"""Three pods on one Redis for the consumer-group tests, and the clients' common settings
(short sessions, so a lost member is noticed within seconds)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer

from tests.support.pods import RF1

GROUP_PREFIX = "kgroupwire"
POD_ARGS = (
    *RF1,
    "--key-prefix", GROUP_PREFIX,
    "--kafka-group-initial-rebalance-delay-ms", "200",
    "--kafka-group-consumer-heartbeat-interval-ms", "300",
    "--kafka-group-consumer-session-timeout-ms", str(3000),
)  # fmt: skip
SESSION_MS = 3000  # the shortest the clients allow with their heartbeat intervals
CONFLUENT = {
    "socket.timeout.ms": 5000,
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 300,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 1000,
}
# a KIP-848 member (group.protocol=consumer): session and heartbeat are the pods' settings
KIP848 = {
    "group.protocol": "consumer",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "socket.timeout.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
}


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "") -> None:
    """``per_partition`` records on each partition, valued ``<partition>-<tag><i>``."""
    producer = Producer({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{tag}{i}".encode(), partition=p)
    assert producer.flush(15) == 0


def poll_until(
    pollers: list[Callable[[], None]],
    condition: Callable[[], bool],
    timeout: float = 30.0,
    state: Callable[[], object] = lambda: None,
) -> None:
    """Poll every client in turn until ``condition`` holds (the clients' own polls are the
    waiting: each blocks up to its poll timeout)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met while polling: {state()}")
        for poll in pollers:
            poll()


def poller(consumer: Consumer, got: set[bytes]) -> Callable[[], None]:
    """One poll of a confluent-kafka ``consumer``, adding the value it read to ``got``."""

    def poll() -> None:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got.add(message.value())

    return poll


def values(messages: list[Any]) -> set[bytes]:
    return {m.value() if callable(m.value) else m.value for m in messages}


class AioMember(threading.Thread):
    """An aiokafka group member on its own thread and event loop (the test's other clients
    are synchronous): ``got`` the values it consumed, ``owned`` its partitions now."""

    def __init__(self, bootstrap: str, group: str, topic: str, **config: Any) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic, self.config = bootstrap, group, topic, config
        self.got: list[bytes] = []
        self.owned: set[int] = set()
        self.failure: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            asyncio.run(self._consume())
        except BaseException as exc:  # reported by the test through .failure
            self.failure = exc

    async def _consume(self) -> None:
        consumer = AIOKafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=300,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **self.config,
        )
        await consumer.start()
        try:
            while not self._stop_event.is_set():
                batches = await consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    self.got.extend(r.value for r in records)
                self.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            await consumer.stop()  # leaves the group
            self.owned = set()

    def leave(self) -> None:
        self._stop_event.set()
        self.join(timeout=20)
        assert not self.is_alive()
        assert self.failure is None, self.failure


def owned(consumer: Consumer) -> set[int]:
    """The partitions a confluent-kafka consumer is assigned."""
    return {tp.partition for tp in consumer.assignment()}
