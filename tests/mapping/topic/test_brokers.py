"""The Kafka broker registry (mapping/topic/brokers.py) on a real Redis, around an outage: the
brokers a pod last read are what it answers while Redis cannot be read, and for one TTL after
the outage a broker listed before it stays listed while its registration, expired during the
outage, is not renewed yet; a broker that stays away is dropped after that TTL, however many
outages follow. A pod is registered before it serves."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect, make_batcher
from mapping.connection.embedded import free_port
from mapping.core.errors import Unavailable
from mapping.core.keys import Keys
from mapping.topic.brokers import BrokerRegistry
from tests.support.pods import Pod

TTL_MS = 400


class Unreachable:
    """A batcher whose Redis cannot be reached."""

    async def call(self, *command: Any) -> Any:
        raise Unavailable("redis unavailable: connection refused")


def run(redis_url: str, body: Callable[[RedisBatcher, Keys], Awaitable[None]]) -> None:
    async def main() -> None:
        client = connect(redis_url)
        batcher = make_batcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            await body(batcher, Keys(prefix=f"brk-{uuid.uuid4().hex[:8]}"))
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await client.aclose()

    asyncio.run(main())


def _ports(brokers: list[tuple[int, str, int]]) -> list[int]:
    return sorted(port for _, _, port in brokers)


async def _two_brokers(batcher: RedisBatcher, keys: Keys) -> tuple[BrokerRegistry, BrokerRegistry]:
    """This pod (h:1) and another (h:2), both registered and listed by this pod."""
    here = BrokerRegistry(batcher, keys, pod_id="a", address="h:1", ttl_ms=TTL_MS)
    other = BrokerRegistry(batcher, keys, pod_id="b", address="h:2", ttl_ms=TTL_MS)
    await other.refresh()
    await here.refresh()
    assert _ports(here.last_live) == [1, 2]
    return here, other


def test_an_outage_answers_the_brokers_last_read_and_keeps_them_one_ttl_after(
    redis_url: str,
) -> None:
    async def body(batcher: RedisBatcher, keys: Keys) -> None:
        here, other = await _two_brokers(batcher, keys)

        here.batcher = Unreachable()  # type: ignore[assignment]
        with pytest.raises(Unavailable):
            await here.refresh()
        assert _ports(here.last_live) == [1, 2]  # what Metadata answers meanwhile
        await asyncio.sleep(TTL_MS * 1.5 / 1000)  # both registrations expire, unrenewed

        here.batcher = batcher
        await here.refresh()  # Redis is back: only this pod is registered again
        assert _ports(here.last_live) == [1, 2]
        await other.refresh()
        assert _ports(await here.live()) == [1, 2]
        # a broker that does not come back is dropped once the TTL after the outage passed
        await asyncio.sleep(TTL_MS * 1.5 / 1000)
        await here.refresh()
        assert _ports(here.last_live) == [1]

    run(redis_url, body)


def test_outages_one_after_another_do_not_keep_a_dead_broker(redis_url: str) -> None:
    """A broker read before an outage is kept one TTL after it, not once more by each outage
    that follows: a flapping link to Redis would keep a dead pod listed for good (partitions
    led by it, coordinators on it)."""

    async def body(batcher: RedisBatcher, keys: Keys) -> None:
        here, _dead = await _two_brokers(batcher, keys)
        died = time.monotonic()  # b refreshes no more
        # outages a third of a TTL apart, until b's registration and a TTL after the
        # outage that followed its last read are long over
        while time.monotonic() - died < 4 * TTL_MS / 1000:
            here.batcher = Unreachable()  # type: ignore[assignment]
            with pytest.raises(Unavailable):
                await here.refresh()
            await asyncio.sleep(TTL_MS / 8000)
            here.batcher = batcher
            await here.refresh()
            await asyncio.sleep(TTL_MS / 3000)
        await here.refresh()
        assert _ports(here.last_live) == [1]

    run(redis_url, body)


def test_without_an_outage_an_expired_broker_is_dropped_at_once(redis_url: str) -> None:
    async def body(batcher: RedisBatcher, keys: Keys) -> None:
        here, _other = await _two_brokers(batcher, keys)
        await asyncio.sleep(TTL_MS * 1.5 / 1000)
        await here.refresh()
        assert _ports(here.last_live) == [1]

    run(redis_url, body)


def test_a_pod_that_left_is_not_listed_again_by_its_refresh_task(redis_url: str) -> None:
    """A pod draining after SIGTERM has unregistered while its refresh task still runs: the
    task must not put it back (its entry would outlive the process by a TTL, and a client's
    first Metadata could name the gone pod its controller)."""

    async def body(batcher: RedisBatcher, keys: Keys) -> None:
        leaving = BrokerRegistry(batcher, keys, pod_id="a", address="h:1", ttl_ms=TTL_MS)
        staying = BrokerRegistry(batcher, keys, pod_id="b", address="h:2", ttl_ms=TTL_MS)
        refreshing = asyncio.create_task(leaving.run())
        try:
            await asyncio.sleep(TTL_MS / 1000)  # a few refreshes
            await staying.refresh()
            assert _ports(staying.last_live) == [1, 2]
            await leaving.unregister()
            await asyncio.sleep(TTL_MS / 1000)  # as many refreshes again: none registers
            await staying.refresh()
            assert _ports(staying.last_live) == [2]
        finally:
            refreshing.cancel()
            await asyncio.gather(refreshing, return_exceptions=True)

    run(redis_url, body)


def test_the_first_refresh_is_told_whether_it_worked_or_not(redis_url: str) -> None:
    """A pod waits for its registry's first refresh before it serves (adapter/server.py), so
    that a client's first Metadata lists it: the event is set by the first refresh, and by a
    failed one too (a Redis that cannot be reached does not keep the pod closed)."""

    async def body(batcher: RedisBatcher, keys: Keys) -> None:
        registry = BrokerRegistry(batcher, keys, pod_id="a", address="h:1", ttl_ms=TTL_MS)
        assert not registry.first_refresh.is_set()
        await registry.refresh()
        assert registry.first_refresh.is_set()
        assert _ports(registry.last_live) == [1]
        failing = BrokerRegistry(batcher, keys, pod_id="b", address="h:2", ttl_ms=TTL_MS)
        failing.batcher = Unreachable()  # type: ignore[assignment]
        with pytest.raises(Unavailable):
            await failing.refresh()
        assert failing.first_refresh.is_set()

    run(redis_url, body)


def test_a_pod_is_listed_when_it_answers_its_first_request(
    redis_url: str, start_pod: Callable[..., Pod]
) -> None:
    """Right after a pod answers its first request (what Pod.start waits for), the registry
    lists it: a second pod started beside a first is among the first's brokers at once."""
    from confluent_kafka.admin import AdminClient

    prefix = f"listed-{uuid.uuid4().hex[:8]}"
    first = start_pod(redis_url, "--key-prefix", prefix)
    second = start_pod(redis_url, "--key-prefix", prefix)
    admin = AdminClient({"bootstrap.servers": first.bootstrap, "socket.timeout.ms": 5000})
    ports = sorted(broker.port for broker in admin.list_topics(timeout=10).brokers.values())
    assert ports == sorted([first.kafka_port, second.kafka_port])


def test_a_pod_answers_no_one_before_its_first_refresh(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` (adapter/server.py) takes its first connection only once its registry's
    first refresh is done: with the registration held back, the pod is not ready and a
    request sent to it waits unanswered (the kernel holds the connection in the listen
    backlog); let through, the pod answers it. (Pods in processes of their own, as
    test_a_pod_is_listed_when_it_answers_its_first_request starts, lose that race too
    rarely to be seen.)"""
    import anyio

    from adapter.server import serve
    from adapter.settings import Settings

    released = threading.Event()
    register = BrokerRegistry.register

    async def held(self: BrokerRegistry) -> int:
        await anyio.to_thread.run_sync(released.wait)
        return await register(self)

    monkeypatch.setattr(BrokerRegistry, "register", held)
    port = free_port()
    settings = Settings(
        redis_url=redis_url,
        port=port,
        kafka_port=free_port(),
        key_prefix=f"held-{uuid.uuid4().hex[:8]}",
    )

    async def body() -> None:
        ready = anyio.Event()
        async with anyio.create_task_group() as serving:
            serving.start_soon(partial(serve, settings, ready=ready))
            try:
                await held_back(ready)
            finally:  # the held registration would keep serve from stopping
                released.set()
            serving.cancel_scope.cancel()

    async def held_back(ready: anyio.Event) -> None:
        with anyio.fail_after(10):
            while True:  # the listener is open (connect_tcp answers) before the wait
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                    break
                except OSError:
                    await anyio.sleep(0.05)
        async with stream:
            await stream.send(b"V1|7|PING|\n")
            with anyio.move_on_after(1.0):  # under a third of the TTL (serve's bound)
                answer = await stream.receive()
                pytest.fail(f"the pod answered {answer!r} before its registration")
            assert not ready.is_set()
            released.set()
            with anyio.fail_after(10):
                assert (await stream.receive()).startswith(b"V1|7|OK")
                await ready.wait()

    thresholds = gc.get_threshold()  # serve sets the process's GC up for a pod
    try:
        anyio.run(body)
    finally:
        released.set()
        gc.unfreeze()
        gc.set_threshold(*thresholds)
