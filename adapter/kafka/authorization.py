"""What each Kafka API asks the pod's authorizer (adapter/authorizer.py), as Kafka's
KafkaApis asks its own: the helpers the API modules call so that each check is a line or two
(docs/security.md, "What each request needs", lists the operation each API needs).

With authorization off (``context.authorizer.enabled`` false) every helper answers "allowed"
at once, with no Redis call; the hot paths (Produce, Fetch) test ``enabled`` themselves and
call nothing here then."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from adapter.kafka import errors
from adapter.kafka.protocol import Request
from mapping.security.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)

READ, WRITE, DESCRIBE, DELETE, ALTER = (
    Operation.READ,
    Operation.WRITE,
    Operation.DESCRIBE,
    Operation.DELETE,
    Operation.ALTER,
)

# The error code a denial on each resource type answers.
DENIED: dict[ResourceType, int] = {
    TOPIC: errors.TOPIC_AUTHORIZATION_FAILED,
    GROUP: errors.GROUP_AUTHORIZATION_FAILED,
    CLUSTER: errors.CLUSTER_AUTHORIZATION_FAILED,
    TXN: errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def who(request: Request) -> tuple[str, str]:
    """The request's principal and host as ACLs name them (the host without Kafka's "/")."""
    return request.principal, request.client_host.lstrip("/")


async def _settled(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


async def allowed(
    context: Any, request: Request, operation: Operation, resource_type: ResourceType, name: str
) -> bool:
    """Whether the request's principal may ``operation`` the resource (True when off)."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return True
    principal, host = who(request)
    return bool(
        await _settled(authorizer.allows(principal, host, operation, resource_type, name or ""))
    )


async def denied(
    context: Any,
    request: Request,
    operation: Operation,
    resource_type: ResourceType,
    names: Iterable[str | None],
    *,
    audited: bool = True,
) -> set[str]:
    """The names among ``names`` the principal may not ``operation`` (each asked once);
    empty when off. A null name is never in it (the API answers it as it would anyway).
    Denials are audited unless not ``audited`` (a listing of everything)."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return set()
    unique = list(dict.fromkeys(n for n in names if n is not None))
    if not unique:
        return set()
    principal, host = who(request)
    kept = await _settled(
        authorizer.filter_allowed(
            principal, host, operation, resource_type, unique, audited=audited
        )
    )
    return set(unique).difference(kept)


async def refusal(
    context: Any,
    request: Request,
    operation: Operation,
    resource_type: ResourceType,
    name: str | None,
) -> Any | None:
    """None when allowed; else the API's response with the denial's error code at its top
    level (Kafka's ``getErrorResponse``: JoinGroup, Heartbeat, InitProducerId, EndTxn...)."""
    if await allowed(context, request, operation, resource_type, name or ""):
        return None
    return error_answer(request, DENIED[resource_type])


def error_answer(request: Request, code: int) -> Any:
    """The API's response in the request's version, empty but for its top-level error."""
    reply = request.api.response[request.version]()
    reply.error_code = code
    return reply


async def may_create_topics(context: Any, request: Request, names: Iterable[str]) -> set[str]:
    """Which of ``names`` the principal may create: CREATE on the cluster, else CREATE on
    each topic (Kafka's CreateTopics and Metadata auto-creation)."""
    wanted = set(names)
    if not wanted or await allowed(context, request, Operation.CREATE, CLUSTER, CLUSTER_NAME):
        return wanted
    return wanted - await denied(context, request, Operation.CREATE, TOPIC, wanted)


async def may_write_idempotently(context: Any, request: Request) -> bool:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or
    (Kafka 2.8+, KIP-679) WRITE allowed on some topic (``authorizeByResourceType``)."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return True
    if await allowed(context, request, Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME):
        return True
    principal, host = who(request)
    return writes_some_topic(authorizer.bindings, principal, host)


def writes_some_topic(bindings: Iterable[AclBinding], principal: str, host: str) -> bool:
    """Kafka's ``authorizeByResourceType(WRITE, TOPIC)``: an ALLOW of WRITE (or ALL) on
    some topic pattern that no DENY dominates (a DENY on every topic, on the same literal
    name, or on a prefix of the pattern)."""
    ops = (WRITE, Operation.ALL)
    mine = [
        b
        for b in bindings
        if b.resource_type == TOPIC and b.operation in ops and b.covers(principal, host)
    ]
    denies = [b for b in mine if b.permission == Permission.DENY]
    if any(d.pattern_type == PatternType.LITERAL and d.name == WILDCARD for d in denies):
        return False

    def dominated(allow: AclBinding) -> bool:
        for d in denies:
            if d.pattern_type == PatternType.PREFIXED and allow.name.startswith(d.name):
                return True
            if d.pattern_type == PatternType.LITERAL and allow.pattern_type == PatternType.LITERAL:
                if d.name == allow.name:
                    return True
        return False

    return any(b.permission == Permission.ALLOW and not dominated(b) for b in mine)


async def add_partitions_refusals(
    context: Any, request: Request, transactional_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """AddPartitionsToTxn: WRITE on the transactional id (else every partition answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and on each topic (else TOPIC_AUTHORIZATION_FAILED,
    the others OPERATION_NOT_ATTEMPTED, nothing added); empty: allowed."""
    if not context.authorizer.enabled:
        return {}
    if not await allowed(context, request, WRITE, TXN, transactional_id):
        return dict.fromkeys(partitions, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = await denied(context, request, WRITE, TOPIC, (t for t, _ in partitions))
    if not refused:
        return {}
    return {
        (t, p): errors.TOPIC_AUTHORIZATION_FAILED
        if t in refused
        else errors.OPERATION_NOT_ATTEMPTED
        for t, p in partitions
    }


async def produce_refusals(context: Any, request: Request) -> dict[str, int]:
    """Produce: each refused topic's error. A transactional producer needs WRITE on its
    transactional id (else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED);
    each topic WRITE (else TOPIC_AUTHORIZATION_FAILED). Asked once per topic per request."""
    body = request.body
    names = [t.name for t in body.topic_data or ()]
    txn = body.transactional_id
    if txn is not None and not await allowed(context, request, Operation.WRITE, TXN, txn):
        return dict.fromkeys(names, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused = await denied(context, request, Operation.WRITE, TOPIC, names)
    return dict.fromkeys(refused, errors.TOPIC_AUTHORIZATION_FAILED)


class MetadataGate:
    """Metadata's checks (Kafka's getTopicMetadata): a topic the principal may not DESCRIBE
    is left out of a listing of every topic and answered TOPIC_AUTHORIZATION_FAILED when
    asked for (by name; by id: the id without the name); a topic it would auto-create
    needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED."""

    def __init__(
        self, context: Any, request: Request, hidden: set[str], creatable: set[str]
    ) -> None:
        self.context = context
        self.request = request
        self.hidden = hidden
        self.creatable = creatable

    @classmethod
    async def of(
        cls,
        context: Any,
        request: Request,
        names: list[str | None],
        create: bool,
        *,
        listing: bool = False,
    ) -> MetadataGate | None:
        """The gate of one request (None when authorization is off); a ``listing`` of every
        topic leaves out what it may not show without auditing it, as Kafka does."""
        if not context.authorizer.enabled:
            return None
        hidden = await denied(
            context, request, Operation.DESCRIBE, TOPIC, names, audited=not listing
        )
        visible = {n for n in names if n is not None and n not in hidden}
        creatable = await may_create_topics(context, request, visible) if create else set()
        return cls(context, request, hidden, creatable)

    async def hides(self, name: str) -> bool:
        """Whether a topic asked for by id is one the principal may not DESCRIBE."""
        return not await allowed(self.context, self.request, Operation.DESCRIBE, TOPIC, name)


async def commit_refusals(
    context: Any, request: Request, group: str, topics: Iterable[str]
) -> dict[str, int]:
    """OffsetCommit and TxnOffsetCommit: READ on the group (else every topic answers
    GROUP_AUTHORIZATION_FAILED), READ on each topic (else TOPIC_AUTHORIZATION_FAILED)."""
    names = list(topics)
    if not await allowed(context, request, READ, GROUP, group):
        return dict.fromkeys(names, errors.GROUP_AUTHORIZATION_FAILED)
    return dict.fromkeys(
        await denied(context, request, READ, TOPIC, names), errors.TOPIC_AUTHORIZATION_FAILED
    )


async def txn_commit_refusals(
    context: Any, request: Request, topics: Iterable[str]
) -> dict[str, int]:
    """TxnOffsetCommit: WRITE on the transactional id (else every topic answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then as OffsetCommit (``commit_refusals``)."""
    if not context.authorizer.enabled:
        return {}
    body = request.body
    names = list(topics)
    if not await allowed(context, request, WRITE, TXN, body.transactional_id or ""):
        return dict.fromkeys(names, errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    return await commit_refusals(context, request, body.group_id or "", names)


# Config resources' type codes (Kafka's ConfigResource.Type) and the ACL resource each is
# checked on: broker and broker-logger configs on the cluster.
CONFIG_RESOURCES: dict[int, tuple[ResourceType, str | None]] = {
    2: (TOPIC, None),
    4: (CLUSTER, CLUSTER_NAME),
    8: (CLUSTER, CLUSTER_NAME),
    32: (GROUP, None),
}


async def config_refusal(
    context: Any, request: Request, operation: Operation, resource_type: int, name: str
) -> int:
    """DescribeConfigs (DESCRIBE_CONFIGS) and the alter APIs (ALTER_CONFIGS) on one config
    resource: NONE when allowed (or of a type the API refuses anyway), else the denial's
    error (TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED), as Kafka's ConfigHelper."""
    if not context.authorizer.enabled or resource_type not in CONFIG_RESOURCES:
        return errors.NONE
    acl_type, fixed = CONFIG_RESOURCES[resource_type]
    if await allowed(context, request, operation, acl_type, fixed or name):
        return errors.NONE
    return DENIED[acl_type]


async def cluster_or_denied(
    context: Any,
    request: Request,
    cluster_operation: Operation,
    operation: Operation,
    resource_type: ResourceType,
    names: Iterable[str | None],
) -> set[str]:
    """``denied`` unless the principal may ``cluster_operation`` the cluster (then none):
    OffsetForLeaderEpoch's CLUSTER_ACTION, DeleteTopics' DELETE, ListGroups' DESCRIBE."""
    if not context.authorizer.enabled:
        return set()
    if await allowed(context, request, cluster_operation, CLUSTER, CLUSTER_NAME):
        return set()
    return await denied(context, request, operation, resource_type, names)
