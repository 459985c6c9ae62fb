"""Fetch: records at or after each partition's fetch offset up to the high watermark, within
the request's byte limits (adapter/kafka/fetch_reads.py reads them), long-polling on
``max_wait_ms`` / ``min_bytes``, in incremental fetch sessions (KIP-227,
adapter/kafka/fetch_sessions.py) for the clients that open them.

- Long-poll: with fewer than ``min_bytes`` the request watches its partitions' hw channels
  (mapping/connection/waits.py) and waits for a notification or ``max_wait_ms``: no polling. When
  the
  pod already listens on every channel (a consumer's Fetch after its first), the watch is
  taken before the read, so a change after it wakes the wait; otherwise the read is made
  again once the subscriptions are confirmed, so a change before them is not missed.
- Partitions where nothing happened since the pod last read them are answered from its
  views (mapping/replication/hw_views.py): no Redis call.
- Sessions: an incremental fetch looks only at the partitions of its session that need it
  (adapter/kafka/session_follow.py: added, changed, notified, or unsettled), waits on a
  notification on any partition of the session, and answers those with something to
  say.
- KAFKA_STORAGE_ERROR goes to v0-5 as NOT_LEADER_OR_FOLLOWER (older clients do not know
  it), as Kafka does.
- Topic ids (v13+, KIP-516): requests and answers name topics by id. An id no topic has (a
  deleted topic's, also once a topic of its name exists again) is UNKNOWN_TOPIC_ID for
  each of its partitions, as Kafka's handleFetchRequest answers; sessions key their
  partitions by id (fetch_sessions.py). v15's ReplicaState and v17's ReplicaDirectoryId
  concern followers (consumers send -1 and none): ignored, as the replica id always was.
  v16's NodeEndpoints (KIP-951) lists the current leaders of partitions answered
  NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH; a Fetch here answers neither (any pod
  serves any partition; a storage error goes as NOT_LEADER_OR_FOLLOWER only to v0-5), so
  it stays empty.
- Over a client quota (adapter/kafka/connection.py) a Fetch is answered as Kafka's
  getThrottledResponse: no partitions, the throttle time, the incremental session's id (a
  full fetch's new session is dropped: id 0). Its records stay for the next Fetch from the
  same offsets: the client's position did not move, and the session's partitions with
  records stay to be read.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Coroutine, Iterable
from typing import Any

from adapter.kafka import errors
from adapter.kafka.authorization import TOPIC, denied
from adapter.kafka.context import KafkaContext, topic_id_of
from adapter.kafka.fetch_ahead import Reader
from adapter.kafka.fetch_codec import (
    TOPIC_IDS_SINCE,  # the first Fetch version naming topics by id (KIP-516)
    AbortedTransaction,
    FetchAnswer,
    PartitionData,
    TopicResponse,
)
from adapter.kafka.fetch_reads import (
    Answer,
    Wanted,
    list_aborted,
    magic_of,
    read_all,
    read_partition,
    refusal,
    response_limit,
)
from adapter.kafka.fetch_sessions import (
    INITIAL_EPOCH,
    FetchSession,
    PartitionKey,
    SessionPartition,
)
from adapter.kafka.protocol import Request
from adapter.kafka.session_follow import SessionFollower
from mapping.core.errors import BrokerError
from mapping.security.acls import Operation
from mapping.topic.topic_config import TopicConfig

STORAGE_ERROR_SINCE = 6  # the first Fetch version whose clients know KAFKA_STORAGE_ERROR


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    deadline = asyncio.get_running_loop().time() + max(body.max_wait_ms, 0) / 1000
    committed = body.isolation_level == 1
    ids = request.version >= TOPIC_IDS_SINCE
    topics = body.topics or ()  # an array sent as null: none
    names = await _names(context, {t.topic_id for t in topics}) if ids else {}
    forgotten: list[PartitionKey] = [
        (t.topic_id if ids else t.topic, p)
        for t in getattr(body, "forgotten_topics_data", None) or ()  # v7+
        for p in t.partitions or ()
    ]
    sessions = context.fetch_sessions
    fetch = sessions.open(
        getattr(body, "session_id", 0),  # v7+
        getattr(body, "session_epoch", -1),
        _requested(topics, names, ids),
        forgotten,
        _now_ms(),
        ids,
    )
    if fetch.error:
        return _response(request, fetch.error, 0, [])
    reading = _Reading(context, body, request.version, committed, deadline)
    if fetch.session is not None:
        if ids:
            await _resolve(context, fetch.session)
        if context.authorizer.enabled:  # READ on each topic of the session, once
            topics = {p.topic for p in fetch.session.partitions.values()}
            reading.denied = await denied(context, request, Operation.READ, TOPIC, topics)
        looked = await _incremental(reading, fetch.session)
    else:
        wanted = [_wanted(p) for p in fetch.partitions]
        if context.authorizer.enabled:  # READ on each topic asked for, once
            topics = {w.topic for w in wanted}
            reading.denied = await denied(context, request, Operation.READ, TOPIC, topics)
        _configure(context, wanted, await _configs(context, {w.topic for w in wanted}), reading)
        looked = list(zip(wanted, await _long_poll(reading, wanted), strict=True))
    if committed:
        await list_aborted(context, [w for w, _ in looked], [a for _, a in looked])
    for _, a in looked:
        if a.error == errors.KAFKA_STORAGE_ERROR and request.version < STORAGE_ERROR_SINCE:
            a.error = errors.NOT_LEADER_OR_FOLLOWER  # retriable for them too
    if fetch.session is not None:
        partitions = fetch.session.partitions
        sent = [(w, a) for w, a in looked if _must_answer(partitions.get(w.key), a)]
        error, session_id = sessions.finish(fetch, [partitions[w.key] for w, _ in sent], _now_ms())
    else:
        if fetch.create:  # the session's partitions are told what they are answered
            for p, (_, a) in zip(fetch.partitions, looked, strict=True):
                _must_answer(p, a)
        sent = looked
        error, session_id = sessions.finish(fetch, [], _now_ms())
    if not error:
        reading.read_ahead(sent, request.reads_ahead)
    return _response(request, error, session_id, [] if error else sent)


def throttled(context: KafkaContext, request: Request, answer: FetchAnswer) -> FetchAnswer:
    """``answer`` as a Fetch over a client quota gets it: without its partitions; a session
    its full fetch created is dropped (Kafka creates none for a throttled one)."""
    if answer.session_id and getattr(request.body, "session_epoch", -1) == INITIAL_EPOCH:
        context.fetch_sessions.remove(answer.session_id)
        return FetchAnswer([], answer.error_code, 0)
    return FetchAnswer([], answer.error_code, answer.session_id)


class _Reading:
    """What every read of one Fetch shares."""

    def __init__(
        self, context: KafkaContext, body: Any, version: int, committed: bool, deadline: float
    ) -> None:
        self.context = context
        self.body = body
        self.version = version
        self.committed = committed
        self.magic = magic_of(version)
        self.deadline = deadline
        self.denied: set[str] = set()  # the topics the principal may not read

    async def read(self, wanted: list[Wanted]) -> list[Answer]:
        body = self.body
        context = self.context
        return await read_all(
            context, wanted, body.max_bytes, self.committed, self.magic, context.read_ahead
        )

    def read_ahead(self, answered: list[tuple[Wanted, Answer]], reader: Reader | None) -> None:
        """Start reading on where ``answered`` leaves off (adapter/kafka/fetch_ahead.py),
        as far as the connection's ``reader`` lets it."""
        context = self.context
        committed, magic = self.committed, self.magic

        def read(w: Wanted, share: int) -> Coroutine[Any, Any, Any]:
            return read_partition(context, w, share, committed, magic)

        context.read_ahead.start(
            read, answered, response_limit(self.body.max_bytes), committed, magic,
            context.pod.leader_epochs.current, reader,
        )  # fmt: skip

    def done(self, answers: list[Answer]) -> bool:
        """The answers hold ``min_bytes``, or one failed, or the time is up."""
        size = sum(len(a.records or b"") for a in answers)
        return (
            size >= self.body.min_bytes
            or any(a.error for a in answers)
            or self.deadline <= asyncio.get_running_loop().time()
        )

    @property
    def remaining(self) -> float:
        return self.deadline - asyncio.get_running_loop().time()


def _must_answer(p: SessionPartition | None, a: Answer) -> bool:
    if p is None:  # (not in the session any more)
        return False
    return p.must_answer(a.error, a.high_watermark, a.log_start, a.last_stable, bool(a.records))


def _requested(
    topics: Iterable[Any], names: dict[uuid.UUID, str | None], ids: bool
) -> list[SessionPartition]:
    """The partitions a request names: by topic name (v0-12) or by topic id (v13+) with the
    name it resolved to (``names``)."""
    return [
        SessionPartition(names.get(t.topic_id), p.partition, p.fetch_offset,
                         p.partition_max_bytes, topic_id=t.topic_id,
                         current_leader_epoch=getattr(p, "current_leader_epoch", -1))
        if ids
        else SessionPartition(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                              current_leader_epoch=getattr(p, "current_leader_epoch", -1))
        for t in topics
        for p in t.partitions or ()
    ]  # fmt: skip


def _wanted(p: SessionPartition) -> Wanted:
    return Wanted(p.topic, p.partition, p.offset, p.max_bytes, topic_id=p.topic_id,
                  current_leader_epoch=p.current_leader_epoch)  # fmt: skip


async def _names(context: KafkaContext, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    """The name of each topic id (None: no topic has it), looked up once per Fetch."""
    names: dict[uuid.UUID, str | None] = {}
    for topic_id in ids:
        try:
            names[topic_id] = await context.topic_name(topic_id)
        except BrokerError:
            names[topic_id] = None
    return names


async def _resolve(context: KafkaContext, session: FetchSession) -> None:
    """Try again the session's topic ids no topic had (Kafka's maybeResolveUnknownName)."""
    unresolved = session.unresolved()
    if not unresolved:
        return
    names = await _names(context, unresolved)
    for key in list(session.unresolved_keys):
        topic_id = session.partitions[key].topic_id
        name = names.get(topic_id) if topic_id is not None else None
        if name is not None:
            session.resolve(key, name)


def _now_ms() -> float:
    return time.monotonic() * 1000


async def _configs(
    context: KafkaContext, topics: Iterable[str | None]
) -> dict[str, TopicConfig | None]:
    """Each topic's settings (None: no such topic), looked up once per Fetch."""
    configs: dict[str, TopicConfig | None] = {}
    for name in topics:
        if name is None:  # a topic id that resolved to no topic
            continue
        try:
            configs[name] = await context.find_topic(name)
        except BrokerError:
            configs[name] = None
    return configs


def _configure(
    context: KafkaContext,
    wanted: list[Wanted],
    configs: dict[str, TopicConfig | None],
    reading: _Reading,
) -> None:
    """Each partition's topic settings, whether its records can go to this version, and its
    hw channel. A partition named by a topic id that is not (or no longer) its topic's is
    UNKNOWN_TOPIC_ID: the topic was deleted, or deleted and created again meanwhile."""
    refusals = {name: refusal(reading.version, c) for name, c in configs.items() if c}
    by_id = reading.version >= TOPIC_IDS_SINCE
    ids = {name: topic_id_of(c) for name, c in configs.items() if c and by_id}
    keys = context.pod.keys
    refused = reading.denied
    for w in wanted:
        config = configs.get(w.topic) if w.topic is not None else None
        if w.topic_id is not None and (config is None or ids[config.name] != w.topic_id):
            w.missing = errors.UNKNOWN_TOPIC_ID
            continue
        if refused and w.topic in refused:  # answered as missing: not read
            w.missing = errors.TOPIC_AUTHORIZATION_FAILED
            continue
        if config is not None and 0 <= w.partition < config.partitions:
            w.config = config
            w.refused = refusals[w.topic]
            w.channel = keys.hw_channel(w.topic, w.partition)


async def _incremental(reading: _Reading, session: FetchSession) -> list[tuple[Wanted, Answer]]:
    """An incremental fetch: the partitions of the session that need a look, looked at
    again as notifications come until the answers hold ``min_bytes`` or the time is up; in
    the session's order, each partition's last look."""
    context = reading.context
    follower = session.follower
    if follower is None:
        follower = SessionFollower(context.pod.hw_waits, context.pod.keys, session)
    follower.sync()
    configs = await _configs(context, list(follower.topics))
    follower.topics_now(configs)
    looked: dict[PartitionKey, tuple[Wanted, Answer]] = {}
    while True:
        changes = follower.changes
        wanted = [_wanted(p) for p in session.to_read()]
        _configure(context, wanted, configs, reading)
        answers = await reading.read(wanted)
        now = list(zip(wanted, answers, strict=True))
        follower.settle(now, reading.committed)
        looked.update((w.key, (w, a)) for w, a in now)
        if reading.done(answers) or follower.closed:
            break
        if follower.changes == changes and not await follower.wait(reading.remaining):
            break
    rank = session.rank
    return [looked[key] for key in sorted(looked, key=lambda k: rank.get(k, -1))]


async def _long_poll(reading: _Reading, wanted: list[Wanted]) -> list[Answer]:
    """Read until the answers hold ``min_bytes``, one fails, or the deadline passes."""
    waits = reading.context.pod.hw_waits
    channels = [w.channel for w in wanted if w.config is not None]
    # Watching before the read is enough when every channel is already listened to.
    watch = waits.watch(*channels) if channels and waits.all_known(channels) else None
    subscribed = watch is not None
    try:
        while True:
            answers = await reading.read(wanted)
            if reading.done(answers) or not channels:
                return answers
            if not subscribed:
                if watch is None:
                    watch = waits.watch(*channels)
                subscribed = True
                if not await watch.subscribed(reading.remaining):
                    return answers
                continue  # read again: a change before the subscription is not missed
            assert watch is not None
            if not await watch.next(reading.remaining):
                return answers
    finally:
        if watch is not None:
            watch.close()


def _response(
    request: Request, error: int, session_id: int, answered: list[tuple[Wanted, Answer]]
) -> FetchAnswer:
    by_topic: dict[str | uuid.UUID | None, list[PartitionData]] = {}  # by name, or id in v13+
    for w, a in answered:
        aborted = a.aborted
        by_topic.setdefault(w.key[0], []).append(
            PartitionData(
                w.partition,
                a.error,
                a.high_watermark,
                a.last_stable,
                a.log_start,
                None if aborted is None else [AbortedTransaction(p, f) for p, f in aborted],
                -1,
                a.records or b"",  # librdkafka refuses a null record set
            )
        )
    if request.version >= TOPIC_IDS_SINCE:
        topics = [TopicResponse(None, t, parts) for t, parts in by_topic.items()]
    else:
        topics = [TopicResponse(t, None, parts) for t, parts in by_topic.items()]
    return FetchAnswer(topics, error, session_id)
