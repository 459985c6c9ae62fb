"""Waiting on pub/sub notifications: the pod's one way to wait, never by polling Redis (as
Kafka's DelayedOperationPurgatory serves produce and fetch alike).

Scripts that change something publish on a channel of it (a partition's hw channel, a group's
events channel: see mapping/core/keys.py). A ``Waits`` serves one kind of wait, per key (a
partition, a group), on the pod's one pub/sub connection (`Subscriber`):

- one subscription per channel, made for its first watcher and confirmed by Redis before the
  channel counts as known; it lingers ``linger_s`` after the last watch closed, so a steady
  stream of waiters pays no SUBSCRIBE each;
- once subscribed the channel's ``read`` runs once: the kind reads the state from Redis, which
  closes the race between the caller's own write and the subscription. It runs again when the
  kind asked for it (``recheck_in``: time alone changes some states, and nothing publishes
  then);
- after a lost pub/sub connection notifications may have been missed: every channel's
  ``missed`` runs (the base kind counts it as a notification; a kind with a ``read`` reads);
- ``Waits.drop`` ends a channel's waits at once (``Dropped``: its topic was deleted).

Each channel has a ``level``: how far it got, as its kind measures it. A watcher waits until
the level reaches its own (``Watch.until``): a heap by level per channel, so a notification
costs the watchers it wakes, not all of them, and the Redis calls are per channel, never per
watcher. The base ``Channel`` counts notifications, so ``Watch.next`` wakes at any message on
any of the watch's channels (Kafka Fetch long-polls on hw channels; JoinGroup/SyncGroup on a
group's events channel). A watch is on its channels from ``watch`` to ``close`` (each
channel keeps its open watches) and a channel that moves marks them, so ``next`` costs the
same on one channel or on the thousands of a consumer's sessionless Fetch.

A new kind of wait (transactions' last stable offset, say) is a few lines: subclass
``Channel``; its ``on_message`` turns a notification into the level (``self.advance(lso)``),
its ``read`` reads the level from Redis and advances to it, its ``missed`` calls
``self.recheck_in(0)`` when known; build a ``Waits(subscriber, make)`` whose ``make(key)``
returns such a channel, then ``with waits.watch(key) as watch: await watch.until(offset, s)``.
``PartitionAcks`` in mapping/replication/acks.py is one (hw, while the ISR is large enough).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from redis.exceptions import RedisError

from mapping.connection.pubsub import Subscriber
from mapping.core.errors import BrokerError

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
C = TypeVar("C", bound="Channel")

# Ties between watchers of one level: first come, first woken.
_ORDER = itertools.count()


class Dropped(Exception):
    """The channel's waits were ended by ``drop`` (its topic was deleted)."""


class Channel:
    """One channel of a kind of wait: its level, its watchers and its subscription. This base
    kind counts notifications: every message moves the level one up."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.level = 0
        self.known = False  # subscribed and read: the level is current
        self.users = 0  # open watches and holds
        self._watches: set[Watch[Any]] = set()  # open watches, marked when the level moves
        self._heap: list[tuple[int, int, asyncio.Future[int]]] = []
        self._waiting = 0  # watchers in the heap that still wait
        self._waits: Waits[Any, Any] | None = None  # set by the Waits that made it
        self._key: Any = None  # its key in that Waits
        self._activation: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self._idle_since = 0.0  # loop time the last watch closed
        self._recheck: asyncio.TimerHandle | None = None
        self._recheck_at = 0.0
        self._dropped = False

    # What a kind of wait defines ------------------------------------------------------------

    def on_message(self, message: bytes) -> None:
        """A notification on the channel."""
        self.advance(self.level + 1)

    async def read(self) -> None:
        """Read the kind's state from Redis and ``advance`` to it: once subscribed, and when
        ``recheck_in`` is due. The base kind has nothing to read."""

    def missed(self) -> None:
        """The pub/sub connection was lost meanwhile: notifications may have been missed.
        The base kind counts it as one, so every watcher looks again."""
        self.advance(self.level + 1)

    # What a kind calls ------------------------------------------------------------------------

    def advance(self, level: int) -> None:
        """The channel got to ``level``: mark its watches if it moved, and wake the watchers
        ``level`` satisfies (once known)."""
        if level != self.level:
            self.level = level
            for watch in self._watches:
                watch._notify()
        if not self.known:
            return
        heap = self._heap
        while heap:
            wanted, _, future = heap[0]
            if future.done():  # timed out, or woken through another channel
                heapq.heappop(heap)
            elif wanted <= level:
                heapq.heappop(heap)
                future.set_result(level)
            else:
                break

    @property
    def watched(self) -> bool:
        """Whether watchers wait on this channel."""
        return bool(self._heap) or any(w._waiter is not None for w in self._watches)

    def recheck_in(self, delay_s: float) -> None:
        """``read`` again in ``delay_s`` if watchers still wait then (the earliest asked for
        wins)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + delay_s
        if self._recheck is not None:
            if self._recheck_at <= at:
                return
            self._recheck.cancel()
        self._recheck_at = at
        self._recheck = loop.call_at(at, lambda: asyncio.ensure_future(self._reread()))

    def drop(self) -> None:
        """End the channel's waits now (``Dropped``) and forget it: a later watch starts anew."""
        self._dropped = True
        for _, _, future in self._heap:
            if not future.done():
                future.set_exception(Dropped(self.name))
        self._heap.clear()
        for watch in self._watches:
            watch._drop(self.name)
        if self._waits is not None:
            self._waits._remove(self)

    # The bookkeeping ----------------------------------------------------------------------------

    def _activate(self) -> asyncio.Task[None]:
        """Subscribe, then ``read``: started by the first watcher of a channel not known."""
        if self._activation is None or self._activation.done():
            self._activation = asyncio.ensure_future(self._subscribe_and_read())
        return self._activation

    async def _subscribe_and_read(self) -> None:
        assert self._waits is not None
        try:
            await self._waits.subscriber.subscribe(self.name, self.on_message)
            await self.read()
        except (BrokerError, RedisError, OSError) as exc:  # the next watcher tries again
            log.warning("cannot watch %s: %s", self.name, exc)
            return
        if not self._dropped:
            self.known = True
            self.advance(self.level)

    async def _reread(self) -> None:
        self._recheck = None
        if not self.watched:
            return
        try:
            await self.read()
        except (BrokerError, RedisError, OSError) as exc:
            log.warning("cannot read %s: %s", self.name, exc)

    def _watch(self, level: int, future: asyncio.Future[int]) -> None:
        heapq.heappush(self._heap, (level, next(_ORDER), future))
        self._waiting += 1
        if not self.known:
            self._activate()

    def _unwatch(self) -> None:
        self._waiting -= 1
        if self._waiting == 0:
            self._heap.clear()

    def _release(self, now: float) -> None:
        self.users -= 1
        if self.users == 0:
            self._idle_since = now
            if self._linger is None:
                assert self._waits is not None
                self._start_linger(self._waits.linger_s)

    def _start_linger(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._linger = loop.call_later(delay_s, self._leave)

    def _leave(self) -> None:
        """No watch for ``linger_s``: stop listening. One timer per channel at a time, never
        cancelled: watches taken and closed meanwhile (a consumer's every Fetch) only move
        the idle time on, which the timer looks at when it fires."""
        self._linger = None
        if self.users or self._waits is None:
            return  # the last watch to close starts it again
        linger_s = self._waits.linger_s
        if self._activation is not None and not self._activation.done():
            self._start_linger(linger_s)  # left once its subscription is settled
            return
        idle_s = asyncio.get_running_loop().time() - self._idle_since
        if idle_s < linger_s:
            self._start_linger(linger_s - idle_s)
            return
        self._waits._remove(self)


class Waits(Generic[K, C]):
    """One kind of wait on the pod's subscriber: ``make(key)`` builds a key's channel."""

    def __init__(
        self, subscriber: Subscriber, make: Callable[[K], C], *, linger_s: float = 30.0
    ) -> None:
        self.subscriber = subscriber
        self.linger_s = linger_s
        self._make = make
        self._channels: dict[K, C] = {}
        subscriber.on_reconnect(self._missed_all)

    def watch(self, *keys: K) -> Watch[C]:
        """A watch on the keys' channels (``close`` it, or use it as a context manager)."""
        watch: Watch[C] = Watch([])
        channels = watch.channels
        known = self._channels
        for key in keys:
            channel = known.get(key)
            if channel is None:
                channel = self._new(key)
            channel.users += 1
            channel._watches.add(watch)
            channels.append(channel)
        return watch

    def hold(self, key: K) -> C:
        """Key's channel, listened to until ``release``d (a watch that waits on nothing):
        subscribed now if it is not yet."""
        channel = self._channels.get(key)
        if channel is None:
            channel = self._new(key)
        channel.users += 1
        if not channel.known:
            channel._activate()
        return channel

    def release(self, channel: C) -> None:
        channel._release(asyncio.get_running_loop().time())

    def all_known(self, keys: Iterable[K]) -> bool:
        """Whether the pod listens on every key's channel now (subscribed and read): a watch
        taken then counts every notification from now on, with no ``subscribed`` wait."""
        channels = self._channels
        for key in keys:
            channel = channels.get(key)
            if channel is None or not channel.known:
                return False
        return True

    def drop(self, matches: Callable[[K], bool]) -> None:
        """End the waits of every channel whose key ``matches`` (``Channel.drop``)."""
        for key in [key for key in self._channels if matches(key)]:
            self._channels[key].drop()

    def _new(self, key: K) -> C:
        channel = self._channels[key] = self._make(key)
        channel._waits, channel._key = self, key
        return channel

    def _remove(self, channel: Channel) -> None:
        """Forget ``channel`` (if still this key's) and leave it on Redis."""
        if self._channels.get(channel._key) is not channel:
            return
        del self._channels[channel._key]
        for timer in (channel._recheck, channel._linger):
            if timer is not None:
                timer.cancel()
        asyncio.ensure_future(self.subscriber.unsubscribe(channel.name, channel.on_message))

    def _missed_all(self) -> None:
        for channel in list(self._channels.values()):
            channel.missed()


class Watch(Generic[C]):
    """One waiter on one or more channels, open until ``close``."""

    def __init__(self, channels: list[C]) -> None:
        self.channels = channels
        self._notified = False  # a channel moved since ``subscribed`` or the last ``next``
        self._waiter: asyncio.Future[None] | None = None  # ``next`` waits on it
        self._dropped: str | None = None  # a channel dropped meanwhile: its name

    @property
    def channel(self) -> C:
        """The channel of a watch on one key."""
        return self.channels[0]

    async def subscribed(self, timeout_s: float | None = None) -> bool:
        """True once every channel is known (Redis confirmed its subscription and it was
        read); False at the timeout (the pub/sub connection is down) or when one failed.
        ``next`` counts the notifications from here on."""
        pending = [c._activate() for c in self.channels if not c.known]
        if pending:
            _, late = await asyncio.wait(
                pending, timeout=None if timeout_s is None else max(0.0, timeout_s)
            )
            if late:
                return False
        self._notified = False
        return all(c.known for c in self.channels)

    async def until(self, level: int, timeout_s: float) -> int | None:
        """The channel's level once it reached ``level``; None at the timeout. ``Dropped``
        when the channel is dropped meanwhile."""
        channel = self.channel
        if channel.known and channel.level >= level:
            return channel.level
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        channel._watch(level, future)
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                return await future
        except TimeoutError:
            return None
        finally:
            channel._unwatch()

    async def next(self, timeout_s: float) -> bool:
        """True at a notification on any of the channels since ``subscribed`` or the last
        ``next`` returned (at once when one came meanwhile); False at the timeout.
        ``Dropped`` when a channel is dropped."""
        if self._dropped is not None:
            raise Dropped(self._dropped)
        if self._notified:
            self._notified = False
            return True
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(max(0.0, timeout_s)):
                await waiter
            return True
        except TimeoutError:
            return False
        finally:
            self._waiter = None
            self._notified = False

    def close(self) -> None:
        now = asyncio.get_running_loop().time()
        for channel in self.channels:
            channel._watches.discard(self)
            channel._release(now)

    def _notify(self) -> None:
        self._notified = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _drop(self, name: str) -> None:
        self._dropped = name
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(Dropped(name))

    def __enter__(self) -> Watch[C]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
