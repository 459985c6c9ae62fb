"""``python -m adapter acl add|list|remove``: Kafka's ACL bindings, in the manner of
``kafka-acls.sh``, written to the store pods started with ``--authorizer`` read
(mapping/security/acl_store.py); every change is announced, so every pod applies it at once.
The store (redis) is imported where a command runs, never for its --help."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget
from mapping.security.acls import (
    CLUSTER_NAME,
    SUPPORTED,
    WILDCARD,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

_OPERATIONS = {
    op.name.replace("_", "").lower(): op
    for op in Operation
    if op not in (Operation.UNKNOWN, Operation.ANY)
}


def _operation(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list:
    found = []
    for value in values:
        key = value.replace("_", "").replace("-", "").lower()
        if key not in _OPERATIONS:
            names = ", ".join(sorted(_title(op) for op in _OPERATIONS.values()))
            raise click.BadParameter(f"{value!r} is not one of {names}")
        found.append(_OPERATIONS[key])
    return found


def _principals(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> list:
    for value in values:
        kind, _, name = value.partition(":")
        if not kind or not name:
            raise click.BadParameter(f"{value!r} is not a principal: User:<name> (User:* any)")
    return list(values)


def _title(operation: Operation) -> str:
    """Kafka's spelling: IdempotentWrite, DescribeConfigs."""
    return "".join(part.capitalize() for part in operation.name.split("_"))


def _resource_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--topic", "topics", multiple=True, help="A topic (* : every topic)."),
            click.option("--group", "groups", multiple=True, help="A group (* : every group)."),
            click.option("--cluster", is_flag=True, help="The cluster."),
            click.option(
                "--transactional-id",
                "transactional_ids",
                multiple=True,
                help="A transactional id (* : every one).",
            ),
        ]
    ):
        command = option(command)
    return command


def _binding_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option(
                "--allow-principal",
                "allow",
                multiple=True,
                callback=_principals,
                help="Principal allowed (User:alice; User:* anyone).",
            ),
            click.option(
                "--deny-principal",
                "deny",
                multiple=True,
                callback=_principals,
                help="Principal denied (a DENY wins over every ALLOW).",
            ),
            click.option(
                "--operation",
                "operations",
                multiple=True,
                callback=_operation,
                help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                "DescribeConfigs, AlterConfigs, IdempotentWrite, All.",
            ),
            click.option(
                "--host",
                "hosts",
                multiple=True,
                help="Client address the binding applies to (default: * any).",
            ),
        ]
    ):
        command = option(command)
    return command


def _resources(
    topics: Iterable[str],
    groups: Iterable[str],
    cluster: bool,
    transactional_ids: Iterable[str],
) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in topics]
    found += [(ResourceType.GROUP, g) for g in groups]
    if cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids]
    for _, name in found:
        if not name:
            raise click.UsageError("a resource name may not be empty")
    return found


@contextmanager
def _store(target: RedisTarget) -> Iterator[Any]:
    """The deployment's ACL store, its connection closed after use."""
    from mapping.security.acl_store import SyncAclStore

    store = SyncAclStore(target.connect(), target.keys)
    try:
        yield store
    finally:
        store.client.close()


def describe(binding: AclBinding) -> str:
    """One binding in one line (kafka-acls' words)."""
    return (
        f"{binding.resource_type.name} {binding.pattern_type.name} {binding.name}: "
        f"(principal={binding.principal}, host={binding.host}, "
        f"operation={binding.operation.name}, permissionType={binding.permission.name})"
    )


@click.group()
def acl() -> None:
    """Manage Kafka's ACL bindings (checked by pods started with --authorizer)."""


@acl.command()
@_binding_options
@_resource_options
@click.option(
    "--resource-pattern-type",
    type=click.Choice(["literal", "prefixed"], case_sensitive=False),
    default="literal",
    help="literal: the name exactly (* every name); prefixed: every name starting so.",
)
@options.redis_target
def add(
    allow: list[str],
    deny: list[str],
    operations: list[Operation],
    hosts: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
    target: RedisTarget,
) -> None:
    """Add bindings: each principal, host and operation on each resource named."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster, --transactional-id")
    if not allow and not deny:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    if not operations:
        raise click.UsageError("name an operation: --operation")
    pattern = PatternType[resource_pattern_type.upper()]
    for rtype, _ in resources:
        unsupported = [
            op for op in operations if op != Operation.ALL and op not in SUPPORTED[rtype]
        ]
        if unsupported:
            allowed = ", ".join(sorted(_title(op) for op in SUPPORTED[rtype]))
            raise click.UsageError(
                f"{rtype.name} supports only the operations {allowed} (and All); "
                f"not {', '.join(_title(op) for op in unsupported)}"
            )
    granted = [(p, Permission.ALLOW) for p in allow] + [(p, Permission.DENY) for p in deny]
    bindings = [
        AclBinding(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources
        for principal, permission in granted
        for host in hosts or (WILDCARD,)
        for op in operations
    ]
    with _store(target) as store:
        added = store.create(bindings)
    for binding in bindings:
        click.echo(f"added {describe(binding)}")
    if added < len(bindings):
        click.echo(f"({len(bindings) - added} of them existed already)")


_FILTER_PATTERNS = click.Choice(["any", "match", "literal", "prefixed"], case_sensitive=False)


@acl.command(name="list")
@_resource_options
@click.option("--principal", "principals", multiple=True, callback=_principals,
              help="Only the bindings of this principal.")  # fmt: skip
@click.option(
    "--resource-pattern-type",
    type=_FILTER_PATTERNS,
    default="any",
    help="any: every binding naming the resource; match: every binding applying to it; "
    "literal, prefixed: those patterns only.",
)
@options.redis_target
def list_acls(
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    principals: list[str],
    resource_pattern_type: str,
    target: RedisTarget,
) -> None:
    """List the bindings (all, or those of the resources and principals named)."""
    pattern = PatternType[resource_pattern_type.upper()]
    resources = _resources(topics, groups, cluster, transactional_ids)
    filters = [
        AclFilter(rtype, name, pattern, principal)
        for rtype, name in resources or [(ResourceType.ANY, None)]
        for principal in principals or [None]
    ]
    with _store(target) as store:
        bindings = store.load()
    for binding in bindings:
        if any(f.matches(binding) for f in filters):
            click.echo(describe(binding))


@acl.command()
@_binding_options
@_resource_options
@click.option(
    "--resource-pattern-type",
    type=_FILTER_PATTERNS,
    default="literal",
    help="Which bindings of the resources named: literal, prefixed, any, or match (every "
    "binding applying to them).",
)
@options.redis_target
def remove(
    allow: list[str],
    deny: list[str],
    operations: list[Operation],
    hosts: tuple[str, ...],
    topics: tuple[str, ...],
    groups: tuple[str, ...],
    cluster: bool,
    transactional_ids: tuple[str, ...],
    resource_pattern_type: str,
    target: RedisTarget,
) -> None:
    """Remove the bindings on the resources named (only those of the principals,
    operations and hosts named, when some are)."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --cluster, --transactional-id")
    pattern = PatternType[resource_pattern_type.upper()]
    granted: list[tuple[str | None, Permission]] = [(p, Permission.ALLOW) for p in allow]
    granted += [(p, Permission.DENY) for p in deny]
    filters = [
        AclFilter(rtype, name, pattern, principal, host, op, permission)
        for rtype, name in resources
        for principal, permission in granted or [(None, Permission.ANY)]
        for host in hosts or [None]
        for op in operations or [Operation.ANY]
    ]
    with _store(target) as store:
        deleted = store.delete(filters)
    removed = list({describe(b): b for found in deleted for b in found})
    for line in removed:
        click.echo(f"removed {line}")
    if not removed:
        click.echo("no binding matched")
