"""Waiting for a partition's high watermark to move, on the hw notifications every script
publishes (see _partition.lua) through the pod's one pub/sub connection: Kafka Fetch
long-polls wait here, never by polling Redis.

A watch subscribes to its partitions' hw channels (once per channel for the whole pod; a
channel is left ``linger_s`` after its last watch), then the caller reads once more (a
change between its first read and the subscription is not missed) and waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from mapping.pubsub import Subscriber


class _Channel:
    __slots__ = ("name", "waiters", "linger", "handler")

    def __init__(self, name: str) -> None:
        self.name = name
        self.waiters: set[asyncio.Future[None]] = set()
        self.linger: asyncio.TimerHandle | None = None

        def handler(_: bytes) -> None:
            for future in self.waiters:
                if not future.done():
                    future.set_result(None)

        self.handler = handler


class HighWatermarkWatch:
    def __init__(self, subscriber: Subscriber, linger_s: float = 30.0) -> None:
        self.subscriber = subscriber
        self.linger_s = linger_s
        self._channels: dict[str, _Channel] = {}

    def watch(self, channels: Iterable[str]) -> Watch:
        """A watch on these channels: ``await watch.subscribed(timeout)``, read, then
        ``wait``; ``close`` it in every case."""
        return Watch(self, [self._channel(name) for name in channels])

    def _channel(self, name: str) -> _Channel:
        channel = self._channels.get(name)
        if channel is None:
            channel = self._channels[name] = _Channel(name)
        if channel.linger is not None:
            channel.linger.cancel()
            channel.linger = None
        return channel

    def _release(self, channel: _Channel) -> None:
        if channel.waiters or channel.linger is not None:
            return
        loop = asyncio.get_running_loop()
        channel.linger = loop.call_later(self.linger_s, self._drop, channel)

    def _drop(self, channel: _Channel) -> None:
        channel.linger = None
        if channel.waiters or self._channels.get(channel.name) is not channel:
            return
        del self._channels[channel.name]
        asyncio.ensure_future(self.subscriber.unsubscribe(channel.name, channel.handler))


class Watch:
    """One waiter on some channels: ``wait`` returns at the first notification on any of
    them after the watch began, or at the timeout."""

    def __init__(self, owner: HighWatermarkWatch, channels: list[_Channel]) -> None:
        self.owner = owner
        self.channels = channels
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for channel in channels:
            channel.waiters.add(self.future)

    async def subscribed(self, timeout_s: float) -> bool:
        """True once Redis confirmed every subscription; False at the timeout (the pub/sub
        connection is down: the caller answers with what it has)."""
        subscriber = self.owner.subscriber
        try:
            await asyncio.wait_for(
                asyncio.gather(*(subscriber.subscribe(c.name, c.handler) for c in self.channels)),
                max(0.0, timeout_s),
            )
        except TimeoutError:
            return False
        return True

    async def wait(self, timeout_s: float) -> bool:
        """True when notified, False at the timeout. Re-arms for the next wait."""
        try:
            await asyncio.wait_for(asyncio.shield(self.future), max(0.0, timeout_s))
            notified = True
        except TimeoutError:
            notified = False
        self._rearm()
        return notified

    def _rearm(self) -> None:
        old = self.future
        self.future = asyncio.get_running_loop().create_future()
        for channel in self.channels:
            channel.waiters.discard(old)
            channel.waiters.add(self.future)

    def close(self) -> None:
        for channel in self.channels:
            channel.waiters.discard(self.future)
            self.owner._release(channel)
        if not self.future.done():
            self.future.cancel()
