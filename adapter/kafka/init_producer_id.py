"""InitProducerId: producer ids for idempotent producers (INCR in Redis), epoch 0; with a
transactional id, the transaction coordinator's session (mapping/txn/transactions.py).

Without a transactional id a new producer id is always allocated, as Kafka's transaction
coordinator does: whatever id and epoch the request names (a KIP-360 bump after a fatal
sequence error, or the 0/0 that @platformatic/kafka sends) is not trusted, since handing an
id back to whoever names it would let two producers share one id and their batches be taken
for each other's retries.

With a transactional id, the id's producer id and a bumped epoch (fencing the previous
session, whose open transaction is aborted first: CONCURRENT_TRANSACTIONS until then, as
Kafka). v3+ may name the producer id and epoch the producer had (KIP-360), to resume."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.authorization import TXN, WRITE, allowed, may_write_idempotently
from adapter.kafka.context import KafkaContext
from adapter.kafka.coordinator import coordinator_call
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.transactions import for_version
from adapter.kafka.versions import INIT_PRODUCER_ID
from mapping.core.errors import BrokerError
from mapping.txn.txn_state import InitResult

Response = INIT_PRODUCER_ID.response
NO_PRODUCER_ID = -1
NO_EPOCH = -1


async def handle(context: KafkaContext, request: Request) -> Any:
    reply = Response[request.version](throttle_time_ms=0, producer_id=-1, producer_epoch=-1)
    txn = request.body.transactional_id
    if txn is not None:
        if not await allowed(context, request, WRITE, TXN, txn):
            reply.error_code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return reply
        return await _transactional(context, request, reply)
    if not await may_write_idempotently(context, request):
        reply.error_code = errors.CLUSTER_AUTHORIZATION_FAILED
        return reply
    try:
        reply.producer_id = await context.pod.kafka.new_producer_id()
    except BrokerError as exc:
        reply.error_code = error_of(exc)
        return reply
    reply.producer_epoch = 0
    reply.error_code = errors.NONE
    return reply


async def _transactional(context: KafkaContext, request: Request, reply: Any) -> Any:
    body = request.body
    expected_id = getattr(body, "producer_id", NO_PRODUCER_ID)
    expected_epoch = getattr(body, "producer_epoch", NO_EPOCH)
    if expected_id is None:  # versions before 3 have neither
        expected_id, expected_epoch = NO_PRODUCER_ID, NO_EPOCH
    if not body.transactional_id or (expected_id == NO_PRODUCER_ID) != (expected_epoch == NO_EPOCH):
        reply.error_code = errors.INVALID_REQUEST  # Kafka's answer to either
        return reply
    result = await coordinator_call(
        context.pod.transactions.init_producer_id(
            body.transactional_id, body.transaction_timeout_ms, expected_id, expected_epoch
        ),
        InitResult,
    )
    reply.error_code = for_version(result.error, "InitProducerId", request.version)
    if result.error == errors.NONE:
        reply.producer_id = result.producer_id
        reply.producer_epoch = result.epoch
    return reply
