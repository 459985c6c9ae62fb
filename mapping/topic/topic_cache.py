"""The pod's cache of topic settings (Kafka keeps its metadata cache apart from the config
manager the same way): least recently used dropped first, one lookup in flight per name
shared by every caller, and callbacks told what was dropped so that what was derived from
the settings (Partitions' produce builders and size marks) goes with them.

A topic's settings never change while it exists but by a config change every pod hears
(Keys.topics_changed_channel), so they are cached until that, the topic's deletion
(Keys.topics_deleted_channel) or eviction. mapping/topic/topics.py reads and writes them.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from functools import partial

from mapping.topic.topic_config import DEFAULT_TOPIC_CACHE_SIZE, TopicConfig

Dropped = Callable[[TopicConfig | None], None]


class TopicCache:
    def __init__(self, size: int = DEFAULT_TOPIC_CACHE_SIZE) -> None:
        self.size = max(1, size)
        self._pending: dict[str, asyncio.Future[TopicConfig]] = {}  # lookups in flight
        self._known: OrderedDict[str, TopicConfig] = OrderedDict()  # LRU: no await needed
        self._dropped: list[Dropped] = []
        # counts forgets: settings read before one may be stale (a config change heard
        # while the read was in flight) and are not remembered (remember_read)
        self.generation = 0

    def on_drop(self, callback: Dropped) -> None:
        """Call ``callback`` with a topic's settings when the cache drops them (deleted,
        evicted), with None when it drops every topic."""
        self._dropped.append(callback)

    def known(self, name: str) -> TopicConfig | None:
        """The topic's settings if this pod has them already (no Redis call needed)."""
        config = self._known.get(name)
        if config is not None:
            self._known.move_to_end(name)
        return config

    def shared(
        self, name: str, load: Callable[[], Awaitable[TopicConfig]]
    ) -> Awaitable[TopicConfig]:
        """``load()``'s answer for topic ``name``, remembered; concurrent callers share one
        load (one Redis call however many requests name a new topic at once)."""
        future = self._pending.get(name)
        if future is None:
            future = asyncio.ensure_future(load())
            self._pending[name] = future
            future.add_done_callback(partial(self._resolved, name))
        return asyncio.shield(future)

    def remember_read(self, config: TopicConfig, generation: int) -> None:
        """Remember settings just read, unless a shared load of that name is in flight (its
        answer will be remembered) or the cache forgot something since the read began
        (``generation`` then: it may be the settings a change replaced)."""
        if config.name not in self._pending and generation == self.generation:
            self.remember(config)

    def _resolved(self, name: str, future: asyncio.Future[TopicConfig]) -> None:
        if self._pending.get(name) is not future:
            return  # forgotten meanwhile (deleted): the answer may be stale, not cached
        del self._pending[name]
        if not future.cancelled() and future.exception() is None:
            self.remember(future.result())

    def remember(self, config: TopicConfig) -> None:
        self._known[config.name] = config
        self._known.move_to_end(config.name)
        while len(self._known) > self.size:
            _, evicted = self._known.popitem(last=False)
            self._drop(evicted)

    def _drop(self, config: TopicConfig | None) -> None:
        for callback in self._dropped:
            callback(config)

    def forget(self, name: str) -> None:
        """Drop what this pod knows of topic ``name`` (deleted, changed): the next command
        naming it looks it up (or creates it) afresh."""
        self.generation += 1
        self._pending.pop(name, None)
        config = self._known.pop(name, None)
        if config is not None:
            self._drop(config)

    def forget_deleted(self, config: TopicConfig) -> None:
        """A partition script refused topic ``config`` as deleted (the deletion notice not
        heard yet): forget it, unless the pod caches other settings of that name by now."""
        if self._known.get(config.name) is config:
            self.forget(config.name)

    def forget_all(self) -> None:
        """Drop every cached topic (deletions may have been missed)."""
        self.generation += 1
        self._pending.clear()
        self._known.clear()
        self._drop(None)

    def cached(self) -> list[str]:
        """Names whose settings this pod holds, least recently used first."""
        return list(self._known)
