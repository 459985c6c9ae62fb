"""The pod's views of partitions (mapping/replication/hw_views.py): a read issued while the pod
listens
on the partition's hw channel is remembered, and stays the partition's state until a
notification, a lost pub/sub connection, a re-created topic or a lagging ISR member's
deadline says otherwise; followers hear every notification. A stand-in subscriber and
store: no Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mapping.connection.batcher import Pending
from mapping.partition.kafka import FetchRead
from mapping.replication.hw_views import HwChannel, HwWaits
from mapping.topic.topic_config import TopicConfig
from tests.support.pubsub import FakeSubscriber

CONFIG = TopicConfig("t", 2, 1, 1, topic_id="id-1")


class FakeStore:
    """KafkaStore's start_read, answering ``state``: (hw, log start, next_change_ms)."""

    def __init__(self) -> None:
        self.state = (4, -1, -1)
        self.reads = 0

    def start_read(
        self, config: TopicConfig, partition: int, offset: int, count: int, raw: bool = False
    ) -> Any:
        self.reads += 1
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        hw, log_start, change = self.state
        return Pending(future, lambda _: FetchRead(hw, log_start, [], False, -1, change))


def run(test: Callable[[FakeSubscriber, HwWaits, FakeStore], Any]) -> None:
    async def main() -> None:
        subscriber = FakeSubscriber()
        waits = HwWaits(subscriber, linger_s=0.05)  # type: ignore[arg-type]
        await test(subscriber, waits, FakeStore())

    asyncio.run(asyncio.wait_for(main(), 5))


def test_a_read_is_remembered_only_while_the_channel_is_listened_to() -> None:
    async def test(subscriber: FakeSubscriber, waits: HwWaits, store: FakeStore) -> None:
        await waits.start_read(store, CONFIG, 0, "ch", 0, 10)  # type: ignore[arg-type]
        assert waits.known("ch", CONFIG) is None  # nobody listens: nothing to keep it current
        channel = waits.hold("ch")
        with waits.watch("ch") as watch:
            assert await watch.subscribed(1.0)
        read = await waits.start_read(store, CONFIG, 0, "ch", 0, 10)  # type: ignore[arg-type]
        assert read.high_watermark == 4
        view = waits.known("ch", CONFIG)
        assert view is not None and (view.high_watermark, view.entries) == (4, [])
        waits.release(channel)

    run(test)


def test_a_view_goes_stale_with_a_notification_a_lost_connection_or_another_topic() -> None:
    async def test(subscriber: FakeSubscriber, waits: HwWaits, store: FakeStore) -> None:
        heard: list[str] = []
        channel = waits.hold("ch")
        channel.followers.append(lambda c: heard.append(c.name))
        with waits.watch("ch") as watch:
            await watch.subscribed(1.0)
        heard.clear()

        async def fresh() -> None:
            await waits.start_read(store, CONFIG, 0, "ch", 0, 10)  # type: ignore[arg-type]
            assert waits.known("ch", CONFIG) is not None

        await fresh()
        subscriber.publish("ch")
        assert waits.known("ch", CONFIG) is None and heard == ["ch"]
        await fresh()
        subscriber.losses += 1  # notifications may have been missed meanwhile
        assert waits.known("ch", CONFIG) is None
        await fresh()
        recreated = TopicConfig("t", 2, 1, 1, topic_id="id-2")
        assert waits.known("ch", recreated) is None
        assert waits.known("ch", CONFIG) is not None
        waits.release(channel)

    run(test)


def test_a_read_racing_a_notification_is_not_kept() -> None:
    async def test(subscriber: FakeSubscriber, waits: HwWaits, store: FakeStore) -> None:
        channel = waits.hold("ch")
        with waits.watch("ch") as watch:
            await watch.subscribed(1.0)
        pending = waits.start_read(store, CONFIG, 0, "ch", 0, 10)  # type: ignore[arg-type]
        subscriber.publish("ch")  # after the read was issued, before its reply was taken
        await pending
        assert waits.known("ch", CONFIG) is None
        waits.release(channel)

    run(test)


def test_a_lagging_isr_member_bounds_a_view_in_time() -> None:
    async def test(subscriber: FakeSubscriber, waits: HwWaits, store: FakeStore) -> None:
        channel: HwChannel = waits.hold("ch")
        with waits.watch("ch") as watch:
            await watch.subscribed(1.0)
        store.state = (4, -1, 50)  # a follower drops out of the ISR in 50 ms
        await waits.start_read(store, CONFIG, 0, "ch", 0, 10)  # type: ignore[arg-type]
        assert waits.known("ch", CONFIG) is not None
        assert waits.known("ch", CONFIG, lasting=True) is None
        await asyncio.sleep(0.08)
        assert waits.known("ch", CONFIG) is None
        waits.release(channel)

    run(test)


def test_a_held_channel_lingers_after_its_release() -> None:
    async def test(subscriber: FakeSubscriber, waits: HwWaits, store: FakeStore) -> None:
        channel = waits.hold("ch")
        await asyncio.sleep(0.01)
        assert channel.known and subscriber.handlers["ch"]
        waits.release(channel)
        for _ in range(3):  # taken and let go again within the linger: it stays
            await asyncio.sleep(0.03)
            waits.release(waits.hold("ch"))
            assert subscriber.handlers["ch"]
        await asyncio.sleep(0.12)  # then left once nobody held it for the linger
        assert subscriber.handlers["ch"] == []
        assert waits.known("ch", CONFIG) is None

    run(test)
