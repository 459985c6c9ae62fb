"""``adapter acl add|list|remove`` (adapter/cli/acl.py): bindings written to the store the
pods read, in force on a running pod started with --authorizer once written; kafka-acls'
checks of what it is given; --help imports nothing heavy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from confluent_kafka.admin import AclOperation, AdminClient

from adapter.cli import main
from mapping.core.keys import Keys
from mapping.security.acl_store import SyncAclStore
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.cli.test_cli_imports import HEAVY, imported_by_help
from tests.support.cli import CliTarget
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"aclcli{uuid.uuid4().hex[:8]}"), client)
    client.close()


def _stored(target: CliTarget) -> list[AclBinding]:
    return SyncAclStore(target.client, target.keys).load()


def _fails(target: CliTarget, *args: str) -> str:
    base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
    result = CliRunner().invoke(main, [*args, *base])
    assert result.exit_code != 0, result.output
    return result.output


def test_add_list_remove(target: CliTarget) -> None:
    alice = ["--allow-principal", "User:alice"]
    out = target.cli("acl", "add", *alice, "--operation", "Read", "--operation", "describe",
                     "--topic", "orders", "--group", "g")  # fmt: skip
    assert out.count("added ") == 4
    prefixed_deny = ["--resource-pattern-type", "prefixed", "--topic", "ord"]
    target.cli("acl", "add", "--deny-principal", "User:*", "--host", "10.0.0.9",
               "--operation", "Write", *prefixed_deny)  # fmt: skip
    stored = set(_stored(target))
    literal, prefixed = PatternType.LITERAL, PatternType.PREFIXED
    topic, group = ResourceType.TOPIC, ResourceType.GROUP
    allow, deny = Permission.ALLOW, Permission.DENY
    assert stored == {
        AclBinding(topic, "orders", literal, "User:alice", "*", Operation.READ, allow),
        AclBinding(topic, "orders", literal, "User:alice", "*", Operation.DESCRIBE, allow),
        AclBinding(group, "g", literal, "User:alice", "*", Operation.READ, allow),
        AclBinding(group, "g", literal, "User:alice", "*", Operation.DESCRIBE, allow),
        AclBinding(topic, "ord", prefixed, "User:*", "10.0.0.9", Operation.WRITE, deny),
    }
    again = target.cli("acl", "add", "--allow-principal", "User:alice", "--operation", "Read",
                       "--topic", "orders")  # fmt: skip
    assert "1 of them existed already" in again
    assert len(target.cli("acl", "list").splitlines()) == 5
    on_orders = target.cli("acl", "list", "--topic", "orders", "--resource-pattern-type", "match")
    assert len(on_orders.splitlines()) == 3  # the prefixed "ord" applies to "orders" too
    assert "permissionType=DENY" in on_orders
    assert len(target.cli("acl", "list", "--principal", "User:*").splitlines()) == 1
    removed = target.cli("acl", "remove", "--topic", "orders", "--operation", "Describe")
    assert removed.count("removed ") == 1
    removed = target.cli("acl", "remove", "--group", "g", "--allow-principal", "User:alice")
    assert removed.count("removed ") == 2
    assert "no binding matched" in target.cli("acl", "remove", "--group", "g")
    assert {b.name for b in _stored(target)} == {"orders", "ord"}


def test_what_kafka_acls_refuses(target: CliTarget) -> None:
    assert "not a principal" in _fails(
        target, "acl", "add", "--allow-principal", "alice", "--operation", "Read", "--topic", "t"
    )
    assert "supports only the operations" in _fails(
        target, "acl", "add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"
    )
    assert "supports only the operations" in _fails(
        target, "acl", "add", "--allow-principal", "User:a", "--operation", "Read", "--cluster"
    )
    assert "is not one of" in _fails(
        target, "acl", "add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"
    )
    assert "name a resource" in _fails(
        target, "acl", "add", "--allow-principal", "User:a", "--operation", "Read"
    )
    assert _stored(target) == []


def test_a_running_pod_applies_what_the_command_line_writes(target: CliTarget, start_pod) -> None:  # noqa: ANN001
    pod: Pod = start_pod(target.url, *RF1, "--key-prefix", target.keys.prefix, "--authorizer")
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})

    def cluster_operations() -> set[AclOperation]:
        cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
        return set(cluster.authorized_operations or ())

    assert cluster_operations() == set()  # anonymous, no binding: nothing
    target.cli("acl", "add", "--allow-principal", "User:ANONYMOUS", "--operation",
               "IdempotentWrite", "--cluster")  # fmt: skip
    wait_until(lambda: cluster_operations() == {AclOperation.IDEMPOTENT_WRITE})
    target.cli("acl", "remove", "--cluster")
    wait_until(lambda: cluster_operations() == set())


@pytest.mark.parametrize("command", [["acl"], ["acl", "add"], ["acl", "list"]])
def test_help_imports_nothing_heavy(command: list[str]) -> None:
    imported = imported_by_help(command)
    heavy = sorted(n for n in imported for h in HEAVY if n == h or n.startswith(h + "."))
    assert heavy == [], heavy
