"""Kafka's DescribeUserScramCredentials and AlterUserScramCredentials against a pod started
with --auth-redis: users made with confluent-kafka's AdminClient log in over SASL SCRAM with
confluent-kafka and kafka-python, are listed by ``adapter user list``, and Kafka's errors
answer bad requests without storing anything."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from adapter.kafka import errors
from adapter.kafka.versions import (
    ALTER_USER_SCRAM_CREDENTIALS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from mapping.core.keys import Keys
from mapping.security.auth import auth_file_line
from tests.support.kafka import RawKafka
from tests.support.pods import RF1, Pod, plain_client
from tests.support.users import add_redis_users
from tests.support.waiting import wait_until

ADMIN, ADMIN_PASSWORD = "admin", "admin pass"


@pytest.fixture(scope="module")
def scram_pod(redis_url: str) -> Iterator[Pod]:
    prefix = f"scram-{uuid.uuid4().hex[:8]}"
    add_redis_users(redis_url, prefix, {ADMIN: ADMIN_PASSWORD})
    pod = Pod(redis_url, *RF1, "--key-prefix", prefix, "--auth-redis", connect=plain_client)
    pod.start()
    pod.prefix = prefix  # type: ignore[attr-defined]
    yield pod
    pod.stop()


def _sasl(pod: Pod, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": pod.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _admin(pod: Pod) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(_sasl(pod, "SCRAM-SHA-256", ADMIN, ADMIN_PASSWORD))


def _upsert(user: str, mechanism: str, password: str, iterations: int = 8192) -> Any:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), iterations)
    salt = (b"salt-" + user.encode()).ljust(16, b"-")
    return UserScramCredentialUpsertion(user, info, password.encode(), salt)


def _delete(user: str, mechanism: str) -> Any:
    from confluent_kafka.admin import ScramMechanism, UserScramCredentialDeletion

    return UserScramCredentialDeletion(user, getattr(ScramMechanism, mechanism.replace("-", "_")))


def _alter(pod: Pod, *changes: Any) -> dict[str, int]:
    """Each user's error code (0: done)."""
    from confluent_kafka import KafkaException

    codes = {}
    admin = _admin(pod)  # kept until the answers are in (destroyed: _DESTROY)
    for user, future in admin.alter_user_scram_credentials(list(changes)).items():
        try:
            future.result(timeout=15)
            codes[user] = errors.NONE
        except KafkaException as exc:
            codes[user] = exc.args[0].code()
    return codes


def _describe(pod: Pod, users: list[str] | None = None) -> dict[str, Any]:
    """user -> {mechanism name: iterations}, or the error code."""
    from confluent_kafka import KafkaException

    admin = _admin(pod)
    if users is None:
        described = admin.describe_user_scram_credentials().result(timeout=15)
        return {u: _infos(d) for u, d in described.items()}
    found = {}
    for user, future in admin.describe_user_scram_credentials(users).items():
        try:
            found[user] = _infos(future.result(timeout=15))
        except KafkaException as exc:
            found[user] = exc.args[0].code()
    return found


def _infos(description: Any) -> dict[str, int]:
    return {i.mechanism.name: i.iterations for i in description.scram_credential_infos}


def _produces(pod: Pod, mechanism: str, user: str, password: str, topic: str) -> bool:
    """Whether a confluent-kafka producer logged in as ``user`` delivers a record."""
    from confluent_kafka import KafkaError, Producer

    seen: list[Any] = []
    delivered: list[Any] = []
    producer = Producer(
        {**_sasl(pod, mechanism, user, password), "error_cb": seen.append,
         "message.timeout.ms": 10000}
    )  # fmt: skip
    producer.produce(topic, b"v", partition=0, on_delivery=lambda e, m: delivered.append(e))

    def settled() -> bool:
        producer.poll(0.1)
        return bool(delivered) or any(e.code() == KafkaError._AUTHENTICATION for e in seen)

    wait_until(settled, timeout=20)
    return delivered == [None]


def _consumes(pod: Pod, mechanism: str, user: str, password: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=pod.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
        auto_offset_reset="earliest", consumer_timeout_ms=5000, request_timeout_ms=10000,
    )  # fmt: skip
    try:
        return [record.value for record in consumer]
    finally:
        consumer.close()


def _users_listed(redis_url: str, prefix: str) -> list[str]:
    result = CliRunner().invoke(
        main, ["user", "list", "--redis-url", redis_url, "--key-prefix", prefix]
    )
    assert result.exit_code == 0, result.output
    return result.output.split()


def _stored(redis_url: str, prefix: str, user: str) -> tuple[Any, Any]:
    """The user's (password hash, SCRAM secrets) in Redis."""
    client = redis.Redis.from_url(redis_url)
    try:
        keys = Keys(prefix)
        return client.hget(keys.users, user), client.hget(keys.users_scram, user)
    finally:
        client.close()


def test_a_user_made_through_the_admin_api_logs_in_and_is_listed(
    scram_pod: Pod, redis_url: str, topic: str
) -> None:
    prefix = scram_pod.prefix  # type: ignore[attr-defined]
    assert _alter(scram_pod, _upsert("kim", "SCRAM-SHA-256", "kim pw")) == {"kim": 0}
    # one change per user and request (Kafka's rule): the second mechanism separately
    assert _alter(scram_pod, _upsert("kim", "SCRAM-SHA-512", "kim pw", 4096)) == {"kim": 0}
    assert _describe(scram_pod, ["kim"]) == {"kim": {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 4096}}
    assert _describe(scram_pod)["kim"] == {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 4096}
    assert _produces(scram_pod, "SCRAM-SHA-256", "kim", "kim pw", topic)
    assert _consumes(scram_pod, "SCRAM-SHA-512", "kim", "kim pw", topic) == [b"v"]
    assert not _produces(scram_pod, "SCRAM-SHA-256", "kim", "wrong", topic)
    assert "kim" in _users_listed(redis_url, prefix)
    # the client never sends the password: no PLAIN hash is made
    assert _stored(redis_url, prefix, "kim")[0] is None
    assert not _produces(scram_pod, "PLAIN", "kim", "kim pw", topic)


def test_deleting_credentials_stops_their_logins(
    scram_pod: Pod, redis_url: str, topic: str
) -> None:
    prefix = scram_pod.prefix  # type: ignore[attr-defined]
    assert _alter(scram_pod, _upsert("lee", "SCRAM-SHA-256", "lee pw")) == {"lee": 0}
    assert _alter(scram_pod, _upsert("lee", "SCRAM-SHA-512", "lee pw")) == {"lee": 0}
    assert _alter(scram_pod, _delete("lee", "SCRAM-SHA-256")) == {"lee": 0}
    assert _describe(scram_pod, ["lee"]) == {"lee": {"SCRAM_SHA_512": 8192}}
    assert not _produces(scram_pod, "SCRAM-SHA-256", "lee", "lee pw", topic)
    assert _produces(scram_pod, "SCRAM-SHA-512", "lee", "lee pw", topic)
    assert _alter(scram_pod, _delete("lee", "SCRAM-SHA-512")) == {"lee": 0}
    assert not _produces(scram_pod, "SCRAM-SHA-512", "lee", "lee pw", topic)
    assert _describe(scram_pod, ["lee"]) == {"lee": errors.RESOURCE_NOT_FOUND}
    assert _alter(scram_pod, _delete("lee", "SCRAM-SHA-512")) == {"lee": errors.RESOURCE_NOT_FOUND}
    assert _stored(redis_url, prefix, "lee") == (None, None)
    assert "lee" not in _users_listed(redis_url, prefix)


def test_scram_changes_leave_the_plain_password(scram_pod: Pod, redis_url: str, topic: str) -> None:
    add_redis_users(redis_url, scram_pod.prefix, {"max": "old pw"})  # type: ignore[attr-defined]
    assert _alter(scram_pod, _upsert("max", "SCRAM-SHA-256", "new pw")) == {"max": 0}
    assert _produces(scram_pod, "SCRAM-SHA-256", "max", "new pw", topic)
    assert _produces(scram_pod, "SCRAM-SHA-512", "max", "old pw", topic)  # untouched
    assert _produces(scram_pod, "PLAIN", "max", "old pw", topic)


def test_bad_requests_answer_kafka_errors_and_store_nothing(scram_pod: Pod, redis_url: str) -> None:
    prefix = scram_pod.prefix  # type: ignore[attr-defined]
    assert _alter(scram_pod, _upsert("ned", "SCRAM-SHA-256", "pw", iterations=100)) == {
        "ned": errors.UNACCEPTABLE_CREDENTIAL
    }
    assert _alter(scram_pod, _upsert("ned", "SCRAM-SHA-256", "pw", iterations=16385)) == {
        "ned": errors.UNACCEPTABLE_CREDENTIAL
    }
    # a user twice in one request: refused whole, the valid one of them too
    both = _alter(
        scram_pod, _upsert("ned", "SCRAM-SHA-256", "pw"), _upsert("ned", "SCRAM-SHA-512", "pw")
    )
    assert both == {"ned": errors.DUPLICATE_RESOURCE}
    assert _stored(redis_url, prefix, "ned") == (None, None)
    assert _describe(scram_pod, ["nobody"]) == {"nobody": errors.RESOURCE_NOT_FOUND}


def _raw_login(raw: RawKafka) -> None:
    from scramp import ScramClient

    raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="SCRAM-SHA-256"))
    client = ScramClient(["SCRAM-SHA-256"], ADMIN, ADMIN_PASSWORD)
    first = raw.call(SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request[2](
        auth_bytes=client.get_client_first().encode()
    ))  # fmt: skip
    client.set_server_first(first.auth_bytes.decode())
    final = raw.call(SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request[2](
        auth_bytes=client.get_client_final().encode()
    ))  # fmt: skip
    assert final.error_code == errors.NONE


def test_raw_requests_kafka_clients_do_not_send(scram_pod: Pod, redis_url: str) -> None:
    """An unknown mechanism, an empty salt, a user described twice."""
    prefix = scram_pod.prefix  # type: ignore[attr-defined]
    alter = ALTER_USER_SCRAM_CREDENTIALS.request
    upsertion = alter.ScramCredentialUpsertion
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    with RawKafka(scram_pod.kafka_port) as raw:
        _raw_login(raw)
        reply = raw.call(ALTER_USER_SCRAM_CREDENTIALS, 0, alter[0](deletions=[], upsertions=[
            upsertion(name="ola", mechanism=3, iterations=4096, salt=b"s" * 16,
                      salted_password=salted),
            upsertion(name="pia", mechanism=1, iterations=4096, salt=b"", salted_password=salted),
            upsertion(name="", mechanism=1, iterations=4096, salt=b"s" * 16,
                      salted_password=salted),
            upsertion(name="rex", mechanism=1, iterations=4096, salt=b"short",
                      salted_password=salted),
        ]))  # fmt: skip
        assert {(r.user, r.error_code) for r in reply.results} == {
            ("ola", errors.UNSUPPORTED_SASL_MECHANISM),
            ("pia", errors.UNACCEPTABLE_CREDENTIAL),
            ("", errors.UNACCEPTABLE_CREDENTIAL),
            ("rex", errors.UNACCEPTABLE_CREDENTIAL),
        }
        describe = DESCRIBE_USER_SCRAM_CREDENTIALS.request
        named = describe.UserName
        reply = raw.call(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, describe[0](
            users=[named(name=ADMIN), named(name=ADMIN)]
        ))  # fmt: skip
        assert [(r.user, r.error_code) for r in reply.results] == [
            (ADMIN, errors.DUPLICATE_RESOURCE)
        ]
    for user in ("ola", "pia", "rex"):
        assert _stored(redis_url, prefix, user) == (None, None)


def test_users_from_a_file_are_read_only(redis_url: str, tmp_path: Path, start_pod: Any) -> None:
    users = tmp_path / "users"
    users.write_text(auth_file_line(ADMIN, ADMIN_PASSWORD) + "\n")
    prefix = f"scram-file-{uuid.uuid4().hex[:8]}"
    pod = start_pod(
        redis_url, *RF1, "--key-prefix", prefix, "--auth-file", str(users), connect=plain_client
    )
    assert _alter(pod, _upsert("quinn", "SCRAM-SHA-256", "pw")) == {
        "quinn": errors.POLICY_VIOLATION
    }
    assert _describe(pod) == {ADMIN: {"SCRAM_SHA_256": 4096, "SCRAM_SHA_512": 4096}}
    assert _stored(redis_url, prefix, "quinn") == (None, None)
