"""ShareFetch and ShareAcknowledge (KIP-932), v1 and v2 (KIP-1206's acquire modes, KIP-1222's
RENEW acknowledgements).

Share sessions live in the pod's memory, by (group, member id): epoch 0 opens one, -1 closes
it (and releases what the member holds on the session's partitions, as Kafka does), any
other epoch must be the next one. A pod that does not know the session (a restart, another
pod) answers SHARE_SESSION_NOT_FOUND, as Kafka does, and the client opens a new one:
nothing of the records' state is in the session, it is all in Redis
(``mapping.share_group``). Records are acquired per share-partition by
``share_group/acquire``, MaxRecords at most over the whole request (in both acquire modes:
batch_optimized may go past it in Kafka, never here); the answer carries them as Kafka
record batches (the Fetch encoder) with one AcquiredRecords range per run of consecutive
offsets of one delivery count. The long poll is simple: up to MaxWaitMs, acquisition is
tried again every POLL_STEP_S. RENEW (4) is accepted only where the request says it carries
renewals (v2's IsRenewAck); a ShareFetch that does then only acknowledges."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.fetch_reads import encode_entries
from adapter.kafka.protocol import Request
from adapter.kafka.versions import SHARE_ACKNOWLEDGE, SHARE_FETCH
from mapping.core.codec import MAX_OFFSET, entry_offset
from mapping.core.errors import BrokerError
from mapping.security.acls import Operation, ResourceType
from mapping.share_group.share_groups import AckBatch, Acquired, invalid_acknowledgements

# Kafka's error codes of share sessions and acknowledgements (Errors.java).
INVALID_RECORD_STATE = 121
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
POLL_STEP_S = 0.05
# Sessions a pod keeps at most (the oldest go first beyond: their clients open new ones).
MAX_SESSIONS = 10_000
# ShareFetch v2's ShareAcquireMode (KIP-1206).
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1
# What a request that names no MaxRecords (0) gets at most.
DEFAULT_MAX_RECORDS = 500

FetchResponse = SHARE_FETCH.response
FetchTopic = FetchResponse.ShareFetchableTopicResponse
FetchPartition = FetchTopic.PartitionData
AckResponse = SHARE_ACKNOWLEDGE.response
AckTopic = AckResponse.ShareAcknowledgeTopicResponse
AckPartition = AckTopic.PartitionData

TopicPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    epoch: int  # the epoch the next request must carry
    partitions: set[TopicPartition] = field(default_factory=set)


@dataclass
class _Outcome:
    """One partition's part of an answer."""

    error: int = errors.NONE
    ack_error: int | None = None  # None: no acknowledgement was asked for
    records: bytes = b""
    acquired: list[tuple[int, int, int]] = field(default_factory=list)


def acquired_ranges(offsets: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(first, last, delivery count) ranges of sorted (offset, delivery count) pairs: one per
    run of consecutive offsets with one delivery count (offsets between records of the log
    are not records: a range never spans them)."""
    ranges: list[tuple[int, int, int]] = []
    for offset, count in offsets:
        if ranges and ranges[-1][1] + 1 == offset and ranges[-1][2] == count:
            first, _, _ = ranges[-1]
            ranges[-1] = (first, offset, count)
        else:
            ranges.append((offset, offset, count))
    return ranges


def ack_batches(raw: Any) -> list[AckBatch]:
    return [
        AckBatch(b.first_offset, b.last_offset, list(b.acknowledge_types or ())) for b in raw or ()
    ]


def rotated(partitions: list[TopicPartition], start: int) -> list[TopicPartition]:
    """``partitions`` beginning at ``start`` (modulo their number), so that a request's
    record budget does not always go to the same first partition."""
    if not partitions:
        return []
    at = start % len(partitions)
    return partitions[at:] + partitions[:at]


def renewing(version: int, body: Any) -> bool:
    """Whether a v2 request says it carries RENEW acknowledgements (IsRenewAck)."""
    return version >= 2 and bool(getattr(body, "is_renew_ack", False))


async def _names(context: KafkaContext, ids: set[uuid.UUID]) -> dict[uuid.UUID, str | None]:
    return {topic_id: await context.topic_name(topic_id) for topic_id in ids}


async def _acknowledge(
    context: KafkaContext,
    group: str,
    member: str,
    topic: str | None,
    p: int,
    raw: Any,
    renew: bool,
) -> int:
    if topic is None:
        return errors.UNKNOWN_TOPIC_ID
    batches = ack_batches(raw)
    if invalid_acknowledgements(batches, renew):
        return errors.INVALID_REQUEST
    held = await context.share_groups.acknowledge(group, member, topic, p, batches)
    return errors.NONE if held else INVALID_RECORD_STATE


async def _release(
    context: KafkaContext,
    group: str,
    member: str,
    partitions: set[TopicPartition],
    names: dict[uuid.UUID, str | None],
) -> None:
    """A closed share session gives back what the member holds on its partitions."""
    targets = [
        (member, name, p)
        for topic_id, p in sorted(partitions, key=lambda tp: (str(tp[0]), tp[1]))
        if (name := names.get(topic_id)) is not None
    ]
    await context.share_groups.release(group, targets)


async def _acquire(
    context: KafkaContext, group: str, member: str, topic: str, p: int, max_records: int,
    max_bytes: int, first: bool,
) -> _Outcome:  # fmt: skip
    config = await context.find_topic(topic)
    if config is None or p >= config.partitions:
        return _Outcome(error=errors.UNKNOWN_TOPIC_OR_PARTITION)
    taken: list[Acquired] = await context.share_groups.acquire(
        group, member, topic, p, max_records, max_bytes, first
    )
    if not taken:
        return _Outcome()
    bits = context.pod.kafka.bits
    entries = [(a.entry_id, a.fields) for a in taken]
    batches, _, _, _, _ = encode_entries(
        entries, bits, MAX_OFFSET, 1 << 62, True, config, 2, context.pod.leader_epochs
    )
    offsets = [(entry_offset(a.entry_id, bits), a.delivery_count) for a in taken]
    return _Outcome(records=b"".join(batches), acquired=acquired_ranges(offsets))


def _session_check(
    context: KafkaContext, key: tuple[str, str], epoch: int
) -> tuple[int, ShareSession | None]:
    """(error, session) for a request carrying ``epoch`` (not 0)."""
    session = context.share_sessions.get(key)
    if session is None:
        return SHARE_SESSION_NOT_FOUND, None
    if epoch != -1 and epoch != session.epoch:
        return INVALID_SHARE_SESSION_EPOCH, None
    return errors.NONE, session


def _open(context: KafkaContext, key: tuple[str, str]) -> ShareSession:
    sessions = context.share_sessions
    sessions.pop(key, None)
    if len(sessions) >= MAX_SESSIONS:
        sessions.pop(next(iter(sessions)))
    session = sessions[key] = ShareSession(epoch=1)
    return session


def _fetch_answer(
    version: int, code: int, lock_ms: int = 0, message: str | None = None, **kw: Any
) -> Any:
    return FetchResponse[version](
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        acquisition_lock_timeout_ms=lock_ms,
        responses=kw.get("responses", []),
        node_endpoints=[],
    )


async def share_fetch(context: KafkaContext, request: Request) -> Any:
    body, version = request.body, request.version
    group, member = body.group_id or "", body.member_id or ""
    if not group or not member:
        return _fetch_answer(
            version, errors.INVALID_REQUEST, message="GroupId and MemberId are needed"
        )
    if context.authorizer.enabled and not await authorization.allowed(
        context, request, Operation.READ, ResourceType.GROUP, group
    ):
        return _fetch_answer(version, errors.GROUP_AUTHORIZATION_FAILED)
    mode = body.share_acquire_mode if version >= 2 else BATCH_OPTIMIZED
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        return _fetch_answer(version, errors.INVALID_REQUEST, message="Unknown ShareAcquireMode")
    renew = renewing(version, body)
    if renew and (body.max_bytes or body.min_bytes or body.max_records or body.max_wait_ms):
        # KIP-1222: a renewing ShareFetch only acknowledges
        message = "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 with IsRenewAck"
        return _fetch_answer(version, errors.INVALID_REQUEST, message=message)
    try:
        return await _share_fetch(context, request, group, member, renew)
    except BrokerError:
        return _fetch_answer(version, errors.UNKNOWN_SERVER_ERROR, message="Redis is not available")


async def _share_fetch(
    context: KafkaContext, request: Request, group: str, member: str, renew: bool
) -> Any:
    body, version = request.body, request.version
    key = (group, member)
    epoch = body.share_session_epoch
    if epoch == 0:
        session = _open(context, key)
    else:
        code, found = _session_check(context, key, epoch)
        if found is None:
            return _fetch_answer(version, code)
        session = found
        session.epoch += 1
    requested: dict[TopicPartition, Any] = {}
    for topic in body.topics or ():
        for part in topic.partitions or ():
            requested[(topic.topic_id, part.partition_index)] = part.acknowledgement_batches
    for forgotten in body.forgotten_topics_data or ():
        for p in forgotten.partitions or ():
            session.partitions.discard((forgotten.topic_id, p))
    if epoch != -1 and not renew:
        session.partitions.update(requested)
    names = await _names(context, {t for t, _ in (*requested, *session.partitions)})
    settings = await context.share_groups.settings(group, fresh=True)
    outcomes: dict[TopicPartition, _Outcome] = {}
    # READ on each topic (Kafka's share fetch): a refused one is neither acknowledged nor
    # read, and leaves the session
    refused = await authorization.denied(
        context, request, Operation.READ, ResourceType.TOPIC, names.values()
    )
    for tp in [tp for tp in (*requested, *session.partitions) if names.get(tp[0]) in refused]:
        outcomes.setdefault(tp, _Outcome()).error = errors.TOPIC_AUTHORIZATION_FAILED
        requested.pop(tp, None)
        session.partitions.discard(tp)
    for (topic_id, p), raw in requested.items():
        if raw:
            outcome = outcomes.setdefault((topic_id, p), _Outcome())
            outcome.ack_error = await _acknowledge(
                context, group, member, names[topic_id], p, raw, renew
            )
    if epoch == -1:
        context.share_sessions.pop(key, None)
        await _release(context, group, member, session.partitions | set(requested), names)
    elif not renew:
        await _fetch_records(context, body, group, member, session, names, outcomes)
    for topic_id, p in requested:
        if epoch == 0:
            outcomes.setdefault((topic_id, p), _Outcome())
    topics = _fetch_topics(context, outcomes)
    return _fetch_answer(version, errors.NONE, settings.lock_ms, responses=topics)


async def _fetch_records(
    context: KafkaContext,
    body: Any,
    group: str,
    member: str,
    session: ShareSession,
    names: dict[uuid.UUID, str | None],
    outcomes: dict[TopicPartition, _Outcome],
) -> None:
    """Acquire from the session's partitions, MaxRecords at most in all and about MaxBytes
    (Kafka's soft bound: the first record comes whatever its size; MaxBytes 0: none),
    waiting up to MaxWaitMs while nothing is available."""
    if body.max_bytes <= 0:
        return
    deadline = time.monotonic() + max(body.max_wait_ms, 0) / 1000
    budget = body.max_records if body.max_records > 0 else DEFAULT_MAX_RECORDS
    order = sorted(session.partitions, key=lambda tp: (str(tp[0]), tp[1]))
    while True:
        left, bytes_left = budget, body.max_bytes
        for topic_id, p in rotated(order, session.epoch):
            name = names.get(topic_id)
            if name is None:
                outcomes.setdefault((topic_id, p), _Outcome()).error = errors.UNKNOWN_TOPIC_ID
                continue
            if left <= 0 or bytes_left <= 0:
                break
            nothing_yet = left == budget
            outcome = await _acquire(context, group, member, name, p, left, bytes_left, nothing_yet)
            if outcome.error or outcome.acquired:
                mine = outcomes.setdefault((topic_id, p), _Outcome())
                mine.error, mine.records, mine.acquired = (
                    outcome.error, outcome.records, outcome.acquired,
                )  # fmt: skip
                left -= sum(last - first + 1 for first, last, _ in outcome.acquired)
                bytes_left -= len(outcome.records)
        if left < budget or time.monotonic() >= deadline or not session.partitions:
            return
        await asyncio.sleep(min(POLL_STEP_S, max(0.0, deadline - time.monotonic())))


def _fetch_topics(context: KafkaContext, outcomes: dict[TopicPartition, _Outcome]) -> list[Any]:
    leader = FetchPartition.LeaderIdAndEpoch(
        leader_id=context.registry.node_id or 0, leader_epoch=context.pod.leader_epochs.current
    )
    by_topic: dict[uuid.UUID, list[Any]] = {}
    for (topic_id, p), o in sorted(outcomes.items(), key=lambda i: (str(i[0][0]), i[0][1])):
        by_topic.setdefault(topic_id, []).append(
            FetchPartition(
                partition_index=p,
                error_code=o.error,
                error_message=None,
                acknowledge_error_code=o.ack_error or errors.NONE,
                acknowledge_error_message=None,
                current_leader=leader,
                records=o.records,
                acquired_records=[
                    FetchPartition.AcquiredRecords(
                        first_offset=first, last_offset=last, delivery_count=count
                    )
                    for first, last, count in o.acquired
                ],
            )
        )
    return [FetchTopic(topic_id=t, partitions=ps) for t, ps in by_topic.items()]


def _ack_answer(
    version: int,
    code: int,
    message: str | None = None,
    responses: list[Any] | None = None,
    lock_ms: int = 0,
) -> Any:
    answer = AckResponse[version](
        throttle_time_ms=0,
        error_code=code,
        error_message=message,
        responses=responses or [],
        node_endpoints=[],
    )
    if version >= 2:
        answer.acquisition_lock_timeout_ms = lock_ms
    return answer


async def share_acknowledge(context: KafkaContext, request: Request) -> Any:
    body, version = request.body, request.version
    group, member = body.group_id or "", body.member_id or ""
    if not group or not member:
        return _ack_answer(version, errors.INVALID_REQUEST, "GroupId and MemberId are needed")
    if context.authorizer.enabled and not await authorization.allowed(
        context, request, Operation.READ, ResourceType.GROUP, group
    ):
        return _ack_answer(version, errors.GROUP_AUTHORIZATION_FAILED)
    key = (group, member)
    epoch = body.share_session_epoch
    if epoch == 0:  # acknowledging needs a session (Kafka: the same error)
        return _ack_answer(version, INVALID_SHARE_SESSION_EPOCH)
    code, session = _session_check(context, key, epoch)
    if session is None:
        return _ack_answer(version, code)
    if epoch == -1:
        context.share_sessions.pop(key, None)
    else:
        session.epoch += 1
    renew = renewing(version, body)
    leader = AckPartition.LeaderIdAndEpoch(
        leader_id=context.registry.node_id or 0, leader_epoch=context.pod.leader_epochs.current
    )
    topics = []
    try:
        settings = await context.share_groups.settings(group)
        ids = {t.topic_id for t in body.topics or ()} | {t for t, _ in session.partitions}
        names = await _names(context, ids)
        refused = await authorization.denied(
            context, request, Operation.READ, ResourceType.TOPIC,
            [names[t.topic_id] for t in body.topics or ()],
        )  # fmt: skip
        for topic in body.topics or ():
            partitions = []
            for part in topic.partitions or ():
                if names[topic.topic_id] in refused:
                    ack = errors.TOPIC_AUTHORIZATION_FAILED
                else:
                    ack = await _acknowledge(
                        context, group, member, names[topic.topic_id], part.partition_index,
                        part.acknowledgement_batches, renew,
                    )  # fmt: skip
                partitions.append(
                    AckPartition(
                        partition_index=part.partition_index,
                        error_code=ack,
                        error_message=None,
                        current_leader=leader,
                    )
                )
            topics.append(AckTopic(topic_id=topic.topic_id, partitions=partitions))
        if epoch == -1:
            named = {
                (t.topic_id, p.partition_index)
                for t in body.topics or ()
                for p in t.partitions or ()
            }
            await _release(context, group, member, session.partitions | named, names)
    except BrokerError:
        return _ack_answer(version, errors.UNKNOWN_SERVER_ERROR, "Redis is not available")
    return _ack_answer(version, errors.NONE, responses=topics, lock_ms=settings.lock_ms)
