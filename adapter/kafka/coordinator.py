"""FindCoordinator: a live pod chosen by a stable hash of the group id (any pod can do a
group's work, its state is in Redis: the hash only spreads the clients). v4+ batches keys.
A transaction's coordinator (key type 1) is the pod asked (any pod coordinates any
transaction: mapping/txn/transactions.py): librdkafka never looks a transaction coordinator
up again until its connection has once been up, so a pod killed a moment ago, still in the
registry for its TTL, would stall a transactional producer told of it until then.
Share groups (key type 2) do not exist here.

``coordinator_call``: how every group and offset API answers when the group's state in
Redis cannot be reached (COORDINATOR_NOT_AVAILABLE)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from adapter.kafka import errors
from adapter.kafka.authorization import DENIED, DESCRIBE, GROUP, TXN, allowed
from adapter.kafka.context import KafkaContext
from adapter.kafka.protocol import Request
from adapter.kafka.versions import FIND_COORDINATOR
from mapping.core.errors import BrokerError

T = TypeVar("T")

Response = FIND_COORDINATOR.response
Coordinator = Response.Coordinator
GROUP_KEY = 0
TRANSACTION_KEY = 1
COORDINATOR_KEY_TYPES = (GROUP_KEY, TRANSACTION_KEY)


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    key_type = body.key_type or GROUP_KEY
    if request.version < 4:
        code, message, (node, host, port) = await _one(context, body.key, key_type, request)
        return Response[request.version](
            throttle_time_ms=0, error_code=code, error_message=message,
            node_id=node, host=host, port=port,
        )  # fmt: skip
    coordinators = []
    for key in body.coordinator_keys or ():
        code, message, (node, host, port) = await _one(context, key, key_type, request)
        coordinators.append(
            Coordinator(
                key=key,
                node_id=node,
                host=host,
                port=port,
                error_code=code,
                error_message=message,
            )  # fmt: skip
        )
    return Response[request.version](throttle_time_ms=0, coordinators=coordinators)


async def _one(
    context: KafkaContext, key: str | None, key_type: int, request: Request
) -> tuple[int, str | None, tuple[int, str, int]]:
    if key_type not in COORDINATOR_KEY_TYPES:
        return errors.INVALID_REQUEST, f"unknown coordinator key type {key_type}", (-1, "", -1)
    kind = GROUP if key_type == GROUP_KEY else TXN  # Kafka: DESCRIBE on the group / the id
    if not await allowed(context, request, DESCRIBE, kind, key or ""):
        return DENIED[kind], None, (-1, "", -1)
    if key_type == TRANSACTION_KEY and not key:
        return errors.INVALID_REQUEST, "a transactional id is not empty", (-1, "", -1)
    if key_type == TRANSACTION_KEY:
        return errors.NONE, None, context.this_broker()
    return errors.NONE, None, await context.coordinator(key or "")


async def coordinator_call(work: Awaitable[T], unavailable: Callable[[int], T]) -> T:
    """``await work``, a group API's work on the group's state in Redis; when Redis cannot
    do it (BrokerError), ``unavailable(COORDINATOR_NOT_AVAILABLE)``: the answer that error
    code gives in that API. Clients retry it after looking the coordinator up again."""
    try:
        return await work
    except BrokerError:
        return unavailable(errors.COORDINATOR_NOT_AVAILABLE)
