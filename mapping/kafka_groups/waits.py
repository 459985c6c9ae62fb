"""Waiting for a Kafka group's state to change, woken by pub/sub (never by polling Redis).

Every ``kgroup_*`` script that changes a group publishes on the group's ``events`` channel.
A JoinGroup or SyncGroup that must wait holds a ``GroupChannel`` (subscribed through the
pod's one ``Subscriber`` before its first script call, so nothing published after that call
is missed), takes ``seen = channel.events`` before each script call, and then
``wait(seen, seconds)``: it returns at once when an event came in the meantime, else on the
next event or when ``seconds`` (the deadline the script named) ran out; then the caller's
script checks again. The subscription lingers after its last waiter (``linger_s``), so a
group that rebalances often does not pay a SUBSCRIBE round trip each time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mapping.pubsub import Subscriber


class GroupChannel:
    def __init__(self, name: str) -> None:
        self.name = name
        self.events = 0  # events received so far
        self.users = 0
        self._waiters: list[asyncio.Future[None]] = []
        self.subscribed: asyncio.Task[None] | None = None
        self.linger: asyncio.TimerHandle | None = None

    def notify(self, _message: bytes = b"") -> None:
        self.events += 1
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def wait(self, seen: int, seconds: float) -> None:
        """Until an event after ``seen`` arrived, or ``seconds`` passed."""
        if self.events != seen:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        try:
            await asyncio.wait_for(future, seconds)
        except TimeoutError:
            pass
        finally:
            if future in self._waiters:
                self._waiters.remove(future)


def _failed(task: asyncio.Task[None] | None) -> bool:
    if task is None or not task.done():
        return False
    return task.cancelled() or task.exception() is not None


class GroupWatches:
    """The pod's subscriptions to group event channels, shared by all its waiters."""

    def __init__(self, subscriber: Subscriber, *, linger_s: float = 30.0) -> None:
        self.subscriber = subscriber
        self.linger_s = linger_s
        self._channels: dict[str, GroupChannel] = {}
        # Messages may have been missed while the pub/sub connection was down.
        subscriber.on_reconnect(self._notify_all)

    def _notify_all(self) -> None:
        for channel in self._channels.values():
            channel.notify()

    @contextlib.asynccontextmanager
    async def watching(self, name: str) -> AsyncIterator[GroupChannel]:
        channel = self._channels.get(name)
        # a failed SUBSCRIBE is tried again by the next waiter
        if channel is None or _failed(channel.subscribed):
            channel = self._channels[name] = GroupChannel(name)
            channel.subscribed = asyncio.ensure_future(
                self.subscriber.subscribe(name, channel.notify)
            )
        if channel.linger is not None:
            channel.linger.cancel()
            channel.linger = None
        channel.users += 1
        try:
            await asyncio.shield(channel.subscribed)
            yield channel
        finally:
            channel.users -= 1
            if channel.users == 0:
                loop = asyncio.get_running_loop()
                channel.linger = loop.call_later(self.linger_s, self._drop, name)

    def _drop(self, name: str) -> None:
        channel = self._channels.get(name)
        if channel is None or channel.users > 0:
            return
        del self._channels[name]
        asyncio.ensure_future(self.subscriber.unsubscribe(name))
