"""InitProducerId: producer ids for idempotent producers (INCR in Redis), epoch 0.

Without a transactional id a new producer id is always allocated, as Kafka's transaction
coordinator does: whatever id and epoch the request names (a KIP-360 bump after a fatal
sequence error, or the 0/0 that @platformatic/kafka sends) is not trusted, since handing an
id back to whoever names it would let two producers share one id and their batches be taken
for each other's retries. Transactions are not supported: a transactional id is refused."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import INIT_PRODUCER_ID
from mapping.errors import BrokerError

Response = INIT_PRODUCER_ID.response


async def handle(context: KafkaContext, request: Request) -> Any:
    reply = Response[request.version](throttle_time_ms=0, producer_id=-1, producer_epoch=-1)
    if request.body.transactional_id is not None:
        reply.error_code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return reply
    try:
        reply.producer_id = await context.pod.kafka.new_producer_id()
    except BrokerError as exc:
        reply.error_code = error_of(exc)
        return reply
    reply.producer_epoch = 0
    reply.error_code = errors.NONE
    return reply
