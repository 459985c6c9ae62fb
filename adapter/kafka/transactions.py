"""The transaction coordinator's APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions (InitProducerId with a transactional id is in
init_producer_id.py, TxnOffsetCommit with the groups). The work is mapping/txn/transactions.py's;
this module reads requests and builds responses as Kafka's KafkaApis does, including its
answer to clients too old to know PRODUCER_FENCED (INVALID_PRODUCER_EPOCH).

Any pod coordinates any transaction (its state is in Redis): FindCoordinator names the pod
asked (coordinator.py). When Redis cannot be reached the answer is COORDINATOR_NOT_AVAILABLE,
which clients retry after looking the coordinator up again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from adapter.kafka import errors
from adapter.kafka.authorization import (
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    TXN,
    WRITE,
    add_partitions_refusals,
    allowed,
    denied,
)
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.protocol import Request
from adapter.kafka.versions import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
)
from mapping.txn.transactions import Transactions
from mapping.txn.txn_state import STATES

AddPartitionsResponse = ADD_PARTITIONS_TO_TXN.response
TopicResult = AddPartitionsResponse.AddPartitionsToTxnTopicResult
PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult
TransactionResult = AddPartitionsResponse.AddPartitionsToTxnResult
DescribeResponse = DESCRIBE_TRANSACTIONS.response
ListResponse = LIST_TRANSACTIONS.response

# The first version of each API whose clients know PRODUCER_FENCED (KafkaApis).
FENCED_SINCE = {"AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2, "InitProducerId": 4}


def for_version(code: int, api: str, version: int) -> int:
    """PRODUCER_FENCED as an older client understands it."""
    if code == errors.PRODUCER_FENCED and version < FENCED_SINCE[api]:
        return errors.INVALID_PRODUCER_EPOCH
    return code


def _coordinator(context: KafkaContext) -> Transactions:
    return context.pod.transactions


def _partitions(topics: Any) -> list[tuple[str, int]]:
    return [(t.name, p) for t in topics or () for p in t.partitions or ()]


def _topic_results(codes: dict[tuple[str, int], int]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(partition_index=p, partition_error_code=code)
        )
    return [TopicResult(name=t, results_by_partition=r) for t, r in by_topic.items()]


async def _add_one(
    context: KafkaContext, version: int, transactional_id: str | None, producer_id: int,
    epoch: int, partitions: list[tuple[str, int]], verify_only: bool, request: Request,
) -> dict[tuple[str, int], int]:  # fmt: skip
    if not transactional_id:
        return dict.fromkeys(partitions, errors.INVALID_REQUEST)
    refused = await add_partitions_refusals(context, request, transactional_id, partitions)
    if refused:
        return refused
    coordinator = _coordinator(context)
    if verify_only:
        work = coordinator.verify_partitions(transactional_id, producer_id, epoch, partitions)
    else:
        work = coordinator.add_partitions(transactional_id, producer_id, epoch, partitions)
    codes = await coordinator_call(work, lambda code: dict.fromkeys(partitions, code))
    return {tp: for_version(c, "AddPartitionsToTxn", version) for tp, c in codes.items()}


async def add_partitions_to_txn(context: KafkaContext, request: Request) -> Any:
    body, version = request.body, request.version
    if version < 4:
        partitions = _partitions(body.v3_and_below_topics)
        codes = await _add_one(
            context, version, body.v3_and_below_transactional_id,
            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch, partitions, False,
            request,
        )  # fmt: skip
        return AddPartitionsResponse[version](
            throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(codes)
        )
    results = []
    for txn in body.transactions or ():
        codes = await _add_one(
            context, version, txn.transactional_id, txn.producer_id, txn.producer_epoch,
            _partitions(txn.topics), bool(txn.verify_only), request,
        )  # fmt: skip
        results.append(
            TransactionResult(
                transactional_id=txn.transactional_id, topic_results=_topic_results(codes)
            )
        )
    return AddPartitionsResponse[version](
        throttle_time_ms=0, error_code=errors.NONE, results_by_transaction=results
    )


async def add_offsets_to_txn(context: KafkaContext, request: Request) -> Any:
    body, version = request.body, request.version
    if not body.transactional_id:
        code = errors.INVALID_REQUEST
    elif not await allowed(context, request, WRITE, TXN, body.transactional_id):
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not await allowed(context, request, READ, GROUP, body.group_id or ""):
        code = errors.GROUP_AUTHORIZATION_FAILED
    else:
        work = _coordinator(context).add_offsets(
            body.transactional_id, body.producer_id, body.producer_epoch, body.group_id or ""
        )
        code = await coordinator_call(work, lambda c: c)
    return ADD_OFFSETS_TO_TXN.response[version](
        throttle_time_ms=0, error_code=for_version(code, "AddOffsetsToTxn", version)
    )


async def end_txn(context: KafkaContext, request: Request) -> Any:
    body, version = request.body, request.version
    if not body.transactional_id:
        code = errors.INVALID_REQUEST
    elif not await allowed(context, request, WRITE, TXN, body.transactional_id):
        code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        work = _coordinator(context).end_txn(
            body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed)
        )
        code = await coordinator_call(work, lambda c: c)
    return END_TXN.response[version](
        throttle_time_ms=0, error_code=for_version(code, "EndTxn", version)
    )


async def describe_transactions(context: KafkaContext, request: Request) -> Any:
    coordinator = _coordinator(context)
    states = []
    ids = list(request.body.transactional_ids or ())
    refused = await denied(context, request, DESCRIBE, TXN, ids)  # per id (as Kafka)
    checked = context.authorizer.enabled
    for transactional_id in ids:
        entry = DescribeResponse.TransactionState(
            error_code=errors.NONE, transactional_id=transactional_id, transaction_state="",
            transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
            producer_epoch=-1, topics=[],
        )  # fmt: skip
        states.append(entry)
        if transactional_id in refused:
            entry.error_code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            continue
        if not transactional_id:
            entry.error_code = errors.INVALID_REQUEST
            continue
        state = await coordinator_call(coordinator.describe(transactional_id), lambda c: c)
        if isinstance(state, int):
            entry.error_code = state
            continue
        if state is None:
            entry.error_code = errors.TRANSACTIONAL_ID_NOT_FOUND
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in state.partitions:
            by_topic.setdefault(topic, []).append(p)
        if checked:  # only the topics the principal may DESCRIBE
            for topic in await denied(context, request, DESCRIBE, TOPIC, by_topic):
                del by_topic[topic]
        entry.transaction_state = state.state
        entry.transaction_timeout_ms = state.timeout_ms
        entry.transaction_start_time_ms = state.txn_start_ms
        entry.producer_id = state.producer_id
        entry.producer_epoch = state.epoch
        entry.topics = [
            DescribeResponse.TransactionState.TopicData(topic=t, partitions=ps)
            for t, ps in by_topic.items()
        ]
    return DescribeResponse[request.version](throttle_time_ms=0, transaction_states=states)


async def list_transactions(context: KafkaContext, request: Request) -> Any:
    """The transactions the hash over the live brokers puts on this pod's broker (as
    ListGroups: admin clients ask every broker and each transaction is listed once),
    filtered as Kafka's TransactionStateManager.listTransactionStates."""
    body = request.body
    wanted_states = set(body.state_filters or ())
    unknown = sorted(wanted_states - set(STATES))
    wanted_ids = set(body.producer_id_filters or ())
    duration = getattr(body, "duration_filter", -1)
    if duration is None:
        duration = -1
    reply = ListResponse[request.version](
        throttle_time_ms=0, error_code=errors.NONE, unknown_state_filters=unknown,
        transaction_states=[],
    )  # fmt: skip
    coordinator = _coordinator(context)

    async def work() -> list[Any]:
        here = await context.coordinated_here()
        now = int(time.time() * 1000)
        ids = [t for t in await coordinator.transactional_ids() if here(t)]
        states = await asyncio.gather(*(coordinator.describe(t) for t in ids))
        listed = []
        for transactional_id, state in zip(ids, states, strict=True):
            if state is None or state.state == "Dead":
                continue
            if wanted_ids and state.producer_id not in wanted_ids:
                continue
            if wanted_states and state.state not in wanted_states:
                continue
            if duration >= 0 and now - state.txn_start_ms <= duration:
                continue
            listed.append(
                ListResponse.TransactionState(
                    transactional_id=transactional_id,
                    producer_id=state.producer_id,
                    transaction_state=state.state,
                )  # fmt: skip
            )
        return listed

    found = await coordinator_call(work(), lambda c: c)
    if isinstance(found, int):
        reply.error_code = found
    else:
        if context.authorizer.enabled:  # only the ids the principal may DESCRIBE
            hidden = await denied(
                context, request, DESCRIBE, TXN, (t.transactional_id for t in found)
            )
            found = [t for t in found if t.transactional_id not in hidden]
        reply.transaction_states = found
    return reply
