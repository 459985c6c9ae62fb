"""Kafka Fetch's long-poll waits on hw channels (mapping.waits, the base kind of wait) with a
stand-in for the pod's Subscriber: waits wake on a notification of any watched channel, time
out otherwise, and channels are left after their linger."""

from __future__ import annotations

import asyncio

from mapping.waits import Channel, Waits
from tests.support.pubsub import FakeSubscriber


def test_a_notification_on_any_watched_channel_wakes_the_wait() -> None:
    async def run() -> None:
        subscriber = FakeSubscriber()
        watch = Waits(subscriber, Channel, linger_s=0.05).watch("a", "b")  # type: ignore[arg-type]
        assert await watch.subscribed(1.0)
        asyncio.get_running_loop().call_soon(subscriber.publish, "b")
        assert await watch.next(5.0) is True
        assert await watch.next(0.01) is False  # re-armed: the old notification is spent
        watch.close()

    asyncio.run(run())


def test_channels_are_shared_and_left_after_their_linger() -> None:
    async def run() -> None:
        subscriber = FakeSubscriber()
        owner = Waits(subscriber, Channel, linger_s=0.05)  # type: ignore[arg-type]
        first, second = owner.watch("a"), owner.watch("a")
        await first.subscribed(1.0)
        await second.subscribed(1.0)
        assert len(subscriber.handlers["a"]) == 1  # one subscription for the pod
        first.close()
        subscriber.publish("a")
        assert await second.next(1.0) is True
        second.close()
        await subscriber.left.wait()  # the linger timer runs out
        assert subscriber.unsubscribed == ["a"] and subscriber.handlers["a"] == []

    asyncio.run(asyncio.wait_for(run(), 5))
