"""Kafka Fetch's long-poll waits on hw channels (mapping.waits, the base kind of wait) with a
stand-in for the pod's Subscriber: waits wake on a notification of any watched channel, time
out otherwise, and channels are left after their linger."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mapping.waits import Channel, Waits


class FakeSubscriber:
    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable[[bytes], None]]] = {}
        self.unsubscribed: list[str] = []
        self.left = asyncio.Event()

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        pass

    async def subscribe(self, channel: str, handler: Callable[[bytes], None]) -> None:
        handlers = self.handlers.setdefault(channel, [])
        if handler not in handlers:
            handlers.append(handler)

    async def unsubscribe(self, channel: str, handler: Callable[[bytes], None]) -> None:
        self.handlers[channel].remove(handler)
        self.unsubscribed.append(channel)
        self.left.set()

    def publish(self, channel: str) -> None:
        for handler in list(self.handlers.get(channel, [])):
            handler(b"5 1 -1")


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
