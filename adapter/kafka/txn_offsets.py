"""TxnOffsetCommit (API 28): a transactional producer's consumer offsets, kept aside per
(group, producer id) until its transaction ends (``mapping.kafka_group`` txn_offsets:
EndTxn commits or drops them). v0-2: producer only; v3 adds the consumer's member id,
generation and group.instance.id, checked as Kafka checks a transactional commit; v4 is
KIP-890's (the same request; TRANSACTION_ABORTABLE may be answered). v5 (transactions V2:
an implicit AddOffsetsToTxn) is not offered."""

from __future__ import annotations

from typing import Any

from adapter.kafka.authorization import txn_commit_refusals
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import TXN_OFFSET_COMMIT
from mapping.kafka_group import NO_EPOCH, TxnCommitter, TxnOffset

Response = TXN_OFFSET_COMMIT.response
ResponseTopic = Response.TxnOffsetCommitResponseTopic
ResponsePartition = ResponseTopic.TxnOffsetCommitResponsePartition


async def txn_offset_commit(context: KafkaContext, request: Request) -> Any:
    body = request.body
    wanted: dict[str, dict[int, TxnOffset]] = {}
    for topic in body.topics or ():
        parts = wanted.setdefault(topic.name or "", {})
        for p in topic.partitions or ():
            parts[p.partition_index] = (
                p.committed_offset,
                p.committed_metadata,
                p.committed_leader_epoch if request.version >= 2 else NO_EPOCH,
            )
    committer = TxnCommitter(
        producer_id=body.producer_id,
        producer_epoch=body.producer_epoch,
        member_id=(body.member_id or "") if request.version >= 3 else "",
        generation=body.generation_id if request.version >= 3 else -1,
        group_instance_id=(body.group_instance_id or None) if request.version >= 3 else None,
    )
    refused = await txn_commit_refusals(context, request, wanted)
    asked, wanted = wanted, {t: ps for t, ps in wanted.items() if t not in refused}
    codes: dict[str, dict[int, int]] = {}
    if wanted or not refused:  # (nothing left to commit: the group is not touched)
        committing = context.pod.kafka_groups.txn_commit_offsets(
            body.group_id or "", committer, wanted
        )
        codes = await coordinator_call(
            committing, lambda code: {t: dict.fromkeys(ps, code) for t, ps in wanted.items()}
        )
    codes.update({t: dict.fromkeys(asked[t], code) for t, code in refused.items()})
    return Response[request.version](
        throttle_time_ms=0,
        topics=[
            ResponseTopic(
                name=name,
                partitions=[
                    ResponsePartition(partition_index=p, error_code=code)
                    for p, code in sorted(parts.items())
                ],
            )
            for name, parts in codes.items()
        ],
    )
