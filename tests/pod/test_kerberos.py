"""Kafka's principal-to-local rules (pure), and the GSSAPI exchange against a real KDC's
tickets in one process: the three steps of RFC 4752, and what fails them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from adapter.kerberos import KerberosAcceptor, KerberosError, PrincipalNamer
from mapping.core.errors import ConfigurationError
from tests.support.kerberos import REALM, Kdc, log_in, realm_env, running_kdc

RULES = [
    "RULE:[2:$1@$0](.*@ADAPTER\\.TEST)s/^/svc-/",
    "RULE:[1:$1@$0](.*@PARTNER\\.ORG)s/@.*//L",
    "RULE:[2:$2]s/\\./_/g",
    "DEFAULT",
]


def test_default_rule_gives_the_first_component_in_the_default_realm() -> None:
    namer = PrincipalNamer.parse(["DEFAULT"], "ADAPTER.TEST")
    assert namer.short_name("alice@ADAPTER.TEST") == "alice"
    assert namer.short_name("kafka/host.example@ADAPTER.TEST") == "kafka"
    assert namer.short_name("alice") == "alice"  # already simple
    with pytest.raises(KerberosError, match="No rules apply to alice@ELSEWHERE"):
        namer.short_name("alice@ELSEWHERE")
    with pytest.raises(KerberosError, match="Malformed Kerberos name"):
        namer.short_name("a/b/c@ADAPTER.TEST")


def test_rules_apply_in_order_with_kafkas_syntax() -> None:
    namer = PrincipalNamer.parse(RULES, "ADAPTER.TEST")
    # $1@$0 matched, then s/^/svc-/: the prefix is on "etl@ADAPTER.TEST", which then has
    # an @: a non-simple name is an error, as in Kafka
    with pytest.raises(KerberosError, match="Non-simple name"):
        namer.short_name("etl/host@ADAPTER.TEST")
    namer = PrincipalNamer.parse(RULES[1:], "ADAPTER.TEST")
    assert namer.short_name("Bob@PARTNER.ORG") == "bob"  # s/@.*// then /L
    assert namer.short_name("etl/db.example.com@ADAPTER.TEST") == "db_example_com"  # /g
    assert namer.short_name("alice@ADAPTER.TEST") == "alice"  # DEFAULT, last
    nothing = PrincipalNamer.parse(["RULE:[0:$0]"], "R")  # no name has no component
    with pytest.raises(KerberosError, match="No rules apply"):
        nothing.short_name("alice@R")
    upper = PrincipalNamer.parse(["RULE:[1:$1]/U"], "")
    assert upper.short_name("carol@ANY") == "CAROL"
    groups = PrincipalNamer.parse(["RULE:[2:$1-$2](.*)s/(\\w+)-(\\w+)/$2\\$$1/"], "")
    assert groups.short_name("app/web@R") == "web$app"  # Java's $n and \\c replacement


def test_rules_that_do_not_parse_are_refused() -> None:
    for bad in ("RULE:[x:$1]", "RULES", "DEFAULT trailing", "RULE:[1:$1](unclosed"):
        with pytest.raises(ValueError, match="Invalid rule"):
            PrincipalNamer.parse([bad], "R")
    namer = PrincipalNamer.parse(["RULE:[1:$3]"], "R")
    with pytest.raises(KerberosError, match="outside of the valid range"):
        namer.short_name("alice@R")


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    with running_kdc(tmp_path_factory.mktemp("kdc")) as started, realm_env(started):
        yield started


def _client_context(kdc: Kdc, principal: str, service: str) -> object:
    import gssapi

    log_in(kdc, principal)
    target = gssapi.Name(f"{service}@127.0.0.1", gssapi.NameType.hostbased_service)
    return gssapi.SecurityContext(name=target, usage="initiate")


def test_the_exchange_authenticates_a_ticket_holder(kdc: Kdc) -> None:
    keytab = kdc.keytab("kafka/127.0.0.1", "pod")
    acceptor = KerberosAcceptor.from_options(keytab, None, "DEFAULT")
    assert acceptor is not None and acceptor.namer.default_realm == REALM
    client = _client_context(kdc, "alice", "kafka")
    exchange = acceptor.exchange()
    reply = exchange.step(client.step(None))  # type: ignore[attr-defined]
    assert reply  # the AP-REP: mutual authentication
    assert client.step(reply) is None  # type: ignore[attr-defined]
    offer = client.unwrap(exchange.step(b"")).message  # type: ignore[attr-defined]
    assert offer == b"\x01\x01\x00\x00"  # no security layer, 64 KiB
    chosen = client.wrap(b"\x01" + offer[1:] + b"anyone", False).message  # type: ignore[attr-defined]
    assert exchange.step(chosen) == b""
    assert (exchange.done, exchange.principal, exchange.user) == (True, f"alice@{REALM}", "alice")
    with pytest.raises(KerberosError, match="over"):
        exchange.step(b"")


def test_what_fails_the_exchange(kdc: Kdc) -> None:
    keytab = kdc.keytab("kafka/127.0.0.1", "pod")
    kdc.keytab("other/127.0.0.1", "other-service")
    acceptor = KerberosAcceptor.from_options(keytab, None, "DEFAULT")
    assert acceptor is not None
    with pytest.raises(KerberosError):  # not a Kerberos token at all
        acceptor.exchange().step(b"\x00not a token")
    # a ticket for a service whose key the pod does not have
    stranger = _client_context(kdc, "alice", "other")
    with pytest.raises(KerberosError):
        acceptor.exchange().step(stranger.step(None))  # type: ignore[attr-defined]
    # a token where the empty confirmation belongs
    client = _client_context(kdc, "alice", "kafka")
    exchange = acceptor.exchange()
    exchange.step(client.step(None))  # type: ignore[attr-defined]
    with pytest.raises(KerberosError, match="zero length"):
        exchange.step(b"x")
    # a security layer that was not offered (integrity only)
    with pytest.raises(KerberosError, match="security layer"):
        _choose_layer(kdc, acceptor, b"\x02")
    # a principal no rule names
    strict = KerberosAcceptor.from_options(keytab, None, "RULE:[2:$1]")
    assert strict is not None
    with pytest.raises(KerberosError, match="No rules apply"):
        _choose_layer(kdc, strict, b"\x01")


def _choose_layer(kdc: Kdc, acceptor: KerberosAcceptor, layer: bytes) -> bytes:
    """alice's exchange with ``acceptor`` up to her choice of ``layer``: its answer."""
    client = _client_context(kdc, "alice", "kafka")
    exchange = acceptor.exchange()
    client.step(exchange.step(client.step(None)))  # type: ignore[attr-defined]
    offer = client.unwrap(exchange.step(b"")).message  # type: ignore[attr-defined]
    return exchange.step(client.wrap(layer + offer[1:], False).message)  # type: ignore[attr-defined]


def test_options_that_cannot_work_stop_the_pod_at_start(kdc: Kdc, tmp_path: Path) -> None:
    keytab = kdc.keytab("kafka/127.0.0.1", "pod")
    assert KerberosAcceptor.from_options(None, None, "DEFAULT") is None
    empty = tmp_path / "empty.keytab"
    empty.write_bytes(b"")
    with pytest.raises(ConfigurationError, match="--kerberos-keytab"):
        KerberosAcceptor.from_options(empty, None, "DEFAULT")
    with pytest.raises(ConfigurationError, match="--kerberos-keytab"):
        KerberosAcceptor.from_options(keytab, f"nobody/127.0.0.1@{REALM}", "DEFAULT")
    with pytest.raises(ConfigurationError, match="principal-to-local-rules: Invalid rule"):
        KerberosAcceptor.from_options(keytab, None, "DEFAULT, NONSENSE")
    named = KerberosAcceptor.from_options(keytab, f"kafka/127.0.0.1@{REALM}", "DEFAULT")
    assert named is not None
