"""mapping.connection.waits on a real Redis (pub/sub confirmations, reconnects): one lingering
subscription per channel, the read once subscribed, wake by level or by any message,
recheck after a reconnect, timeouts and drops."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis
from redis.asyncio import Redis

from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess
from mapping.connection.pubsub import Subscriber
from mapping.connection.waits import Channel, Dropped, Waits, Watch
from tests.support.waiting import wait_until_async


class Counter(Channel):
    """A kind of wait as the module docstring describes: the level is a number kept in a
    Redis key and published on the channel when it changes."""

    def __init__(self, client: Redis, name: str) -> None:
        super().__init__(name)
        self.client = client
        self.reads = 0

    def on_message(self, message: bytes) -> None:
        self.advance(int(message))

    async def read(self) -> None:
        self.reads += 1
        self.advance(int(await self.client.get(self.name) or 0))

    def missed(self) -> None:
        if self.known:
            self.recheck_in(0)


def subscribes(url: str) -> int:
    with redis.Redis.from_url(url) as admin:
        return int(admin.info("commandstats").get("cmdstat_subscribe", {}).get("calls", 0))


def listeners(url: str, channel: str) -> int:
    with redis.Redis.from_url(url) as admin:
        return int(admin.pubsub_numsub(channel)[0][1])


def run(url: str, body: Callable[[Redis, Subscriber], Awaitable[None]]) -> None:
    async def main() -> None:
        client = connect(url)
        subscriber = Subscriber(client, "home")
        task = asyncio.create_task(subscriber.run())
        try:
            await asyncio.wait_for(body(client, subscriber), 20)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.aclose()

    asyncio.run(main())


def test_one_lingering_subscription_serves_every_watcher(own_redis: RedisProcess) -> None:
    async def body(client: Redis, subscriber: Subscriber) -> None:
        waits = Waits(subscriber, Channel, linger_s=0.3)
        await wait_until_async(lambda: subscribes(own_redis.url) >= 1)  # the home channel
        before = subscribes(own_redis.url)
        watches = [waits.watch("events") for _ in range(50)]
        assert all(await asyncio.gather(*(w.subscribed(5) for w in watches)))
        woken = asyncio.gather(*(w.next(5) for w in watches))
        await asyncio.sleep(0.01)
        await client.publish("events", "x")
        assert all(await woken)
        for watch in watches:
            watch.close()
        # within the linger the next watcher finds the channel subscribed still
        with waits.watch("events") as again:
            assert await again.subscribed(5)
        assert subscribes(own_redis.url) - before == 1
        assert listeners(own_redis.url, "events") == 1
        await asyncio.sleep(0.5)  # the linger runs out: the channel is left
        assert not waits._channels
        await wait_until_async(lambda: listeners(own_redis.url, "events") == 0)

    run(own_redis.url, body)


def test_the_read_once_subscribed_closes_the_race(own_redis: RedisProcess) -> None:
    """A change made before the subscription, never published, still wakes the watcher."""

    async def body(client: Redis, subscriber: Subscriber) -> None:
        waits = Waits(subscriber, lambda name: Counter(client, name))
        await client.set("counter", 7)
        with waits.watch("counter") as watch:
            assert await watch.until(5, 5) == 7
            assert watch.channel.reads == 1
            # known now: answered from what the pod knows, with no Redis call
            assert await watch.until(7, 5) == 7
            assert watch.channel.reads == 1

    run(own_redis.url, body)


def test_watchers_wake_when_the_level_reaches_theirs(own_redis: RedisProcess) -> None:
    async def body(client: Redis, subscriber: Subscriber) -> None:
        waits = Waits(subscriber, lambda name: Counter(client, name))
        watches = [waits.watch("level") for _ in range(3)]
        assert await watches[0].subscribed(5)
        woken: list[int] = []

        async def wait(watch: Watch[Counter], level: int) -> None:
            assert await watch.until(level, 5) is not None
            woken.append(level)

        levels = (9, 3, 5)
        waiting = [asyncio.ensure_future(wait(w, n)) for w, n in zip(watches, levels, strict=True)]
        await asyncio.sleep(0.05)
        await client.publish("level", "4")
        await wait_until_async(lambda: woken == [3])
        await client.publish("level", "9")
        await asyncio.gather(*waiting)
        assert woken[0] == 3 and sorted(woken[1:]) == [5, 9]
        for watch in watches:
            watch.close()

    run(own_redis.url, body)


def test_waits_time_out(own_redis: RedisProcess) -> None:
    async def body(client: Redis, subscriber: Subscriber) -> None:
        waits = Waits(subscriber, lambda name: Counter(client, name))
        with waits.watch("quiet") as watch:
            assert await watch.until(1, 0.1) is None
            assert not watch.channel.watched  # the timed-out watcher is gone
        notices = Waits(subscriber, Channel)
        with notices.watch("quiet") as watch:
            assert await watch.subscribed(5)
            assert await watch.next(0.1) is False

    run(own_redis.url, body)


def test_a_reconnect_rechecks_every_channel(own_redis: RedisProcess) -> None:
    """Notifications missed while the pub/sub connection was down: a kind with a read reads
    again, the base kind counts a notification."""

    async def body(client: Redis, subscriber: Subscriber) -> None:
        levels = Waits(subscriber, lambda name: Counter(client, name))
        notices = Waits(subscriber, Channel)
        with levels.watch("counted") as counted, notices.watch("noticed") as noticed:
            assert await counted.subscribed(5) and await noticed.subscribed(5)
            reached = asyncio.ensure_future(counted.until(2, 15))
            notified = asyncio.ensure_future(noticed.next(15))
            await asyncio.sleep(0.05)
            await client.set("counted", 2)  # changed, never published
            await client.client_kill_filter(_type="pubsub")
            assert await reached == 2
            assert await notified is True
            assert subscriber.reconnects == 1
            assert counted.channel.reads == 2

    run(own_redis.url, body)


def test_a_dropped_channel_ends_its_waits(own_redis: RedisProcess) -> None:
    async def body(client: Redis, subscriber: Subscriber) -> None:
        waits = Waits(subscriber, lambda name: Counter(client, name))
        with waits.watch("gone") as watch:
            waiting = asyncio.ensure_future(watch.until(1, 5))
            await asyncio.sleep(0.05)
            waits.drop(lambda key: key == "gone")
            with pytest.raises(Dropped):
                await waiting
        assert not waits._channels
        await wait_until_async(lambda: listeners(own_redis.url, "gone") == 0)

    run(own_redis.url, body)
