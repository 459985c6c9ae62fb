"""Kafka's ACL admin APIs (DescribeAcls, CreateAcls, DeleteAcls; adapter/kafka/acls.py) with
confluent-kafka's AdminClient against pods started with --authorizer and SASL users: a super
user administers, a user without cluster rights is refused, a change made through one pod is
in force on the other; SECURITY_DISABLED without --authorizer; Kafka's INVALID_REQUEST for
invalid bindings (nothing stored), v0's literal-only view, with a raw client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from adapter.kafka import errors
from adapter.kafka.acls import CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED
from adapter.kafka.versions import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS, DESCRIBE_GROUPS
from mapping.core.keys import Keys
from mapping.security.acl_store import SyncAclStore
from mapping.security.acls import SUPPORTED
from mapping.security.acls import ResourceType as AclResourceType
from tests.support.kafka import RawKafka
from tests.support.pods import RF1, Pod, plain_client, start_all
from tests.support.users import add_redis_users
from tests.support.waiting import wait_until

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
EVERY = AclBindingFilter(
    ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
    AclPermissionType.ANY,
)  # fmt: skip


@pytest.fixture(scope="module")
def acl_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    """Two pods of one deployment with SASL users and the authorizer; User:admin is a super
    user."""
    prefix = f"acls-{uuid.uuid4().hex[:8]}"
    add_redis_users(redis_url, prefix, PASSWORDS)
    args = (*RF1, "--key-prefix", prefix, "--auth-redis", "--authorizer",
            "--super-users", "User:admin")  # fmt: skip
    pods = [Pod(redis_url, *args, connect=plain_client) for _ in range(2)]
    start_all(pods)
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()


def _admin(pod: Pod, user: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": pod.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
        }
    )


def _binding(
    rtype: ResourceType, name: str, operation: AclOperation, principal: str = "User:alice",
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:  # fmt: skip
    return AclBinding(rtype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def _create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings), request_timeout=10).values():
        future.result(10)


def _describe(admin: AdminClient, wanted: AclBindingFilter = EVERY) -> set[AclBinding]:
    return set(admin.describe_acls(wanted, request_timeout=10).result(10))


def _kafka_python_describe(pod: Pod, user: str | None) -> Any:
    """DescribeAcls of every binding through kafka-python's admin client (which raises the
    response's error, where librdkafka drops it)."""
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KafkaPythonType

    login = {}
    if user is not None:
        login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                 "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}  # fmt: skip
    client = KafkaAdminClient(bootstrap_servers=pod.bootstrap, **login)
    every = ACLFilter(
        principal=None, host="*", operation=ACLOperation.ANY,
        permission_type=ACLPermissionType.ANY,
        resource_pattern=ResourcePatternFilter(
            KafkaPythonType.ANY, None, ACLResourcePatternType.ANY
        ),
    )  # fmt: skip
    try:
        return client.describe_acls(every)
    finally:
        client.close()


def _error_code(call: Any) -> int:
    with pytest.raises(KafkaException) as failure:
        call()
    return failure.value.args[0].code()


def test_a_super_user_creates_describes_and_deletes_acls(acl_pods: tuple[Pod, Pod]) -> None:
    a, b = acl_pods
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    read = _binding(ResourceType.TOPIC, topic, AclOperation.READ)
    write = _binding(ResourceType.TOPIC, topic[:4], AclOperation.WRITE,
                     pattern=ResourcePatternType.PREFIXED)  # fmt: skip
    group = _binding(ResourceType.GROUP, f"g-{topic}", AclOperation.READ)
    admin_a, admin_b = _admin(a, "admin"), _admin(b, "admin")
    _create(admin_a, read, write, group)
    _create(admin_a, read)  # again: idempotent
    assert {read, write, group} <= _describe(admin_b)
    on_topic = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.MATCH, None,
                                None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert _describe(admin_b, on_topic) == {read, write}
    alice_topics = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY,
                                    "User:alice", None, AclOperation.ANY,
                                    AclPermissionType.ANY)  # fmt: skip
    deleted = admin_b.delete_acls([alice_topics], request_timeout=10)[alice_topics].result(10)
    assert set(deleted) == {read, write}
    remaining = _describe(admin_a)
    assert group in remaining and read not in remaining and write not in remaining
    assert admin_a.delete_acls([alice_topics])[alice_topics].result(10) == []


def test_a_user_without_cluster_rights_is_refused(acl_pods: tuple[Pod, Pod]) -> None:
    a, _ = acl_pods
    alice = _admin(a, "alice")
    mine = _binding(ResourceType.TOPIC, "anything", AclOperation.ALL)
    refused = alice.create_acls([mine], request_timeout=10)[mine]
    assert _error_code(lambda: refused.result(10)) == CLUSTER_AUTHORIZATION_FAILED
    # (librdkafka drops DescribeAcls' error: kafka-python's client raises it)
    from kafka.errors import ClusterAuthorizationFailedError

    with pytest.raises(ClusterAuthorizationFailedError):
        _kafka_python_describe(a, "alice")
    assert mine not in _describe(_admin(a, "admin"))  # nothing stored


def test_a_change_through_one_pod_is_in_force_on_the_other(acl_pods: tuple[Pod, Pod]) -> None:
    """Granted through pod A, bob's authorized operations on the cluster (DescribeCluster,
    computed by pod B's authorizer) follow at once; removed, they go."""
    a, b = acl_pods
    bob_b = _admin(b, "bob")

    def bob_cluster_operations() -> set[AclOperation]:
        cluster = bob_b.describe_cluster(include_authorized_operations=True).result(10)
        return set(cluster.authorized_operations or ())

    assert bob_cluster_operations() == set()
    grant = _binding(ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE,
                     principal="User:bob")  # fmt: skip
    admin_a = _admin(a, "admin")
    _create(admin_a, grant)
    wait_until(lambda: bob_cluster_operations() == {AclOperation.IDEMPOTENT_WRITE})
    admin_b = _admin(b, "admin")
    cluster = admin_b.describe_cluster(include_authorized_operations=True).result(10)
    assert AclOperation.ALTER in set(cluster.authorized_operations)  # the super user's: all
    gone = AclBindingFilter(ResourceType.BROKER, None, ResourcePatternType.ANY, "User:bob",
                            None, AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert admin_a.delete_acls([gone])[gone].result(10) == [grant]
    wait_until(lambda: bob_cluster_operations() == set())


def test_without_the_authorizer_acl_apis_answer_security_disabled(pod: Pod) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    from kafka.errors import SecurityDisabledError

    with pytest.raises(SecurityDisabledError):
        _kafka_python_describe(pod, None)
    binding = _binding(ResourceType.TOPIC, "t", AclOperation.READ)
    future = admin.create_acls([binding], request_timeout=10)[binding]
    assert _error_code(lambda: future.result(10)) == SECURITY_DISABLED
    filters = [EVERY]
    deleted = admin.delete_acls(filters, request_timeout=10)[EVERY]
    assert _error_code(lambda: deleted.result(10)) == KafkaError.SECURITY_DISABLED


# --- raw requests: what the clients never send ------------------------------------------------


@pytest.fixture(scope="module")
def open_acl_pod(redis_url: str) -> Iterator[Pod]:
    """The authorizer on, no authentication, anonymous clients super users (raw requests)."""
    prefix = f"rawacls-{uuid.uuid4().hex[:8]}"
    pod = Pod(redis_url, *RF1, "--key-prefix", prefix, "--authorizer",
              "--super-users", "User:ANONYMOUS")  # fmt: skip
    pod.start()
    yield pod
    pod.stop()


def _creation(version: int, **fields: Any) -> Any:
    entry = {"resource_type": 2, "resource_name": "t", "principal": "User:alice", "host": "*",
             "operation": 3, "permission_type": 3, **fields}  # fmt: skip
    if version == 0:
        entry.pop("resource_pattern_type", None)
    return CREATE_ACLS.request.AclCreation(**entry)


def _stored(redis_url: str, pod: Pod) -> list:
    prefix = pod.args[pod.args.index("--key-prefix") + 1]
    store = SyncAclStore(redis.Redis.from_url(redis_url), Keys(prefix))
    try:
        return store.load()
    finally:
        store.client.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_invalid_creations_answer_invalid_request_and_are_not_stored(
    open_acl_pod: Pod, redis_url: str, version: int
) -> None:
    valid_name = f"valid-{version}"
    creations = [
        ({"resource_type": 1}, "Invalid resourceType ANY"),
        ({"resource_type": 0}, "Invalid resourceType UNKNOWN"),
        ({"resource_pattern_type": 2}, "Invalid patternType MATCH"),
        ({"resource_pattern_type": 1}, "Invalid patternType ANY"),
        ({"operation": 1}, "Invalid operation ANY"),
        ({"permission_type": 1}, "Invalid permissionType ANY"),
        ({"resource_name": ""}, "Invalid empty resource name"),
        ({"resource_type": 4, "resource_name": "c"}, "The only valid name for the CLUSTER"),
        ({"principal": "alice"}, "Could not parse principal from `alice`"),
        ({"resource_name": valid_name, "resource_pattern_type": 4}, None),
    ]
    body = CREATE_ACLS.request[version](
        creations=[_creation(version, **fields) for fields, _ in creations]
    )
    with RawKafka(open_acl_pod.kafka_port) as raw:
        results = raw.call(CREATE_ACLS, version, body).results
    for (fields, message), result in zip(creations, results, strict=True):
        if message is None:
            assert (result.error_code, result.error_message) == (errors.NONE, None)
        else:
            assert result.error_code == errors.INVALID_REQUEST, fields
            assert result.error_message.startswith(message), (fields, result.error_message)
    stored = _stored(redis_url, open_acl_pod)
    assert [b.name for b in stored if not b.name.startswith(("valid", "v0-"))] == []
    assert valid_name in [b.name for b in stored]


def test_v0_carries_literal_bindings_only(open_acl_pod: Pod) -> None:
    name = f"v0-{uuid.uuid4().hex[:6]}"
    with RawKafka(open_acl_pod.kafka_port) as raw:
        created = raw.call(
            CREATE_ACLS, 1, CREATE_ACLS.request[1](creations=[
                _creation(1, resource_name=name, resource_pattern_type=3),
                _creation(1, resource_name=name, resource_pattern_type=4),
            ]),
        )  # fmt: skip
        assert [r.error_code for r in created.results] == [errors.NONE, errors.NONE]

        def describe(version: int) -> list[tuple[str, int]]:
            body = DESCRIBE_ACLS.request[version](
                resource_type_filter=2, resource_name_filter=name, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1,
            )  # fmt: skip
            answer = raw.call(DESCRIBE_ACLS, version, body)
            assert answer.error_code == errors.NONE
            return sorted((r.resource_name, r.pattern_type) for r in answer.resources)

        assert describe(1) == [(name, 3), (name, 4)]
        assert describe(0) == [(name, 3)]  # v0: LITERAL only
        filters = [DELETE_ACLS.request.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=name, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        )]  # fmt: skip
        deleted = raw.call(DELETE_ACLS, 0, DELETE_ACLS.request[0](filters=filters))
        [result] = deleted.filter_results
        assert [(m.resource_name, m.pattern_type) for m in result.matching_acls] == [(name, 3)]
        assert describe(1) == [(name, 4)]
        unknown = DESCRIBE_ACLS.request[1](
            resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        )  # fmt: skip
        assert raw.call(DESCRIBE_ACLS, 1, unknown).error_code == errors.INVALID_REQUEST


def test_describe_groups_reports_the_principals_operations(open_acl_pod: Pod, pod: Pod) -> None:
    """DescribeGroups v3+: the group's authorized operations when asked (a super user: all
    a group supports; the authorizer off: likewise), Kafka's "not asked" otherwise."""
    every = {int(op) for op in SUPPORTED[AclResourceType.GROUP]}
    for served in (open_acl_pod, pod):
        with RawKafka(served.kafka_port) as raw:
            for asked, expected in ((True, every), (False, None)):
                body = DESCRIBE_GROUPS.request[5](
                    groups=[f"g-{uuid.uuid4().hex[:6]}"], include_authorized_operations=asked
                )
                [group] = raw.call(DESCRIBE_GROUPS, 5, body).groups
                assert group.error_code == errors.NONE
                assert group.authorized_operations == expected  # None: Kafka's "not asked"
