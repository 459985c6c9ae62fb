"""DescribeClientQuotas (48) and AlterClientQuotas (49): Kafka's client quotas, kept in Redis
(mapping/security/quotas.py) and followed by every pod (adapter/quotas.py).

As Kafka's KafkaApis and controller answer them: Describe reads the quotas (from Redis, so
a change made through any pod shows at once) and filters them as ClientQuotasImage does;
a bad filter answers INVALID_REQUEST (UNSUPPORTED_VERSION for an unknown entity type) with
Kafka's message. Alter checks each entry on its own (a bad one answers INVALID_REQUEST and
changes nothing of its entity; the good ones are applied), and with ``validate_only`` stores
nothing. With the authorizer on, Describe needs DESCRIBE_CONFIGS and Alter ALTER_CONFIGS on
the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from adapter.kafka import authorization, errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.protocol import Request
from adapter.kafka.versions import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS
from mapping.security.acls import CLUSTER_NAME, Operation, ResourceType
from mapping.security.quotas import (
    Entity,
    QuotaError,
    QuotaFilter,
    QuotaStore,
    alteration,
    describe_entity,
    entity_of,
)

DescribeResponse = DESCRIBE_CLIENT_QUOTAS.response
AlterResponse = ALTER_CLIENT_QUOTAS.response


def _store(context: KafkaContext) -> QuotaStore:
    store = context.pod.quotas.store
    assert store is not None
    return store


async def describe_client_quotas(context: KafkaContext, request: Request) -> Any:
    body = request.body
    response = DescribeResponse[request.version]
    allowed = await authorization.allowed(
        context, request, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME
    )
    if not allowed:
        return response(
            throttle_time_ms=0,
            error_code=errors.CLUSTER_AUTHORIZATION_FAILED,
            error_message=None,
            entries=None,
        )
    try:
        wanted = QuotaFilter.of(
            ((c.entity_type, c.match_type, c.match) for c in body.components or ()),
            bool(body.strict),
        )
    except QuotaError as exc:
        return response(
            throttle_time_ms=0, error_code=exc.code, error_message=exc.message, entries=None
        )
    quotas = await _store(context).load()
    entries = [
        response.EntryData(
            entity=[response.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in e],
            values=[
                response.EntryData.ValueData(key=key, value=value)
                for key, value in sorted(values.items())
            ],
        )
        for e, values in sorted(quotas.items(), key=lambda item: describe_entity(item[0]))
        if values and wanted.matches(e)
    ]
    return response(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


async def alter_client_quotas(context: KafkaContext, request: Request) -> Any:
    body = request.body
    response = AlterResponse[request.version]
    entries = list(body.entries or ())
    allowed = await authorization.allowed(
        context, request, Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME
    )
    results: list[tuple[int, str | None]] = []
    changes: dict[Entity, dict[str, float | None]] = {}
    parsed: list[Entity | QuotaError] = []
    for entry in entries:
        try:
            parsed.append(entity_of((e.entity_type, e.entity_name) for e in entry.entity or ()))
        except QuotaError as exc:
            parsed.append(exc)
    counts = Counter(e for e in parsed if not isinstance(e, QuotaError))
    for entry, entity in zip(entries, parsed, strict=True):
        if not allowed:
            results.append((errors.CLUSTER_AUTHORIZATION_FAILED, None))
            continue
        try:
            if isinstance(entity, QuotaError):
                raise entity
            if counts[entity] > 1:  # as Kafka: none of the entity's entries is applied
                raise QuotaError(
                    errors.INVALID_REQUEST, f"Ignoring duplicate entity {describe_entity(entity)}"
                )
            ops = alteration((op.key, op.value, bool(op.remove)) for op in entry.ops or ())
        except QuotaError as exc:
            results.append((exc.code, exc.message))
            continue
        changes[entity] = ops
        results.append((errors.NONE, None))
    if changes and not body.validate_only:
        await _store(context).alter(changes)
    return response(
        throttle_time_ms=0,
        entries=[
            response.EntryData(
                error_code=code,
                error_message=message,
                entity=[
                    response.EntryData.EntityData(
                        entity_type=e.entity_type, entity_name=e.entity_name
                    )
                    for e in entry.entity or ()
                ],
            )
            for entry, (code, message) in zip(entries, results, strict=True)
        ],
    )
