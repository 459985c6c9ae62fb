"""InitProducerId: producer ids for idempotent producers (INCR in Redis), epoch 0; a
producer that names its id and epoch (KIP-360, after a fatal sequence error) gets the next
epoch. Transactions are not supported: a transactional id is refused."""

from __future__ import annotations

from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.versions import INIT_PRODUCER_ID
from mapping.errors import BrokerError

Response = INIT_PRODUCER_ID.response
MAX_EPOCH = 32767


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    reply = Response[request.version](throttle_time_ms=0, producer_id=-1, producer_epoch=-1)
    if body.transactional_id is not None:
        reply.error_code = errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return reply
    known_id = getattr(body, "producer_id", -1)
    known_epoch = getattr(body, "producer_epoch", -1)
    if known_id is not None and known_id >= 0 and 0 <= known_epoch < MAX_EPOCH - 1:
        reply.producer_id, reply.producer_epoch = known_id, known_epoch + 1
        return reply
    try:
        reply.producer_id = await context.kafka.new_producer_id()
    except BrokerError as exc:
        reply.error_code = error_of(exc)
        return reply
    reply.producer_epoch = 0
    reply.error_code = errors.NONE
    return reply
