"""OffsetCommit, OffsetFetch (one group, or several at once from v8), OffsetDelete: the
group's committed offsets, the same store V1's COMMIT/OFFSET use (``mapping.kafka_group``
offsets). The committed leader epoch (OffsetCommit v6+) is stored with the offset and
answered by OffsetFetch v5+; -1 where none was committed (a V1 COMMIT, an older client).
The empty group id is a group for OffsetCommit and OffsetFetch, as in Kafka."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.authorization import (
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    allowed,
    commit_refusals,
    denied,
    refusal,
)
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH
from mapping.core.errors import BrokerError
from mapping.kafka_group import NO_EPOCH, NO_OFFSET, CommittedOffset, OffsetToCommit
from mapping.replication.acks import AckOutcome

CommitResponse = OFFSET_COMMIT.response
CommitTopic = CommitResponse.OffsetCommitResponseTopic
CommitPartition = CommitTopic.OffsetCommitResponsePartition
FetchResponse = OFFSET_FETCH.response
FetchTopic = FetchResponse.OffsetFetchResponseTopic
FetchPartition = FetchTopic.OffsetFetchResponsePartition
FetchGroup = FetchResponse.OffsetFetchResponseGroup
FetchGroupTopic = FetchGroup.OffsetFetchResponseTopics
FetchGroupPartition = FetchGroupTopic.OffsetFetchResponsePartitions
DeleteResponse = OFFSET_DELETE.response
DeleteTopic = DeleteResponse.OffsetDeleteResponseTopic
DeletePartition = DeleteTopic.OffsetDeleteResponsePartition


async def offset_commit(context: KafkaContext, request: Request) -> Any:
    body = request.body
    wanted: dict[str, dict[int, OffsetToCommit]] = {}
    for topic in body.topics or ():
        parts = wanted.setdefault(topic.name or "", {})
        for p in topic.partitions or ():
            parts[p.partition_index] = (
                p.committed_offset,
                p.committed_metadata,
                p.committed_leader_epoch if request.version >= 6 else NO_EPOCH,
            )
    refused = await commit_refusals(context, request, body.group_id or "", wanted)
    asked, wanted = wanted, {t: ps for t, ps in wanted.items() if t not in refused}
    await _logical_to_positions(context, wanted)
    codes: dict[str, dict[int, int]] = {}
    if wanted or not refused:  # (nothing left to commit: the group is not touched)
        committing = context.pod.kafka_groups.commit_offsets(
            body.group_id or "",
            body.member_id or "",
            body.generation_id_or_member_epoch,
            wanted,
            body.group_instance_id or None,
        )
        codes = await coordinator_call(
            committing, lambda code: {t: dict.fromkeys(ps, code) for t, ps in wanted.items()}
        )
    codes.update({t: dict.fromkeys(asked[t], code) for t, code in refused.items()})
    acks = context.pod.replication.acks
    if acks.waits_for_redis_replicas and any(
        c == errors.NONE for ps in codes.values() for c in ps.values()
    ):
        # --redis-wait-replicas: a commit the Redis replicas lack could go backwards in a
        # failover; unconfirmed it answers REQUEST_TIMED_OUT (retriable: the client commits
        # again).
        if (await acks.await_durable()).outcome is not AckOutcome.ACKED:
            codes = {
                t: {p: errors.REQUEST_TIMED_OUT if c == errors.NONE else c for p, c in ps.items()}
                for t, ps in codes.items()
            }
    return CommitResponse[request.version](
        throttle_time_ms=0,
        topics=[
            CommitTopic(
                name=name,
                partitions=[
                    CommitPartition(partition_index=p, error_code=code)
                    for p, code in sorted(parts.items())
                ],
            )
            for name, parts in codes.items()
        ],
    )


# Kafka's logical offsets, as kafkajs commits them (its admin's resetOffsets, a seek with
# autoCommit): the latest and the earliest.
LATEST, EARLIEST = -1, -2


async def _logical_to_positions(
    context: KafkaContext, wanted: dict[str, dict[int, OffsetToCommit]]
) -> None:
    """A committed -1 or -2 becomes the position it names now, the partition's end or its
    log start (as ListOffsets answers them): a committed offset here is a position that
    every reader takes (V1 OFFSET, the lag, librdkafka, the Java consumer), where Kafka
    keeps the sentinel until a consumer resolves it; kafka-consumer-groups.sh
    --reset-offsets commits positions too. Unknown partitions are left to the commit's
    answer, and so is a failed lookup (the commit fails alike)."""
    for name, parts in wanted.items():
        logical = [p for p, value in parts.items() if value[0] in (LATEST, EARLIEST)]
        if not logical:
            continue
        try:
            config = await context.find_topic(name)
            if config is None:
                continue
            for p in logical:
                if 0 <= p < config.partitions:
                    start, end = await context.pod.kafka.first_offset(config, p)
                    parts[p] = (end if parts[p][0] == LATEST else start, *parts[p][1:])
        except BrokerError:
            continue


async def _fetch_one(
    context: KafkaContext,
    group: str,
    topics: dict[str, list[int]] | None,
    require_stable: bool,
    request: Request,
) -> tuple[int, dict[str, dict[int, CommittedOffset]]]:
    """(group error, topic -> partition -> committed offset) of one group; ``require_stable``
    (v7+): UNSTABLE_OFFSET_COMMIT where a transaction's offsets are pending. Authorized as
    Kafka does: DESCRIBE on the group, and on each topic (a topic asked for by name is
    answered TOPIC_AUTHORIZATION_FAILED, left out of "every committed partition")."""
    if not await allowed(context, request, DESCRIBE, GROUP, group):
        return errors.GROUP_AUTHORIZATION_FAILED, {}
    code, found = await _fetch_unchecked(context, group, topics, require_stable)
    hidden = await denied(context, request, DESCRIBE, TOPIC, found)
    if hidden:
        denial = CommittedOffset(NO_OFFSET, None, errors.TOPIC_AUTHORIZATION_FAILED)
        found = {t: ps for t, ps in found.items() if t not in hidden}
        if topics is not None:
            found.update({t: dict.fromkeys(topics[t], denial) for t in hidden if t in topics})
    return code, found


async def _fetch_unchecked(
    context: KafkaContext,
    group: str,
    topics: dict[str, list[int]] | None,
    require_stable: bool,
) -> tuple[int, dict[str, dict[int, CommittedOffset]]]:

    async def fetch() -> tuple[int, dict[str, dict[int, CommittedOffset]]]:
        groups = context.pod.kafka_groups
        found = await groups.fetch_offsets(group, topics, require_stable)
        # --redis-wait-replicas: no offset is served before the Redis replicas have it (a
        # failover could take it back); unconfirmed, the group answers
        # COORDINATOR_LOAD_IN_PROGRESS, which clients retry
        if (await context.pod.replication.acks.await_durable()).outcome is not AckOutcome.ACKED:
            return errors.COORDINATOR_LOAD_IN_PROGRESS, {}
        return errors.NONE, found

    return await coordinator_call(fetch(), lambda code: (code, {}))


def _asked(topics: Any) -> dict[str, list[int]] | None:
    if topics is None:
        return None  # every committed partition
    return {t.name or "": list(t.partition_indexes or ()) for t in topics}


async def offset_fetch(context: KafkaContext, request: Request) -> Any:
    body = request.body
    require_stable = bool(body.require_stable) if request.version >= 7 else False
    if request.version >= 8:
        groups = []
        for asked in body.groups or ():
            code, found = await _fetch_one(
                context, asked.group_id or "", _asked(asked.topics), require_stable, request
            )
            groups.append(
                FetchGroup(
                    group_id=asked.group_id,
                    error_code=code,
                    topics=[
                        FetchGroupTopic(
                            name=name, partitions=_partitions(FetchGroupPartition, parts)
                        )
                        for name, parts in found.items()
                    ],
                )
            )
        return FetchResponse[request.version](throttle_time_ms=0, groups=groups)
    topics = body.topics
    if request.version < 2 and not topics:
        topics = None  # v1 has no null array: an empty one cannot ask for every topic
    code, found = await _fetch_one(
        context, body.group_id or "", _asked(topics), require_stable, request
    )
    if request.version < 2 and code != errors.NONE:
        # v0-1 have no group error: it goes on every partition asked for
        failed = CommittedOffset(NO_OFFSET, None, code)
        found = {t: dict.fromkeys(ps, failed) for t, ps in (_asked(topics) or {}).items()}
    return FetchResponse[request.version](
        throttle_time_ms=0,
        error_code=code,
        topics=[
            FetchTopic(name=name, partitions=_partitions(FetchPartition, parts))
            for name, parts in found.items()
        ],
    )


def _partitions(kind: Any, parts: dict[int, CommittedOffset]) -> list[Any]:
    return [
        kind(
            partition_index=p,
            committed_offset=c.offset,
            committed_leader_epoch=c.leader_epoch,
            metadata=c.metadata if c.metadata is not None else "",
            error_code=c.error,
        )
        for p, c in sorted(parts.items())
    ]


async def offset_delete(context: KafkaContext, request: Request) -> Any:
    body = request.body
    wanted = {
        t.name or "": [p.partition_index for p in t.partitions or ()] for t in body.topics or ()
    }
    if (refused := await refusal(context, request, DELETE, GROUP, body.group_id)) is not None:
        return refused
    unread = await denied(context, request, READ, TOPIC, wanted)  # Kafka: READ on each topic
    asked, wanted = wanted, {t: ps for t, ps in wanted.items() if t not in unread}
    deleting = context.pod.kafka_groups.delete_offsets(body.group_id or "", wanted)
    code, found = await coordinator_call(deleting, lambda code: (code, {}))
    denial = errors.TOPIC_AUTHORIZATION_FAILED
    found = {**found, **{t: dict.fromkeys(asked[t], denial) for t in unread}}
    return DeleteResponse[request.version](
        throttle_time_ms=0,
        error_code=code,
        topics=[
            DeleteTopic(
                name=name,
                partitions=[
                    DeletePartition(partition_index=p, error_code=c)
                    for p, c in sorted(parts.items())
                ],
            )
            for name, parts in found.items()
        ],
    )
