"""Fetch's read-ahead: while a consumer takes one response in, the pod reads its next.

A client sends its next Fetch only once it has taken the last response in (librdkafka parses
it whole on its broker thread first), so without reading ahead the pod and Redis wait on the
client, then the client on them. Once a Fetch is answered, each partition it answered
records of is read on (Redis' pages, and the batches encoded) from the offset after its last
answered record, with the same byte share. A later Fetch that asks for exactly that position
(the same share, isolation level and message format, the topic's settings unchanged) takes
that read instead of starting its own.

What keeps it correct:

- Only records are taken: a read ahead that found none, or failed, is dropped and the Fetch
  reads afresh, so a consumer at the end of a partition long-polls as before.
- A read ahead answers what it read: records at or after the position, up to the high
  watermark (read_committed: below the last stable offset) of when it read, with that high
  watermark, log start and last stable offset. Those only move forward, so the answer is one
  a Fetch at most ``LIFETIME_S`` earlier could have had; the next one reports where they are
  now.
- It is dropped when the pod's leader epoch moved since it started (a Redis failover can
  have taken records back), when the topic's settings differ (deleted and created again,
  another compression), and after ``LIFETIME_S``.
- It is taken once. The reads held, running or done, reserve their byte shares within the
  pod's ``--kafka-fetch-read-ahead-bytes`` together (0: no read-ahead), so what clients do
  cannot make the pod hold more.

What keeps it cheap: a read ahead never taken is a second read of the same records for
Redis. Each connection keeps a ``Reader``: a partition whose read ahead its client left
untaken is read ahead again only after a few answers, and at every answer again once one
is taken.

Sessionless fetches (session 0, epoch -1: librdkafka, aiokafka) and incremental fetch
sessions (KIP-227: kafka-python, the Java client) alike: a session's answer leaves out the
partitions that did not change, but each partition it gave records of is in it, and the
client's next Fetch names that partition at its new position.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from adapter.kafka.fetch_sessions import PartitionKey
from adapter.kafka.records import next_offset
from mapping.topic.topic_config import TopicConfig

LIFETIME_S = 3.0  # a read ahead not taken by then is dropped: its high watermark is old
MAX_BACKOFF = 6  # a partition a client leaves untaken waits at most 2**6 answers between tries

# (partition, offset, byte share, read_committed, message format)
AheadKey = tuple[PartitionKey, int, int, bool, int]


class Reader:
    """One connection's reads ahead, by partition: whether the client takes them.

    A client that comes back for a partition later than ``LIFETIME_S`` (a Java or
    kafka-python consumer whose application takes longer than that over what it fetched; a
    librdkafka one whose queue is full, so it stops fetching), seeks or pauses it leaves its
    reads ahead untaken, and each was a second read of the same records for Redis. So after a
    partition's read ahead is dropped, the connection's next 2 answers of records of it start
    none; after two in a row, 4; up to 64. One taken, and it reads ahead at once again."""

    __slots__ = ("_misses", "_waited")

    def __init__(self) -> None:
        self._misses: dict[PartitionKey, int] = {}  # reads ahead dropped since one was taken
        self._waited: dict[PartitionKey, int] = {}  # answers without one since the last drop

    def may_start(self, partition: PartitionKey) -> bool:
        misses = self._misses.get(partition)
        if misses is None:
            return True
        waited = self._waited.get(partition, 0) + 1
        if waited <= 1 << min(misses, MAX_BACKOFF):
            self._waited[partition] = waited
            return False
        self._waited.pop(partition, None)
        return True

    def taken(self, partition: PartitionKey) -> None:
        self._misses.pop(partition, None)
        self._waited.pop(partition, None)

    def dropped(self, partition: PartitionKey) -> None:
        self._misses[partition] = self._misses.get(partition, 0) + 1
        self._waited.pop(partition, None)


@dataclass(slots=True)
class _Ahead:
    config: TopicConfig
    epoch: int
    started: float
    share: int
    task: asyncio.Task[Any]
    reader: Reader | None  # the connection that started it
    partition: PartitionKey


class ReadAhead:
    """The reads ahead of a pod's Kafka front door, by the position they read from."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held_bytes = 0  # the byte shares of the reads held
        self.taken = 0  # reads ahead a Fetch took
        self.dropped = 0  # reads ahead dropped untaken (expired, stale, or never asked for)
        self._held: dict[AheadKey, _Ahead] = {}

    def take(self, key: AheadKey, config: TopicConfig, epoch: int) -> asyncio.Task[Any] | None:
        """The read ahead from ``key``'s position, when there is one still good for a Fetch
        of ``config`` under leader epoch ``epoch``."""
        if not self._held:
            return None
        ahead = self._held.pop(key, None)
        if ahead is None:
            return None
        self.held_bytes -= ahead.share
        if (
            ahead.epoch != epoch
            or ahead.config != config
            or time.monotonic() - ahead.started > LIFETIME_S
        ):
            self._drop(ahead)
            return None
        self.taken += 1
        if ahead.reader is not None:
            ahead.reader.taken(ahead.partition)
        return ahead.task

    def start(
        self,
        read: Callable[[Any, int], Coroutine[Any, Any, Any]],
        answered: list[tuple[Any, Any]],
        limit: int,
        committed: bool,
        magic: int,
        epoch: int,
        reader: Reader | None = None,
    ) -> None:
        """Read on each partition ``answered`` (its Wanted, its Answer) holds records of:
        ``read(wanted, share)`` from the offset after them, within the share of the
        response's ``limit`` that read_all gives it (only where the partitions' own limits
        fit in it: no share then depends on what the others read). ``reader``: the
        connection's record, which may hold some partitions back (None: none held)."""
        if self.max_bytes <= 0 or magic != 2 or not answered:
            return
        self._expire()
        shares = [min(w.max_bytes, limit) for w, _ in answered]
        if sum(shares) > limit:
            return
        now = time.monotonic()
        for (w, a), share in zip(answered, shares, strict=True):
            if a.error or not a.records or w.config is None or w.refused:
                continue
            if reader is not None and not reader.may_start(w.key):
                continue
            if self.held_bytes + share > self.max_bytes:
                return
            offset = next_offset(a.records)
            key = (w.key, offset, share, committed, magic)
            if key in self._held:
                continue
            task = asyncio.ensure_future(read(replace(w, offset=offset), share))
            self._held[key] = _Ahead(w.config, epoch, now, share, task, reader, w.key)
            self.held_bytes += share

    def close(self) -> None:
        """Drop every read held (the pod stops)."""
        for ahead in self._held.values():
            self._drop(ahead, missed=False)
        self._held.clear()
        self.held_bytes = 0

    def _expire(self) -> None:
        oldest = time.monotonic() - LIFETIME_S
        for key in [k for k, a in self._held.items() if a.started < oldest]:
            ahead = self._held.pop(key)
            self.held_bytes -= ahead.share
            self._drop(ahead)

    def _drop(self, ahead: _Ahead, missed: bool = True) -> None:
        self.dropped += 1
        if missed and ahead.reader is not None:
            ahead.reader.dropped(ahead.partition)
        task = ahead.task
        if task.done():
            if not task.cancelled():
                task.exception()  # retrieved: a failed read ahead is no one's error
        else:
            task.cancel()
