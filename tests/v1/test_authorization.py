"""V1 under Kafka's ACLs (``--authorizer``): PRODUCE needs WRITE on the topic, CONSUME READ,
the group commands READ on the group; a denial answers ``ERR|NOT_AUTHORIZED`` and the
connection stays usable. One pod for the module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapter.client import Client
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.support.authorizing import authorizing_pod
from tests.support.pods import Pod
from tests.support.waiting import wait_until

USER, ADMIN, PASSWORD = "alice", "admin", "v1 pass"


def _binding(rtype: ResourceType, name: str, op: Operation, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, f"User:{USER}", host, op, Permission.ALLOW)


@pytest.fixture(scope="module")
def pod(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    bindings = [
        _binding(ResourceType.TOPIC, "mine", Operation.WRITE),
        _binding(ResourceType.TOPIC, "readable", Operation.READ),
        _binding(ResourceType.GROUP, "g-ok", Operation.READ),
        _binding(ResourceType.TOPIC, "from-here", Operation.WRITE, "127.0.0.1"),
        _binding(ResourceType.TOPIC, "from-there", Operation.WRITE, "10.9.9.9"),
    ]
    with authorizing_pod(
        redis_url,
        tmp_path_factory.mktemp("v1authz"),
        user=USER,
        admin=ADMIN,
        password=PASSWORD,
        bindings=bindings,
        topics=("mine", "readable", "other"),
    ) as started:
        yield started


@pytest.fixture
def v1(pod: Pod) -> Iterator[Client]:
    client = Client("127.0.0.1", pod.port, timeout=10)
    client.auth(USER, PASSWORD)
    wait_until(lambda: client.request("PRODUCE", "mine k:v").ok)  # the bindings are loaded
    yield client
    client.close()


def test_produce_denied_then_allowed_on_one_connection(v1: Client) -> None:
    denied = v1.request("PRODUCE", "other k:v")
    assert (denied.ok, denied.code) == (False, "NOT_AUTHORIZED")
    assert "WRITE" in denied.message
    assert v1.ping() == "pong"  # the connection stays usable
    assert v1.request("PRODUCE", "mine k:v").ok


def test_consume_needs_read(v1: Client) -> None:
    assert v1.request("CONSUME", "mine 0 0").code == "NOT_AUTHORIZED"  # WRITE is not READ
    assert v1.request("CONSUME", "readable 0 0").ok


def test_group_commands_need_read_on_the_group(v1: Client) -> None:
    denied = v1.request("JOIN", "g-no readable c1")
    assert denied.code == "NOT_AUTHORIZED"
    assert v1.request("JOIN", "g-ok readable c1").ok
    assert v1.request("OFFSET", "g-no readable 0").code == "NOT_AUTHORIZED"


def test_admin_commands_need_the_cluster(v1: Client) -> None:
    assert v1.request("SET_PARTITION_ROLE", "mine 0 leader").code == "NOT_AUTHORIZED"


def test_anonymous_is_denied_without_auth(redis_url: str, pod: Pod) -> None:
    # (the pod requires AUTH: an unauthenticated request never reaches the authorizer)
    client = Client("127.0.0.1", pod.port, timeout=10)
    try:
        assert client.request("PRODUCE", "mine k:v").code == "AUTH_REQUIRED"
    finally:
        client.close()


def test_bindings_naming_a_host_match_the_peer(v1: Client) -> None:
    assert v1.request("PRODUCE", "from-here k:v").ok  # the test connects from 127.0.0.1
    assert v1.request("PRODUCE", "from-there k:v").code == "NOT_AUTHORIZED"
