"""Kafka's authorization rules, pure (mapping/security/acls.py), and the pod's authorizer
over them (adapter/authorizer.py): deny wins, implied operations, literal, prefixed and
wildcard patterns, principals and hosts, super users, allow.everyone.if.no.acl.found."""

from __future__ import annotations

import logging

import pytest

from adapter.authorizer import Authorizer, parse_super_users
from mapping.security.acls import (
    ANONYMOUS,
    ANY_USER,
    CLUSTER_NAME,
    SUPPORTED,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    authorize,
    authorized_operations,
)

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
ALICE, BOB = "User:alice", "User:bob"


def acl(
    name: str,
    operation: Operation,
    permission: Permission = ALLOW,
    principal: str = ALICE,
    *,
    rtype: ResourceType = TOPIC,
    pattern: PatternType = LITERAL,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, operation, permission)


def test_an_allow_allows_its_principal_only() -> None:
    bindings = [acl("orders", Operation.READ)]
    assert authorize(bindings, ALICE, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, BOB, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, ALICE, "10.0.0.1", Operation.WRITE, TOPIC, "orders")
    assert not authorize(bindings, ALICE, "10.0.0.1", Operation.READ, GROUP, "orders")


def test_deny_wins_over_allow_and_deny_all_denies_every_operation() -> None:
    bindings = [acl("orders", Operation.ALL), acl("orders", Operation.WRITE, DENY)]
    assert authorize(bindings, ALICE, "h", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, ALICE, "h", Operation.WRITE, TOPIC, "orders")
    denied_all = [acl("orders", Operation.READ), acl("o", Operation.ALL, DENY, pattern=PREFIXED)]
    assert not authorize(denied_all, ALICE, "h", Operation.READ, TOPIC, "orders")


@pytest.mark.parametrize(
    "granted", [Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER]
)
def test_read_write_delete_alter_imply_describe(granted: Operation) -> None:
    bindings = [acl("orders", granted)]
    assert authorize(bindings, ALICE, "h", Operation.DESCRIBE, TOPIC, "orders")
    assert not authorize(bindings, ALICE, "h", Operation.DESCRIBE_CONFIGS, TOPIC, "orders")


def test_alter_configs_implies_describe_configs_but_a_deny_of_describe_is_not_implied() -> None:
    bindings = [acl("orders", Operation.ALTER_CONFIGS)]
    assert authorize(bindings, ALICE, "h", Operation.DESCRIBE_CONFIGS, TOPIC, "orders")
    # a DENY of READ does not deny DESCRIBE (implication works for ALLOW only, as Kafka)
    bindings = [acl("orders", Operation.DESCRIBE), acl("orders", Operation.READ, DENY)]
    assert authorize(bindings, ALICE, "h", Operation.DESCRIBE, TOPIC, "orders")


def test_prefixed_and_wildcard_patterns() -> None:
    bindings = [acl("ord", Operation.READ, pattern=PREFIXED), acl("*", Operation.WRITE)]
    assert authorize(bindings, ALICE, "h", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, ALICE, "h", Operation.READ, TOPIC, "payments")
    assert authorize(bindings, ALICE, "h", Operation.WRITE, TOPIC, "payments")
    # a PREFIXED "*" is a prefix like any other, not a wildcard
    star = [acl("*", Operation.READ, pattern=PREFIXED)]
    assert not authorize(star, ALICE, "h", Operation.READ, TOPIC, "orders")


def test_any_user_and_hosts() -> None:
    bindings = [acl("orders", Operation.READ, principal=ANY_USER, host="10.0.0.1")]
    assert authorize(bindings, BOB, "10.0.0.1", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, BOB, "10.0.0.2", Operation.READ, TOPIC, "orders")
    assert not authorize(bindings, ANONYMOUS, "10.0.0.2", Operation.READ, TOPIC, "orders")


def test_super_users_and_allow_if_no_acl() -> None:
    bindings = [acl("orders", Operation.READ, DENY, principal=ANY_USER)]
    admins = frozenset({"User:admin"})
    admin = "User:admin"
    assert authorize(bindings, admin, "h", Operation.READ, TOPIC, "orders", super_users=admins)
    assert not authorize([], BOB, "h", Operation.READ, TOPIC, "free")
    assert authorize([], BOB, "h", Operation.READ, TOPIC, "free", allow_if_no_acl=True)
    # a resource with bindings (of anyone) is not "no ACL found"
    assert not authorize(bindings, BOB, "h", Operation.READ, TOPIC, "orders", allow_if_no_acl=True)


def test_authorized_operations_are_the_allowed_supported_ones() -> None:
    bindings = [
        acl("orders", Operation.WRITE),
        acl(CLUSTER_NAME, Operation.IDEMPOTENT_WRITE, rtype=CLUSTER),
    ]
    assert authorized_operations(bindings, ALICE, "h", TOPIC, "orders") == {
        Operation.WRITE,
        Operation.DESCRIBE,
    }
    assert authorized_operations(bindings, ALICE, "h", CLUSTER, CLUSTER_NAME) == {
        Operation.IDEMPOTENT_WRITE
    }
    admins = frozenset({ALICE})
    assert authorized_operations([], ALICE, "h", GROUP, "g", super_users=admins) == set(
        SUPPORTED[GROUP]
    )


def test_filters_match_as_describe_and_delete_acls() -> None:
    literal = acl("orders", Operation.READ)
    prefixed = acl("ord", Operation.WRITE, pattern=PREFIXED)
    wildcard = acl("*", Operation.DESCRIBE, principal=BOB)
    every = [literal, prefixed, wildcard]
    assert [b for b in every if AclFilter().matches(b)] == every
    by_name = AclFilter(TOPIC, "orders", PatternType.ANY)
    assert [b for b in every if by_name.matches(b)] == [literal]
    match = AclFilter(TOPIC, "orders", PatternType.MATCH)
    assert [b for b in every if match.matches(b)] == every
    assert [b for b in every if AclFilter(pattern_type=PREFIXED).matches(b)] == [prefixed]
    assert [b for b in every if AclFilter(principal=BOB).matches(b)] == [wildcard]
    assert not AclFilter(ResourceType.GROUP).matches(literal)


def test_authorizer_off_allows_everything_and_reports_every_operation() -> None:
    authorizer = Authorizer()
    assert not authorizer.enabled
    assert authorizer.allows(BOB, "/h", Operation.DELETE, TOPIC, "orders")
    assert authorizer.operations(BOB, "/h", GROUP, "g") == set(SUPPORTED[GROUP])
    assert authorizer.filter_allowed(BOB, "/h", Operation.READ, TOPIC, ["b", "a"]) == ["b", "a"]


def test_authorizer_on_decides_strips_the_host_slash_and_audits_denials(
    caplog: pytest.LogCaptureFixture,
) -> None:
    authorizer = Authorizer(
        enabled=True, super_users=parse_super_users("User:admin, User:root;User:ops")
    )
    assert authorizer.super_users == {"User:admin", "User:root", "User:ops"}
    authorizer.set_bindings([acl("ord", Operation.READ, pattern=PREFIXED, host="10.0.0.1")])
    assert authorizer.allows(ALICE, "/10.0.0.1", Operation.READ, TOPIC, "orders")
    assert authorizer.allows("User:ops", "/10.9.9.9", Operation.DELETE, TOPIC, "x")
    with caplog.at_level(logging.INFO, logger="adapter.audit"):
        allowed = authorizer.filter_allowed(
            ALICE, "/10.0.0.1", Operation.READ, TOPIC, ["orders", "payments", "ordinals"]
        )
    assert allowed == ["orders", "ordinals"]
    denials = [r.getMessage() for r in caplog.records if r.name == "adapter.audit"]
    assert denials == [
        "principal=User:alice host=10.0.0.1 operation=READ resource_type=TOPIC name=payments DENIED"
    ]
