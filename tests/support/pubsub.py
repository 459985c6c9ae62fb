"""A stand-in for the pod's one pub/sub connection (mapping/connection/pubsub.py ``Subscriber``),
for the
in-process tests of the waits built on it: subscriptions confirmed at once, notifications
delivered by ``publish``, lost connections counted by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class FakeSubscriber:
    def __init__(self) -> None:
        self.handlers: dict[str, list[Callable[[bytes], None]]] = {}
        self.unsubscribed: list[str] = []
        self.left = asyncio.Event()  # set at each unsubscribe
        self.losses = 0  # Subscriber.losses: raise it to say notifications may be lost

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
        """A notification on ``channel`` (hw 5, ISR 1, nothing lagging)."""
        for handler in list(self.handlers.get(channel, [])):
            handler(b"5 1 -1")
