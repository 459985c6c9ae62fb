"""Kafka Fetch's long-poll waits on hw channels (mapping.connection.waits, the base kind of wait)
with a
stand-in for the pod's Subscriber: waits wake on a notification of any watched channel, time
out otherwise, and channels are left after their linger."""

from __future__ import annotations

import asyncio

import pytest

from mapping.connection.waits import Channel, Dropped, Waits
from mapping.replication.hw_views import HwWaits
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


def test_a_notification_between_waits_is_kept_for_the_next_one() -> None:
    """A consumer's Fetch reads, then waits: what was published while it read (on any of
    its thousands of partitions) ends the wait at once; what came before ``subscribed``
    does not count (the read after it saw it)."""

    async def run() -> None:
        subscriber = FakeSubscriber()
        names = [f"hw{n}" for n in range(2000)]
        watch = Waits(subscriber, Channel).watch(*names)  # type: ignore[arg-type]
        subscriber.publish("hw7")  # not yet subscribed: nobody hears it
        assert await watch.subscribed(1.0)
        subscriber.publish("hw1999")
        subscriber.publish("hw3")
        assert await watch.next(0) is True  # at once, though no time is left to wait
        assert await watch.next(0.01) is False  # both spent by the one wake
        subscriber.publish("hw0")
        assert await watch.subscribed(1.0)  # says: count from here on
        assert await watch.next(0.01) is False
        watch.close()

    asyncio.run(run())


def test_closed_watches_and_holds_leave_nothing_on_their_channels() -> None:
    """Every Fetch opens and closes a watch on its partitions: a closed one is no longer
    told of notifications (nothing of it stays on the channels), and a session's hold is
    no watch at all."""

    async def run() -> None:
        subscriber = FakeSubscriber()
        waits = HwWaits(subscriber, linger_s=30)  # type: ignore[arg-type]
        held = waits.hold("a")
        for _ in range(100):
            with waits.watch("a", "b") as watch:
                assert await watch.subscribed(1.0)
        with waits.watch("a") as open_one:
            assert waits._channels["a"]._watches == {open_one}
        assert not waits._channels["a"]._watches and not waits._channels["b"]._watches
        assert waits._channels["a"].users == 1  # the hold
        waits.release(held)
        assert waits._channels["a"].users == 0

    asyncio.run(run())


def test_a_dropped_channel_ends_a_watch_waiting_or_not() -> None:
    async def run() -> None:
        subscriber = FakeSubscriber()
        waits = Waits(subscriber, Channel)  # type: ignore[arg-type]
        waiting, idle = waits.watch("t0", "t1"), waits.watch("t1")
        assert await waiting.subscribed(1.0) and await idle.subscribed(1.0)
        wait = asyncio.ensure_future(waiting.next(5.0))
        await asyncio.sleep(0.01)
        waits.drop(lambda key: key == "t1")
        with pytest.raises(Dropped):
            await wait
        with pytest.raises(Dropped):  # it was not waiting then: its next wait says so
            await idle.next(5.0)
        waiting.close()
        idle.close()

    asyncio.run(asyncio.wait_for(run(), 5))
