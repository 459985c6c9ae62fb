"""Incremental fetch sessions (KIP-227) as a Kafka broker's FetchSessionCache keeps them: the
bookkeeping alone, no I/O (adapter/kafka/fetch.py reads the partitions and answers).

A Fetch (v7+) carries a session id and an epoch:

- epoch -1 (final): a sessionless fetch of the partitions it names; a session it names is
  closed. librdkafka and aiokafka always send this (session 0, epoch -1).
- epoch 0 (initial): a full fetch that creates a session (closing the one it names): the
  answer's session id is the new session's (0 when the cache has no room for it).
- epoch n > 0: an incremental fetch in that session. The request names only the partitions
  added or changed (position, byte limit) and, in ``forgotten_topics_data``, those to drop;
  the others keep their last position. The answer lists only the partitions with something
  to say: records, an error, or a high watermark, log start or last stable offset other
  than the one the client was last told (Kafka's CachedPartition). Partitions answered
  move to the end of the session's order, so each gets its turn under the byte limits.
  A session the pod does not hold (another pod's, one evicted, or lost in a restart) is
  FETCH_SESSION_ID_NOT_FOUND, an epoch other than the one expected
  INVALID_FETCH_SESSION_EPOCH: answered at once with no partitions, and the client starts a
  full fetch again, as with Kafka's brokers. kafka-python and the Java client do this.

Fetch v13+ names topics by id (KIP-516): a session made by one keeps its partitions by
(topic id, partition), one made by v7-12 by (name, partition), and a request of the other
kind in it is FETCH_SESSION_TOPIC_ID_ERROR, as Kafka answers. A partition whose id no topic
has is kept with no name (Kafka's unresolved CachedPartition) and answered UNKNOWN_TOPIC_ID
until its id resolves or the client forgets it (adapter/kafka/fetch.py resolves the ids).

Sessions live in the pod's memory only (pods are stateless: a session is a cache of what the
client keeps sending, never state to lose). Bounds: ``slots`` sessions (Kafka's
``max.incremental.fetch.session.cache.slots``, the pod's ``--kafka-fetch-session-slots``)
and ``max_partitions`` partitions across them. A new session takes a free slot, else evicts,
as Kafka's ``tryEvict``: the least recently used session when it was unused for
``eviction_ms`` (Kafka's 120 s), else the smallest session older than ``eviction_ms`` (as of
its last use) when the new one has more partitions; otherwise it is not created (answered
with session id 0: the client goes on with full fetches). A session that would grow past
``max_partitions`` is closed and its fetch answered whole. A session unused for
``eviction_ms`` stops following its partitions (adapter/kafka/session_follow.py) until it is
used again.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from adapter.kafka import errors

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long is stale, and
# one younger than this is never evicted for a larger one.
EVICTION_MS = 120_000
# How often sessions unused for EVICTION_MS stop following their partitions (FetchSessions._sweep).
SWEEP_MS = 10_000
# Partitions all sessions of a pod hold at most (about 200 bytes each: ~40 MB).
MAX_CACHED_PARTITIONS = 200_000

# (topic name, partition) in a session of v7-12, (topic id, partition) in one of v13+ (a
# name sent as null: None, answered UNKNOWN_TOPIC_OR_PARTITION)
PartitionKey = tuple[str | uuid.UUID | None, int]


def partition_key(topic: str | None, topic_id: uuid.UUID | None, partition: int) -> PartitionKey:
    """How a fetch names a partition: by topic id where it gave one (v13+), else by name."""
    return (topic if topic_id is None else topic_id), partition


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's FetchMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class SessionPartition:
    """A partition of a fetch: the client's position and byte limit and, in a session, what
    it was last told (-1: nothing yet, so its first answer always goes). ``topic_id``: the
    id the client named it by (v13+), ``topic`` then the name it resolved to (None: no
    topic has that id)."""

    topic: str | None
    partition: int
    offset: int
    max_bytes: int
    high_watermark: int = -1
    log_start: int = -1
    last_stable: int = -1
    topic_id: uuid.UUID | None = None
    current_leader_epoch: int = -1  # the client's (v9+; -1: not checked), KIP-320

    @property
    def key(self) -> PartitionKey:
        return partition_key(self.topic, self.topic_id, self.partition)

    def must_answer(
        self, error: int, high_watermark: int, log_start: int, last_stable: int, records: bool
    ) -> bool:
        """Whether this answer goes to the client, which is then told it (Kafka's
        CachedPartition.maybeUpdateResponseData). An error always goes, and forgets the
        high watermark told, so the answer after the error goes too."""
        must = records
        if high_watermark != self.high_watermark:
            self.high_watermark = high_watermark
            must = True
        if log_start != self.log_start:
            self.log_start = log_start
            must = True
        if last_stable != self.last_stable:
            self.last_stable = last_stable
            must = True
        if error:
            self.high_watermark = -1
            must = True
        return must


@dataclass(slots=True)
class FetchSession:
    """A session's partitions in the order they are read, and which of them need a look at
    the next fetch (``dirty``): those added or changed by a request, those whose hw channel
    was notified since their last look (its ``follower`` marks them: adapter/kafka/
    session_follow.py), and those whose last look had something to say or left them
    unsettled. The others are where the client was last told, with nothing to read: an idle
    session's fetch looks at none of them."""

    id: int
    partitions: dict[PartitionKey, SessionPartition]
    created_ms: float
    last_used_ms: float
    epoch: int = 1  # the epoch the next request must carry
    topic_ids: bool = False  # made by Fetch v13+: its partitions are keyed by topic id
    size: int = 0  # partitions, as of the last use (the cache's count)
    evictable: bool = False  # older than eviction_ms at its last use
    dirty: set[PartitionKey] = field(default_factory=set)
    rank: dict[PartitionKey, int] = field(default_factory=dict)  # the read order
    added: list[PartitionKey] = field(default_factory=list)  # since the follower last looked
    removed: list[PartitionKey] = field(default_factory=list)
    follower: Any = None  # what follows its partitions' hw channels (closed with it)
    # the partitions named by a topic id no topic had (kept apart: a fetch looks at these
    # only, not at every partition of the session)
    unresolved_keys: set[PartitionKey] = field(default_factory=set)
    _next_rank: int = 0

    def __post_init__(self) -> None:
        for key, p in self.partitions.items():
            self._rank(key)
            self._note_unresolved(key, p)
        self.dirty.update(self.partitions)
        self.added.extend(self.partitions)

    def _note_unresolved(self, key: PartitionKey, p: SessionPartition) -> None:
        if p.topic is None and p.topic_id is not None:
            self.unresolved_keys.add(key)

    def update(
        self, requested: Iterable[SessionPartition], forgotten: Iterable[PartitionKey]
    ) -> None:
        """Add or change the requested partitions, then drop the forgotten ones (Kafka's
        order: a partition both requested and forgotten goes)."""
        for p in requested:
            key = p.key
            known = self.partitions.get(key)
            if known is None:
                self.partitions[key] = p
                self._rank(key)
                self._note_unresolved(key, p)
                self.added.append(key)
            else:
                known.offset, known.max_bytes = p.offset, p.max_bytes
                known.current_leader_epoch = p.current_leader_epoch
                if known.topic is None and p.topic is not None:
                    self.resolve(key, p.topic)
            self.dirty.add(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                del self.rank[key]
                self.dirty.discard(key)
                self.unresolved_keys.discard(key)
                self.removed.append(key)

    def unresolved(self) -> set[uuid.UUID]:
        """The topic ids of partitions no topic was found for yet (Kafka tries again at
        every fetch: the id may have been learnt from a pod that just created it)."""
        ids = (self.partitions[key].topic_id for key in self.unresolved_keys)
        return {topic_id for topic_id in ids if topic_id is not None}

    def resolve(self, key: PartitionKey, topic: str) -> None:
        """The partition's topic id names ``topic`` now: it is followed and read from here."""
        p = self.partitions.get(key)
        if p is not None and p.topic is None:
            p.topic = topic
            self.unresolved_keys.discard(key)
            self.added.append(key)
            self.dirty.add(key)

    def to_read(self) -> list[SessionPartition]:
        """The partitions that need a look, in the session's order."""
        dirty = sorted(self.dirty, key=self.rank.__getitem__)
        return [self.partitions[key] for key in dirty]

    def sent(self, key: PartitionKey) -> None:
        """The partition was answered: it goes to the end of the order (Kafka's rotation)."""
        if key in self.rank:
            self._rank(key)

    def _rank(self, key: PartitionKey) -> None:
        self.rank[key] = self._next_rank
        self._next_rank += 1


class FetchStats(NamedTuple):
    sessions: int
    partitions: int  # held by the sessions
    evictions: int
    fetches: dict[str, int]  # by kind: sessionless, full, incremental, session_error


@dataclass(slots=True)
class FetchContext:
    """What one Fetch reads and how it is answered: ``error`` (a session error, answered at
    once with no partitions), else ``partitions`` in order; ``session`` for an incremental
    fetch, ``create`` for a full one that asks for a session."""

    partitions: list[SessionPartition] = field(default_factory=list)
    error: int = errors.NONE
    session: FetchSession | None = None
    create: bool = False
    expected_epoch: int = FINAL_EPOCH
    topic_ids: bool = False  # the partitions are named by topic id (v13+)


class FetchSessions:
    """One pod's fetch sessions (Kafka's FetchManager and FetchSessionCache)."""

    def __init__(
        self,
        slots: int,
        *,
        eviction_ms: float = EVICTION_MS,
        max_partitions: int = MAX_CACHED_PARTITIONS,
        ids: random.Random | None = None,
    ) -> None:
        self.slots = slots
        self.eviction_ms = eviction_ms
        self.max_partitions = max_partitions
        self.sessions: dict[int, FetchSession] = {}
        self.partitions = 0  # held by all sessions, as of their last use
        self.evictions = 0
        self.fetches = dict.fromkeys(("sessionless", "full", "incremental", "session_error"), 0)
        self._ids = ids or random.Random()
        self._next_sweep = 0.0

    def stats(self) -> FetchStats:
        return FetchStats(len(self.sessions), self.partitions, self.evictions, dict(self.fetches))

    def open(
        self,
        session_id: int,
        epoch: int,
        requested: list[SessionPartition],
        forgotten: list[PartitionKey],
        now_ms: float,
        topic_ids: bool = False,
    ) -> FetchContext:
        """The context of a Fetch carrying ``session_id`` and ``epoch`` (Kafka's
        FetchManager.newContext); ``topic_ids``: a Fetch v13+, naming topics by id."""
        if now_ms >= self._next_sweep:
            self._sweep(now_ms)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # any session named by a full fetch is closed
            create = epoch == INITIAL_EPOCH
            self.fetches["full" if create else "sessionless"] += 1
            return FetchContext(_unique(requested), create=create, topic_ids=topic_ids)
        session = self.sessions.get(session_id)
        if session is None or session.epoch != epoch or session.topic_ids != topic_ids:
            self.fetches["session_error"] += 1
            if session is None:
                return FetchContext(error=errors.FETCH_SESSION_ID_NOT_FOUND)
            if session.epoch != epoch:
                return FetchContext(error=errors.INVALID_FETCH_SESSION_EPOCH)
            # its partitions are keyed by the other kind of topic reference
            return FetchContext(error=errors.FETCH_SESSION_TOPIC_ID_ERROR)
        self.fetches["incremental"] += 1
        session.update(requested, forgotten)
        grown = len(session.partitions) - session.size
        if not session.partitions or self.partitions + grown > self.max_partitions:
            self.remove(session_id)  # empty, or too large: answered whole, without a session
            return FetchContext(list(session.partitions.values()), topic_ids=topic_ids)
        self._touch(session, now_ms)
        session.epoch = next_epoch(epoch)
        return FetchContext(session=session, expected_epoch=session.epoch, topic_ids=topic_ids)

    def finish(
        self, context: FetchContext, sent: list[SessionPartition], now_ms: float
    ) -> tuple[int, int]:
        """After the answers: the response's error and session id (0: none). A full fetch
        that asked for a session gets one created (its partitions told what they were
        answered: ``SessionPartition.must_answer``); in an incremental fetch the partitions
        ``sent`` go to the end of the order, unless another request of the session came
        meanwhile (the epoch moved on): then it is answered INVALID_FETCH_SESSION_EPOCH, as
        Kafka does."""
        session = context.session
        if session is not None:
            if session.epoch != context.expected_epoch:
                return errors.INVALID_FETCH_SESSION_EPOCH, session.id
            for p in sent:
                session.sent(p.key)
            return errors.NONE, session.id
        if not context.create:
            return errors.NONE, INVALID_SESSION_ID
        return errors.NONE, self._create(context.partitions, now_ms, context.topic_ids)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.partitions -= session.size
            if session.follower is not None:
                session.follower.close()
        return session

    def _sweep(self, now_ms: float) -> None:
        """A stale session (unused for ``eviction_ms``: its client went away, most likely)
        stays until it is evicted, as in Kafka, but stops following its partitions, so the
        pod need not listen on their channels for it: if it is used again, every partition
        is looked at once and followed again. Looked at every ``SWEEP_MS``."""
        self._next_sweep = now_ms + SWEEP_MS
        for session in self.sessions.values():
            if session.follower is not None and now_ms - session.last_used_ms > self.eviction_ms:
                session.follower.close()
                session.follower = None
                session.added[:] = session.partitions
                session.removed.clear()
                session.dirty.update(session.partitions)

    def _create(self, partitions: list[SessionPartition], now_ms: float, topic_ids: bool) -> int:
        """Kafka's maybeCreateSession: a new session in a free slot or one evicted for it."""
        size = len(partitions)
        if size > self.max_partitions:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.slots and not self._evict_for(size, now_ms):
            return INVALID_SESSION_ID
        if self.partitions + size > self.max_partitions:
            return INVALID_SESSION_ID
        session_id = self._new_id()
        session = FetchSession(
            session_id, {p.key: p for p in partitions}, now_ms, now_ms, topic_ids=topic_ids
        )
        self.sessions[session_id] = session
        self._touch(session, now_ms)
        return session_id

    def _evict_for(self, size: int, now_ms: float) -> bool:
        """Kafka's tryEvict for a session of ``size`` partitions: the least recently used
        session when stale, else the smallest evictable one when the new one is larger."""
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            victim = lru
        else:
            evictable = [s for s in self.sessions.values() if s.evictable]
            if not evictable:
                return False
            victim = min(evictable, key=lambda s: (s.size, s.id))
            if size <= victim.size:  # (size, 0) sorts before (victim.size, its id >= 1)
                return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def _touch(self, session: FetchSession, now_ms: float) -> None:
        session.last_used_ms = now_ms
        size = len(session.partitions)
        self.partitions += size - session.size
        session.size = size
        session.evictable = now_ms - session.created_ms > self.eviction_ms

    def _new_id(self) -> int:
        while True:
            session_id = self._ids.randint(1, MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id


def _unique(requested: list[SessionPartition]) -> list[SessionPartition]:
    """The partitions of a full fetch, each once (the last mention wins, as in Kafka's map)."""
    return list({p.key: p for p in requested}.values())
