"""Following an incremental fetch session's partitions (adapter/kafka/fetch_sessions.py), so
that its fetches look only at the partitions where something happened.

The follower holds the hw channel of each partition of the session (mapping/replication/hw_views.py:
the pod listens on them while the session lives) and is called at each notification: the
partition becomes dirty again and a fetch waiting in the session wakes. A partition leaves
the dirty set after a look that settled it: no error, no records, its position past what it
may read, and the pod's view of it current and lasting (the channel listened to and quiet
since the look, no ISR member lagging). Its topic's settings are looked up at every fetch
(the pod's cache): when they change (a topic deleted, re-created or grown) its partitions
are looked at again. A partition whose topic id names no topic (yet) has no channel to
hold: it answers UNKNOWN_TOPIC_ID, so it never settles, and is followed once its id
resolves (FetchSession.resolve).
"""

from __future__ import annotations

import asyncio

from adapter.kafka.fetch_reads import Answer, Wanted
from adapter.kafka.fetch_sessions import FetchSession, PartitionKey
from mapping.core.keys import Keys
from mapping.replication.hw_views import HwChannel, HwWaits
from mapping.topic.topic_config import TopicConfig


class SessionFollower:
    def __init__(self, waits: HwWaits, keys: Keys, session: FetchSession) -> None:
        self.waits = waits
        self.keys = keys
        self.session = session
        self.channels: dict[PartitionKey, HwChannel] = {}
        self.keys_of: dict[str, PartitionKey] = {}  # channel name -> its partition
        self.names: dict[PartitionKey, str] = {}  # each followed partition's topic
        self.configs: dict[str, TopicConfig | None] = {}  # each topic's, as last looked up
        self.topics: dict[str, int] = {}  # the session's topics: partitions of each
        self.changes = 0  # notifications heard
        self._wake: asyncio.Future[None] | None = None
        self.closed = False
        session.follower = self

    def sync(self) -> None:
        """Follow the partitions added to the session since, leave those removed."""
        session = self.session
        for key in session.added:
            p = session.partitions.get(key)
            if key not in self.channels and p is not None and p.topic is not None:
                name = self.keys.hw_channel(p.topic, p.partition)
                channel = self.waits.hold(name)
                channel.followers.append(self._changed)
                self.channels[key] = channel
                self.keys_of[name] = key
                self.names[key] = p.topic
                self.topics[p.topic] = self.topics.get(p.topic, 0) + 1
        for key in session.removed:
            if key not in session.partitions:
                self._leave(key)
        session.added.clear()
        session.removed.clear()

    def topics_now(self, configs: dict[str, TopicConfig | None]) -> None:
        """The session's topics' settings now: the partitions of a topic whose settings
        changed since the last fetch need a look."""
        changed = {t for t, c in configs.items() if t in self.configs and self.configs[t] is not c}
        if changed:
            partitions = self.session.partitions
            self.session.dirty.update(k for k, p in partitions.items() if p.topic in changed)
        self.configs = configs

    def settle(self, looked: list[tuple[Wanted, Answer]], committed: bool) -> None:
        """Take the partitions whose look settled them out of the dirty set."""
        dirty = self.session.dirty
        for w, a in looked:
            if a.error or a.records or w.config is None or w.offset <= a.bound:
                continue
            view = self.waits.known(w.channel, w.config, lasting=True)
            if view is None:
                channel = self.channels.get(w.key)
                if channel is not None and not channel.known:
                    channel._activate()  # a subscription that failed: tried again
                continue
            bound = view.stable_bound if committed else view.high_watermark
            log_start = view.log_start if view.log_start >= 0 else 0
            if (view.high_watermark + 1, bound, log_start) == (
                a.high_watermark,
                a.bound,
                a.log_start,
            ):
                dirty.discard(w.key)

    async def wait(self, timeout_s: float) -> bool:
        """True at a notification on one of the session's partitions; False at the
        timeout."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wake = future
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            self._wake = None

    def close(self) -> None:
        """The session is gone: leave every channel."""
        self.closed = True
        for key in list(self.channels):
            self._leave(key)

    def _changed(self, channel: HwChannel) -> None:
        key = self.keys_of.get(channel.name)
        if key is None:
            return
        self.session.dirty.add(key)
        self.changes += 1
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _leave(self, key: PartitionKey) -> None:
        channel = self.channels.pop(key, None)
        if channel is None:
            return
        self.keys_of.pop(channel.name, None)
        topic = self.names.pop(key)
        left = self.topics.get(topic, 0) - 1
        if left > 0:
            self.topics[topic] = left
        else:
            self.topics.pop(topic, None)
        if self._changed in channel.followers:
            channel.followers.remove(self._changed)
        self.waits.release(channel)
