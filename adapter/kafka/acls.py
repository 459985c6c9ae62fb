"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31): Kafka's ACL admin APIs over the
bindings in Redis (mapping/security/acl_store.py), as Kafka 3.9's broker answers them
(AclApis, AclControlManager):

- with the authorizer off (no ``--authorizer``): SECURITY_DISABLED, "No Authorizer is
  configured.";
- DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on it;
  otherwise CLUSTER_AUTHORIZATION_FAILED (for the whole request, each entry of it);
- a creation naming an UNKNOWN or ANY resource type, a pattern type other than LITERAL or
  PREFIXED, an UNKNOWN or ANY operation, a permission other than ALLOW or DENY, an empty
  name, a CLUSTER other than ``kafka-cluster`` or a principal with no "<type>:" answers
  INVALID_REQUEST with Kafka's message, and is not stored (the valid ones of the same
  request are);
- a filter naming UNKNOWN anything answers INVALID_REQUEST;
- v0 carries no pattern type: its bindings and filters are LITERAL.

Every change is announced to every pod (the store's notice): each pod's authorizer reads
the bindings again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.protocol import Request
from adapter.kafka.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS
from mapping.core.errors import BrokerError
from mapping.security.acl_store import AclStore
from mapping.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

# (not in every table of codes yet: Kafka's, as ``errors`` would spell them)
CLUSTER_AUTHORIZATION_FAILED = 31
SECURITY_DISABLED = 54
NO_AUTHORIZER = "No Authorizer is configured."
_DENIED = "Cluster authorization failed."


class InvalidAcl(Exception):
    """A binding or filter Kafka refuses with INVALID_REQUEST (the message says why)."""


def _enum(kind: type, code: int, what: str) -> Any:
    try:
        return kind(code)
    except ValueError:
        raise InvalidAcl(f"Invalid {what} {code}") from None


def binding_of(entry: Any, version: int) -> AclBinding:
    """A CreateAcls creation as a binding to store, or InvalidAcl (AclControlManager's
    validateNewAcl and AclApis' checks, in their order)."""
    resource_type = _enum(ResourceType, entry.resource_type, "resourceType")
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {resource_type.name}")
    code = entry.resource_pattern_type if version >= 1 else PatternType.LITERAL
    pattern_type = _enum(PatternType, code, "patternType")
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {pattern_type.name}")
    operation = _enum(Operation, entry.operation, "operation")
    if operation in (Operation.UNKNOWN, Operation.ANY):
        raise InvalidAcl(f"Invalid operation {operation.name}")
    permission = _enum(Permission, entry.permission_type, "permissionType")
    if permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"Invalid permissionType {permission.name}")
    name = entry.resource_name or ""
    if not name:
        raise InvalidAcl("Invalid empty resource name")
    if resource_type == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    principal = entry.principal or ""
    if ":" not in principal:
        raise InvalidAcl(
            f"Could not parse principal from `{principal}` (no colon is present separating "
            "the principal type from the principal name)"
        )
    return AclBinding(
        resource_type, name, pattern_type, principal, entry.host or "", operation, permission
    )


def filter_of(entry: Any, version: int) -> AclFilter:
    """A DescribeAcls request's or DeleteAcls filter's matching, or InvalidAcl for one
    with UNKNOWN elements (Kafka's request validation)."""
    resource_type = _enum(ResourceType, entry.resource_type_filter, "resourceType")
    code = entry.pattern_type_filter if version >= 1 else PatternType.LITERAL
    pattern_type = _enum(PatternType, code, "patternType")
    operation = _enum(Operation, entry.operation, "operation")
    permission = _enum(Permission, entry.permission_type, "permissionType")
    if PatternType.UNKNOWN == pattern_type or ResourceType.UNKNOWN == resource_type:
        raise InvalidAcl("The filter contains UNKNOWN elements")
    if Operation.UNKNOWN == operation or Permission.UNKNOWN == permission:
        raise InvalidAcl("The filter contains UNKNOWN elements")
    return AclFilter(
        resource_type,
        entry.resource_name_filter,
        pattern_type,
        entry.principal_filter,
        entry.host_filter,
        operation,
        permission,
    )


def _store(context: KafkaContext) -> AclStore:
    store = context.authorizer.store
    assert store is not None  # (the pod's authorizer always has its store)
    return store


def _refusal(context: KafkaContext, request: Request, operation: Operation) -> tuple[int, str]:
    """(error, message) when the request may not be served at all; (NONE, "") otherwise."""
    authorizer = context.authorizer
    if not authorizer.enabled:
        return SECURITY_DISABLED, NO_AUTHORIZER
    if not authorizer.allows(
        request.principal, request.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return CLUSTER_AUTHORIZATION_FAILED, _DENIED
    return errors.NONE, ""


async def describe_acls(context: KafkaContext, request: Request) -> Any:
    response = DESCRIBE_ACLS.response
    code, message = _refusal(context, request, Operation.DESCRIBE)
    found: list[AclBinding] = []
    if code == errors.NONE:
        try:
            wanted = filter_of(request.body, request.version)
            found = [b for b in await _store(context).load() if wanted.matches(b)]
        except InvalidAcl as exc:
            code, message = errors.INVALID_REQUEST, str(exc)
        except BrokerError as exc:
            code, message = errors.error_of(exc), str(exc)
    return response[request.version](
        throttle_time_ms=0,
        error_code=code,
        error_message=message or None,
        resources=_by_resource(response, found, request.version),
    )


def _by_resource(response: Any, bindings: Iterable[AclBinding], version: int) -> list[Any]:
    """The bindings grouped by resource pattern, as DescribeAclsResponse carries them."""
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in bindings:
        if version == 0 and binding.pattern_type != PatternType.LITERAL:
            continue  # v0 cannot say PREFIXED
        key = (binding.resource_type, binding.name, binding.pattern_type)
        groups.setdefault(key, []).append(binding)
    resource = response.DescribeAclsResource
    return [
        resource(
            resource_type=int(rtype),
            resource_name=name,
            pattern_type=int(ptype),
            acls=[
                resource.AclDescription(
                    principal=b.principal,
                    host=b.host,
                    operation=int(b.operation),
                    permission_type=int(b.permission),
                )
                for b in found
            ],
        )
        for (rtype, name, ptype), found in groups.items()
    ]


async def create_acls(context: KafkaContext, request: Request) -> Any:
    response = CREATE_ACLS.response
    creations = list(request.body.creations or ())
    code, message = _refusal(context, request, Operation.ALTER)
    outcomes: list[tuple[int, str]] = [(code, message)] * len(creations)
    if code == errors.NONE:
        valid: list[AclBinding] = []
        outcomes = []
        for entry in creations:
            try:
                valid.append(binding_of(entry, request.version))
                outcomes.append((errors.NONE, ""))
            except InvalidAcl as exc:
                outcomes.append((errors.INVALID_REQUEST, str(exc)))
        try:
            await _store(context).create(valid)
            await context.authorizer.load()  # in force here at once (elsewhere: the notice)
        except BrokerError as exc:  # nothing is known stored: every valid one failed
            failed = (errors.error_of(exc), str(exc))
            outcomes = [failed if c == errors.NONE else (c, m) for c, m in outcomes]
    return response[request.version](
        throttle_time_ms=0,
        results=[
            response.AclCreationResult(error_code=c, error_message=m or None) for c, m in outcomes
        ],
    )


async def delete_acls(context: KafkaContext, request: Request) -> Any:
    response = DELETE_ACLS.response
    result = response.DeleteAclsFilterResult
    entries = list(request.body.filters or ())
    code, message = _refusal(context, request, Operation.ALTER)
    if code != errors.NONE:
        return response[request.version](
            throttle_time_ms=0,
            filter_results=[
                result(error_code=code, error_message=message, matching_acls=[]) for _ in entries
            ],
        )
    filters: list[AclFilter | None] = []
    invalid: dict[int, str] = {}
    for index, entry in enumerate(entries):
        try:
            filters.append(filter_of(entry, request.version))
        except InvalidAcl as exc:
            filters.append(None)
            invalid[index] = str(exc)
    valid = [f for f in filters if f is not None]
    try:
        deleted = iter(await _store(context).delete(valid))
        await context.authorizer.load()  # in force here at once (elsewhere: the notice)
    except BrokerError as exc:
        code, message = errors.error_of(exc), str(exc)
    results = []
    for index, found in enumerate(filters):
        if found is None or code != errors.NONE:
            error = errors.INVALID_REQUEST if found is None else code
            text = invalid.get(index, message)
            results.append(result(error_code=error, error_message=text, matching_acls=[]))
            continue
        results.append(
            result(
                error_code=errors.NONE,
                error_message=None,
                matching_acls=[_matching(result, b) for b in next(deleted)],
            )
        )
    return response[request.version](throttle_time_ms=0, filter_results=results)


def _matching(result: Any, binding: AclBinding) -> Any:
    return result.DeleteAclsMatchingAcl(
        error_code=errors.NONE,
        error_message=None,
        resource_type=int(binding.resource_type),
        resource_name=binding.name,
        pattern_type=int(binding.pattern_type),
        principal=binding.principal,
        host=binding.host,
        operation=int(binding.operation),
        permission_type=int(binding.permission),
    )
