"""An incremental fetch session's follower (adapter/kafka/session_follow.py): a look that
settles a partition takes it out of what the next fetch looks at, a notification on its hw
channel puts it back and wakes the waiting fetch, a changed topic brings its partitions
back, and a closed session leaves its channels. In process, with a stand-in subscriber."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from adapter.kafka import errors
from adapter.kafka.fetch_reads import Answer, Wanted
from adapter.kafka.fetch_sessions import FetchSession, SessionPartition
from adapter.kafka.session_follow import SessionFollower
from mapping.connection.batcher import Pending
from mapping.core.keys import Keys
from mapping.partition.kafka import FetchRead
from mapping.replication.hw_views import HwWaits
from mapping.topic.topic_config import TopicConfig
from tests.support.pubsub import FakeSubscriber

CONFIG = TopicConfig("t", 3, 1, 1, topic_id="id-1")
KEYS = Keys("p")


class FakeStore:
    """KafkaStore's start_read: every partition at V1 hw 4 (Kafka's 5)."""

    def start_read(
        self, config: TopicConfig, partition: int, offset: int, count: int, raw: bool = False
    ) -> Any:
        future = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return Pending(future, lambda _: FetchRead(4, -1, [], False))


async def setup() -> tuple[FakeSubscriber, HwWaits, FetchSession, SessionFollower]:
    subscriber = FakeSubscriber()
    waits = HwWaits(subscriber, linger_s=0.05)  # type: ignore[arg-type]
    partitions = {("t", p): SessionPartition("t", p, 5, 1 << 20) for p in range(3)}
    session = FetchSession(7, partitions, 0.0, 0.0)
    follower = SessionFollower(waits, KEYS, session)
    follower.sync()
    await asyncio.sleep(0.01)  # the subscriptions are confirmed
    return subscriber, waits, session, follower


async def look(
    waits: HwWaits, session: FetchSession, follower: SessionFollower, **answers: Answer
) -> None:
    """A look at every dirty partition through the views (read once: remembered), answered
    caught up at hw 5 unless ``answers`` (by "p<n>") say otherwise."""
    looked = []
    for p in session.to_read():
        w = Wanted(p.topic, p.partition, p.offset, p.max_bytes, CONFIG)
        w.channel = KEYS.hw_channel(p.topic, p.partition)
        await waits.start_read(FakeStore(), CONFIG, p.partition, w.channel, p.offset, 10)  # type: ignore[arg-type]
        caught_up = Answer(errors.NONE, 5, 0, None, 5, 4)
        looked.append((w, answers.get(f"p{p.partition}", caught_up)))
    follower.settle(looked, committed=False)


def test_settled_partitions_are_left_out_until_notified() -> None:
    async def run() -> None:
        subscriber, waits, session, follower = await setup()
        assert session.dirty == {("t", 0), ("t", 1), ("t", 2)}
        behind = Answer(errors.NONE, 5, 0, b"records", 5, 4)
        failed = Answer(errors.OFFSET_OUT_OF_RANGE, 5, 0, None, 5, 4)
        await look(waits, session, follower, p1=behind, p2=failed)
        assert session.dirty == {("t", 1), ("t", 2)}  # records, an error: looked at again
        await look(waits, session, follower)
        assert session.dirty == set() and [p.partition for p in session.to_read()] == []

        waiting = asyncio.ensure_future(follower.wait(5.0))
        await asyncio.sleep(0)
        subscriber.publish(KEYS.hw_channel("t", 2))
        assert await waiting is True
        assert session.dirty == {("t", 2)}
        assert await follower.wait(0.01) is False  # no notification since

    asyncio.run(asyncio.wait_for(run(), 5))


def test_a_notification_during_a_look_keeps_the_partition_dirty() -> None:
    async def run() -> None:
        subscriber, waits, session, follower = await setup()
        p = session.partitions[("t", 0)]
        w = Wanted("t", 0, p.offset, p.max_bytes, CONFIG, channel=KEYS.hw_channel("t", 0))
        await waits.start_read(FakeStore(), CONFIG, 0, w.channel, p.offset, 10)  # type: ignore[arg-type]
        subscriber.publish(w.channel)  # after the read, before the look is settled
        follower.settle([(w, Answer(errors.NONE, 5, 0, None, 5, 4))], committed=False)
        assert ("t", 0) in session.dirty

    asyncio.run(asyncio.wait_for(run(), 5))


def test_a_changed_topic_brings_its_partitions_back() -> None:
    async def run() -> None:
        _, waits, session, follower = await setup()
        follower.topics_now({"t": CONFIG})
        await look(waits, session, follower)
        assert session.dirty == set()
        follower.topics_now({"t": CONFIG})  # the same settings: nothing to look at
        assert session.dirty == set()
        follower.topics_now({"t": TopicConfig("t", 6, 1, 1, topic_id="id-1")})  # grown
        assert session.dirty == {("t", 0), ("t", 1), ("t", 2)}

    asyncio.run(asyncio.wait_for(run(), 5))


def test_forgotten_partitions_and_a_closed_session_leave_their_channels() -> None:
    async def run() -> None:
        subscriber, waits, session, follower = await setup()
        session.update([], [("t", 0)])
        follower.sync()
        assert set(follower.channels) == {("t", 1), ("t", 2)}
        follower.close()
        assert follower.channels == {} and follower.closed
        await asyncio.sleep(0.15)  # their linger ran out: the pod stopped listening
        assert all(not handlers for handlers in subscriber.handlers.values())

    asyncio.run(asyncio.wait_for(run(), 5))


def test_a_session_by_topic_id_follows_each_partition_once_its_id_names_a_topic() -> None:
    """Fetch v13+: partitions keyed by topic id, followed on their topic's channels; one
    whose id named no topic has no channel until the id resolves (FetchSession.resolve)."""

    async def run() -> None:
        subscriber = FakeSubscriber()
        waits = HwWaits(subscriber, linger_s=0.05)  # type: ignore[arg-type]
        known, unknown = uuid.UUID(int=1), uuid.UUID(int=2)
        partitions = {
            (known, 0): SessionPartition("t", 0, 5, 1 << 20, topic_id=known),
            (unknown, 0): SessionPartition(None, 0, 5, 1 << 20, topic_id=unknown),
        }
        session = FetchSession(7, partitions, 0.0, 0.0, topic_ids=True)
        follower = SessionFollower(waits, KEYS, session)
        follower.sync()
        assert set(follower.channels) == {(known, 0)} and follower.topics == {"t": 1}
        session.resolve((unknown, 0), "u")
        follower.sync()
        assert set(follower.channels) == {(known, 0), (unknown, 0)}
        assert follower.topics == {"t": 1, "u": 1}
        await asyncio.sleep(0.01)
        session.dirty.clear()
        subscriber.publish(KEYS.hw_channel("u", 0))
        assert session.dirty == {(unknown, 0)}
        session.update([], [(known, 0)])
        follower.sync()
        assert set(follower.channels) == {(unknown, 0)} and follower.topics == {"u": 1}

    asyncio.run(asyncio.wait_for(run(), 5))
