"""Kafka's authorization model, pure: ACL bindings, the filters DescribeAcls and DeleteAcls
match them with, and the decision ``authorize`` takes, as Apache Kafka's authorizer
(``AclAuthorizer`` / ``StandardAuthorizer``) takes it:

- a super user may do anything;
- a binding applies to a resource when its type is the resource's and its pattern matches
  the name: LITERAL equal, LITERAL ``*`` (any name), PREFIXED a prefix of it;
- its principal is the request's or ``User:*``, its host the client's or ``*``;
- a DENY of the operation (or of ALL) wins over every ALLOW;
- an ALLOW of the operation, of ALL, or of an operation that implies it (READ, WRITE,
  DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
- with no binding at all on the resource, ``allow_if_no_acl`` decides
  (``allow.everyone.if.no.acl.found``, false by default).

No I/O: the bindings come from the caller (the Redis store keeps them, each pod a copy).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # a LITERAL name matching every resource of its type; a host matching any
ANY_USER = "User:*"
ANONYMOUS = "User:ANONYMOUS"  # the principal of a connection that has not authenticated

# The operations each resource type has (Kafka's AclEntry.supportedOperations); a
# resource's authorized operations are those of them allowed.
SUPPORTED: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {
            Operation.READ,
            Operation.WRITE,
            Operation.CREATE,
            Operation.DESCRIBE,
            Operation.DELETE,
            Operation.ALTER,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
        }
    ),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {
            Operation.CREATE,
            Operation.CLUSTER_ACTION,
            Operation.DESCRIBE_CONFIGS,
            Operation.ALTER_CONFIGS,
            Operation.IDEMPOTENT_WRITE,
            Operation.ALTER,
            Operation.DESCRIBE,
        }
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
}

# An ALLOW of any of these allows the key too (Kafka's implied operations).
_ALLOWED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` from ``host`` is ``permission``-ed ``operation`` on the
    resources of ``resource_type`` whose name ``pattern_type``-matches ``name``."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's resource pattern covers the resource."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD

    def covers(self, principal: str, host: str) -> bool:
        """Whether it speaks of this principal connected from this host."""
        return self.principal in (principal, ANY_USER) and self.host in (host, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: None (or ANY) matches anything; pattern type
    MATCH matches every binding that would apply to a resource named ``name``."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, binding.resource_type):
            return False
        if not self._pattern_matches(binding):
            return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation not in (Operation.ANY, binding.operation):
            return False
        return self.permission in (Permission.ANY, binding.permission)

    def _pattern_matches(self, binding: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            return binding.applies_to(binding.resource_type, self.name)
        if self.pattern_type not in (PatternType.ANY, binding.pattern_type):
            return False
        return self.name is None or self.name == binding.name


def authorize(
    bindings: Iterable[AclBinding],
    principal: str,
    host: str,
    operation: Operation,
    resource_type: ResourceType,
    name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> bool:
    """Whether ``principal`` connected from ``host`` may ``operation`` the resource (see the
    module's docstring for the rule)."""
    if principal in super_users:
        return True
    applying = [b for b in bindings if b.applies_to(resource_type, name)]
    if not applying:
        return allow_if_no_acl
    mine = [b for b in applying if b.covers(principal, host)]
    denied = (operation, Operation.ALL)
    if any(b.permission == Permission.DENY and b.operation in denied for b in mine):
        return False
    allowing = _ALLOWED_BY.get(operation, frozenset({operation})) | {Operation.ALL}
    return any(b.permission == Permission.ALLOW and b.operation in allowing for b in mine)


def authorized_operations(
    bindings: Iterable[AclBinding],
    principal: str,
    host: str,
    resource_type: ResourceType,
    name: str,
    *,
    super_users: frozenset[str] = frozenset(),
    allow_if_no_acl: bool = False,
) -> set[Operation]:
    """The operations of the resource's type that ``principal`` may do on it (Metadata's,
    DescribeCluster's and DescribeGroups' authorized operations)."""
    listed = list(bindings)
    return {
        operation
        for operation in SUPPORTED.get(resource_type, frozenset())
        if authorize(
            listed,
            principal,
            host,
            operation,
            resource_type,
            name,
            super_users=super_users,
            allow_if_no_acl=allow_if_no_acl,
        )
    }
