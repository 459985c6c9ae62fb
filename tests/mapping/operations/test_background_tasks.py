"""A pod's long-running tasks never end for a Redis error (issue 26: both pods exited when
``BrokerRegistry.run`` met a ``ClusterDownError``): the broker registration, retention, the
replicator's lease tick and fetches, and the pub/sub subscriber log it, back off and go
on. Fakes stand in for Redis; each task meets every kind of failure, then Redis answers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from redis.exceptions import ClusterDownError, RedisClusterException, SlotNotCoveredError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.connection import resilient
from mapping.connection.pubsub import Subscriber
from mapping.core.errors import OutcomeUnknown, Unavailable
from mapping.core.keys import Keys
from mapping.operations.retention import RetentionTask
from mapping.replication.replicator import Replicator
from mapping.topic.brokers import BrokerRegistry
from mapping.topic.topic_config import TopicConfig

# Every way a call may fail: what the batcher answers, and what reaches a task from redis-py
# directly (a ClusterDownError, a slot no node covers: not a RedisError at all) or a bug.
FAILURES: list[BaseException] = [
    ClusterDownError("CLUSTERDOWN The cluster is down"),
    RedisConnectionError("Error 111 connecting to 127.0.0.1:7000. Connection refused."),
    RedisTimeoutError("Timeout reading from 127.0.0.1:7000"),
    SlotNotCoveredError('Slot "12" is not covered by the cluster.'),
    RedisClusterException("Redis Cluster cannot be connected."),
    Unavailable("redis unavailable: The cluster is down"),
    OutcomeUnknown("redis outcome unknown: Connection closed by server."),
    ConnectionResetError(104, "Connection reset by peer"),
    ValueError("a bug"),
]


class Flaky:
    """An async callable that raises each of ``failures`` in turn, then answers ``reply``."""

    def __init__(self, reply: Any, failures: list[BaseException] | None = None) -> None:
        self.reply = reply
        self.failures = list(FAILURES if failures is None else failures)
        self.calls = 0

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        await asyncio.sleep(0)
        if self.failures:
            raise self.failures.pop(0)
        return self.reply() if callable(self.reply) else self.reply


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


async def _running(task: asyncio.Task[Any], check: Callable[[], Awaitable[None]]) -> None:
    """Run ``check`` while ``task`` runs; the task must still run afterwards."""
    try:
        await check()
        assert not task.done(), task.exception() if not task.cancelled() else "cancelled"
    finally:
        task.cancel()


def test_the_broker_registration_outlives_every_failure() -> None:
    call = Flaky(b"5")
    batcher = SimpleNamespace(call=call)
    registry = BrokerRegistry(batcher, Keys(), pod_id="p", address="h:1", ttl_ms=30)  # type: ignore[arg-type]

    async def main() -> None:
        task = asyncio.create_task(registry.run())

        async def check() -> None:
            await _until(lambda: registry.node_id == 5)
            calls = call.calls
            await _until(lambda: call.calls > calls + 2)  # and it keeps refreshing

        await _running(task, check)

    asyncio.run(main())
    assert call.calls > len(FAILURES)


def test_retention_outlives_every_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    task_ = RetentionTask(SimpleNamespace(), None, pod_id="p", interval_ms=10)  # type: ignore[arg-type]
    tick = Flaky(None)
    monkeypatch.setattr(task_, "tick", tick)

    async def main() -> None:
        task = asyncio.create_task(task_.run())
        await _running(task, lambda: _until(lambda: tick.calls > len(FAILURES) + 2))

    asyncio.run(main())


class _FakeSubscriber:
    def __init__(self) -> None:
        self.reconnected: list[Callable[[], None]] = []

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self.reconnected.append(callback)

    async def subscribe(self, channel: str, handler: Any) -> None:
        await asyncio.sleep(0)

    async def unsubscribe(self, channel: str, handler: Any = None) -> None:
        await asyncio.sleep(0)


def _replicator(tick: Flaky, fetch: Flaky, server: dict[str, str]) -> Replicator:
    config = TopicConfig("t", partitions=2, replication_factor=2, min_insync_replicas=1)
    topics = SimpleNamespace(keys=Keys(), names=Flaky(["t"], []), lookup=Flaky(config, []))
    partitions = SimpleNamespace(
        keys=Keys(), batcher=SimpleNamespace(call=tick), replica_fetch=fetch
    )
    client = SimpleNamespace(info=Flaky(lambda: dict(server), []), eval=Flaky(None, []))
    return Replicator(
        client,  # type: ignore[arg-type]
        topics,  # type: ignore[arg-type]
        partitions,  # type: ignore[arg-type]
        _FakeSubscriber(),  # type: ignore[arg-type]
        pod_id="p",
        lease_ms=30,
        shards=2,
    )


def test_the_replicator_outlives_every_failure() -> None:
    """Its lease tick and its fetches meet every failure; it goes on playing the followers,
    and once Redis answers again it fetches every partition again (a failover may have lost
    fetches, and nothing else would wake those followers)."""
    tick = Flaky([b"0", b"1"])
    fetch = Flaky(SimpleNamespace(complete=True))
    server = {"run_id": "a"}
    replicator = _replicator(tick, fetch, server)

    async def main() -> None:
        task = asyncio.create_task(replicator.run())

        async def check() -> None:
            await _until(lambda: replicator.owned == {0, 1} and not fetch.failures)
            await _until(lambda: not replicator._dirty and tick.calls > len(FAILURES) + 2)

        await _running(task, check)

    asyncio.run(main())
    assert fetch.calls > len(FAILURES)  # fetched again after each failure, then answered


def test_the_replicator_fetches_everything_again_when_redis_changed() -> None:
    """A restarted Redis or a failover (Sentinel: another server; a cluster: a higher epoch)
    may have lost fetches the replicator made: with no error and no reconnect it heard of,
    it still fetches every partition again."""
    tick = Flaky([b"0", b"1"], [])
    fetch = Flaky(SimpleNamespace(complete=True), [])
    server = {"run_id": "a"}
    replicator = _replicator(tick, fetch, server)

    async def main() -> None:
        task = asyncio.create_task(replicator.run())

        async def check() -> None:
            await _until(lambda: fetch.calls == 2)  # both partitions, once
            ticks = tick.calls
            await _until(lambda: tick.calls > ticks + 2)
            assert fetch.calls == 2  # nothing new: nothing fetched again
            server["run_id"] = "b"  # another Redis answers now
            await _until(lambda: fetch.calls == 4)

        await _running(task, check)

    asyncio.run(main())


class _SilentConnection:
    """A pub/sub connection whose server stopped answering (paused, cut off): writes go
    out, nothing ever comes back."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.sent: list[tuple] = []

    async def connect(self) -> None:
        self.pool.connects += 1
        if self.pool.refuse:
            raise self.pool.refuse.pop(0)

    async def send_command(self, *args: Any, **kwargs: Any) -> None:
        self.sent.append(args)

    async def read_response(self, timeout: float | None = None, **kwargs: Any) -> Any:
        if timeout is None or timeout == float("inf"):
            await asyncio.Event().wait()  # blocks for good
        await asyncio.sleep(timeout)
        return None  # nothing within the timeout

    async def disconnect(self) -> None:
        pass


class _Pool:
    def __init__(self) -> None:
        self.connects = 0
        self.refuse: list[BaseException] = [
            RedisConnectionError("Error 111 connecting"),
            SlotNotCoveredError("no node"),
            OSError("unreachable"),
            ValueError("a bug"),
        ]
        self.connection_kwargs = {"socket_timeout": 0.05}

    def make_connection(self) -> _SilentConnection:
        return _SilentConnection(self)


def test_a_silent_pub_sub_connection_is_replaced() -> None:
    """On a connection that answers nothing (its node stopped and was failed over) the
    subscriber would wait for notifications forever: it pings, gives up on the silence,
    connects again (every wait re-checks) and outlives connects that fail."""
    pool = _Pool()
    subscriber = Subscriber(SimpleNamespace(connection_pool=pool), "home")  # type: ignore[arg-type]
    subscriber.keepalive_s, subscriber.silent_s = 0.02, 0.1  # (defaults: 1 s, the Redis timeout)
    reconnected: list[int] = []
    subscriber.on_reconnect(lambda: reconnected.append(1))

    async def main() -> None:
        task = asyncio.create_task(subscriber.run())
        await _running(task, lambda: _until(lambda: len(reconnected) >= 2, timeout=10))

    asyncio.run(main())
    assert pool.connects >= 4 + 3  # the refused connects, then three connections


def test_every_backs_off_and_never_ends() -> None:
    step = Flaky(None)
    waits: list[float] = []

    async def wait(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    async def main() -> None:
        task = asyncio.create_task(resilient.every("step", step, 1.0, wait=wait))
        await _running(task, lambda: _until(lambda: step.calls > len(FAILURES) + 1))

    asyncio.run(main())
    # after failures: 0.1 s, doubling, at most the interval; after a success: the interval
    assert waits[: len(FAILURES)] == [min(0.1 * 2**i, 1.0) for i in range(len(FAILURES))]
    assert waits[len(FAILURES)] == 1.0
