"""What a Kafka Fetch knows of a partition without reading it: the hw channels its long-polls
watch (mapping/connection/waits.py) remember the partition's last read state.

Every change a Fetch answer reports besides records is published on the partition's hw
channel: an append that moves the hw, a transaction marker (the last stable offset), the
durable mark (``--redis-wait-replicas``), DeleteRecords and retention (the log start), an
ISR change. So while the pod listens on the channel (it is ``known``), a state read from
Redis stays the state until a notification comes (the channel's level moves), the pub/sub
connection is lost (``Subscriber.losses``), or time alone moves the hw (an ISR member that
lags drops out: the status' ``next_change_ms``). A read is remembered with the level it was
issued at, so a notification that races it makes it stale rather than lost.

A consumer caught up on a partition (its position at the hw, or at the last stable offset
under read_committed) gets its answer from that view: no Redis call for the partitions
where nothing happened, which is most partitions of an idle consumer's Fetch.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from mapping.connection.batcher import Pending
from mapping.connection.pubsub import Subscriber
from mapping.connection.waits import Channel, Waits
from mapping.partition.kafka import FetchRead, KafkaStore
from mapping.topic.topic_config import TopicConfig


@dataclass(slots=True)
class _View:
    read: FetchRead  # without entries
    level: int  # the channel's level when the read was issued
    losses: int  # the subscriber's lost connections then
    until: float  # loop time at which time alone may have moved the hw (inf: never)
    topic_id: str  # a re-created topic is another topic


class HwChannel(Channel):
    """A partition's hw channel (it counts notifications, as the base kind), remembering the
    partition's last read state; its ``followers`` are called at every notification (and
    once it is known): Kafka's incremental fetch sessions, which look again only at the
    partitions they hear of."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.view: _View | None = None
        self.followers: list[Callable[[HwChannel], None]] = []

    def advance(self, level: int) -> None:
        super().advance(level)
        for follower in self.followers:
            follower(self)


class HwWaits(Waits[str, HwChannel]):
    """The Kafka Fetch long-polls' waits on hw channels (keyed by channel name), and the
    partition views they keep."""

    def __init__(self, subscriber: Subscriber, *, linger_s: float = 30.0) -> None:
        super().__init__(subscriber, HwChannel, linger_s=linger_s)

    def known(self, name: str, config: TopicConfig, *, lasting: bool = False) -> FetchRead | None:
        """The partition's state as last read (no entries) while nothing can have changed
        it since; None when it must be read. ``lasting``: only a state that stays until a
        notification says otherwise (time alone cannot move its hw)."""
        channel = self._channels.get(name)
        if channel is None or not channel.known:
            return None
        view = channel.view
        if (
            view is None
            or view.level != channel.level
            or view.losses != self.subscriber.losses
            or view.topic_id != config.topic_id
        ):
            return None
        if view.until != math.inf and (lasting or asyncio.get_running_loop().time() >= view.until):
            return None
        return view.read

    def start_read(
        self,
        kafka: KafkaStore,
        config: TopicConfig,
        partition: int,
        name: str,
        offset: int,
        count: int,
        raw: bool = False,
    ) -> Pending[FetchRead]:
        """``kafka.start_read``, its state remembered on hw channel ``name`` when the pod
        listens on it now (else there is nothing to keep it current)."""
        pending = kafka.start_read(config, partition, offset, count, raw)
        channel = self._channels.get(name)
        if channel is None or not channel.known:
            return pending
        level, losses = channel.level, self.subscriber.losses
        issued = asyncio.get_running_loop().time()

        def remember(read: FetchRead) -> FetchRead:
            old = channel.view
            if old is None or old.level <= level:
                state = FetchRead(
                    read.high_watermark, read.log_start, [], False, read.stable_end,
                    read.next_change_ms,
                )  # fmt: skip
                change = read.next_change_ms
                until = issued + change / 1000 if change >= 0 else math.inf
                channel.view = _View(state, level, losses, until, config.topic_id)
            return read

        return pending.then(remember)
