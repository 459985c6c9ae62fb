"""Kafka SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) against the pod's users, from an auth file
and from Redis (``adapter user add``), with confluent-kafka, kafka-python and aiokafka, over
plain TCP and TLS; refusals with a raw client."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import trustme
from scramp import ScramClient

from adapter.client import Client
from adapter.kafka import errors
from adapter.kafka.framing import frame
from adapter.kafka.versions import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from mapping.core.keys import Keys
from mapping.security.auth import (
    RedisUsers,
    auth_file_line,
    hash_password,
    parse_auth_file_users,
    parse_scram_secrets,
    scram_password_check,
)
from tests.support.kafka import RawKafka
from tests.support.pods import RF1, Pod, plain_client
from tests.support.tls import tls_connect
from tests.support.users import add_redis_users
from tests.support.waiting import wait_until

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
FILE_USER, FILE_PASSWORD = "alice", "file pass"
REDIS_USER, REDIS_PASSWORD = "bob", "redis:pass,=word"
PLAIN_ONLY_USER, PLAIN_ONLY_PASSWORD = "carol", "old line"  # a line without SCRAM secrets
AUTH_TIMEOUT_S = 2


def _write_auth_file(path: Path) -> Path:
    path.write_text(
        f"{auth_file_line(FILE_USER, FILE_PASSWORD)}\n"
        f"{PLAIN_ONLY_USER}:{hash_password(PLAIN_ONLY_PASSWORD)}\n"
    )
    return path


def _auth_args(redis_url: str, folder: Path) -> list[str]:
    prefix = f"sasl-{uuid.uuid4().hex[:8]}"
    add_redis_users(redis_url, prefix, {REDIS_USER: REDIS_PASSWORD})
    return [
        *RF1, "--key-prefix", prefix, "--auth-redis",
        "--auth-file", str(_write_auth_file(folder / "users")),
        "--auth-timeout-s", str(AUTH_TIMEOUT_S),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def sasl_pod(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    args = _auth_args(redis_url, tmp_path_factory.mktemp("sasl"))
    pod = Pod(redis_url, *args, connect=plain_client)
    pod.start()
    yield pod
    pod.stop()


def _credentials(mechanism: str) -> list[tuple[str, str]]:
    users = [(FILE_USER, FILE_PASSWORD), (REDIS_USER, REDIS_PASSWORD)]
    if mechanism == "PLAIN":
        users.append((PLAIN_ONLY_USER, PLAIN_ONLY_PASSWORD))
    return users


# --- stored secrets --------------------------------------------------------------------------


def test_scram_secrets_are_salted_and_derived_from_the_password() -> None:
    # "-" and "!" are outside base64's alphabet, so the password can only show up in the
    # stored line if it was stored in clear (a plain "pw" occurs in random base64 now and then).
    password = "pass-word!"
    line = auth_file_line("dave", password)
    users = parse_auth_file_users(line)
    secrets = parse_scram_secrets(users.scram["dave"])
    assert set(secrets) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    for mechanism, secret in secrets.items():
        assert secret.iterations >= 4096
        assert scram_password_check(password, secret, mechanism)
        assert not scram_password_check("pass-worD!", secret, mechanism)
    again = parse_scram_secrets(
        parse_auth_file_users(auth_file_line("dave", password)).scram["dave"]
    )
    assert again["SCRAM-SHA-256"].salt != secrets["SCRAM-SHA-256"].salt
    assert password not in line.split(":", 1)[1]


def test_adapter_user_add_stores_scram_secrets_and_remove_drops_them(redis_url: str) -> None:
    keys = Keys(f"users-{uuid.uuid4().hex[:8]}")
    client = redis.Redis.from_url(redis_url)
    users = RedisUsers(client, keys)
    try:
        assert users.add("erin", "pw")
        secrets = parse_scram_secrets(client.hget(keys.users_scram, "erin").decode())
        assert scram_password_check("pw", secrets["SCRAM-SHA-512"], "SCRAM-SHA-512")
        assert users.remove("erin")
        assert client.hget(keys.users_scram, "erin") is None
    finally:
        client.close()


def test_v1_auth_accepts_the_same_users_and_auth_file_lines(sasl_pod: Pod) -> None:
    """An auth file line with SCRAM secrets (third column) and one without both serve V1."""
    for user, password in _credentials("PLAIN"):
        with Client("127.0.0.1", sasl_pod.port, timeout=10) as v1:
            v1.auth(user, password)
            assert v1.ping() == "pong"


# --- real clients ----------------------------------------------------------------------------


def _confluent_config(pod: Pod, mechanism: str, user: str, password: str) -> dict:
    return {
        "bootstrap.servers": pod.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def _confluent_produce_one(config: dict, topic: str) -> list:
    """The delivery reports of one record produced with ``config``."""
    from confluent_kafka import Producer

    producer = Producer({**config, "acks": "all", "message.timeout.ms": 10000})
    delivered: list = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(15) == 0
    return delivered


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_authenticates_and_produces(
    sasl_pod: Pod, topic: str, mechanism: str
) -> None:
    for user, password in _credentials(mechanism):
        config = _confluent_config(sasl_pod, mechanism, user, password)
        assert _confluent_produce_one(config, topic) == [None], user


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_wrong_password_is_an_authentication_error(
    sasl_pod: Pod, mechanism: str
) -> None:
    from confluent_kafka import KafkaError, Producer

    users = [(FILE_USER, "wrong"), ("nobody", "x")]
    if mechanism != "PLAIN":
        users.append((PLAIN_ONLY_USER, PLAIN_ONLY_PASSWORD))  # no SCRAM secrets stored
    for user, password in users:
        seen: list = []
        producer = Producer(
            {**_confluent_config(sasl_pod, mechanism, user, password), "error_cb": seen.append}
        )

        def refused(producer: Producer = producer, seen: list = seen) -> bool:
            producer.poll(0.1)
            return any(e.code() == KafkaError._AUTHENTICATION for e in seen)

        wait_until(refused, timeout=15)


# (0, 10, 0): kafka-python then sends SaslHandshake v0 and the tokens as raw frames (and
# Produce v2 with magic 1), as librdkafka 2.0 does
@pytest.mark.parametrize("api_version", [None, (0, 10, 0)])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_authenticates_and_produces(
    sasl_pod: Pod, topic: str, mechanism: str, api_version: tuple[int, ...] | None
) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=sasl_pod.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism, sasl_plain_username=REDIS_USER,
        sasl_plain_password=REDIS_PASSWORD, request_timeout_ms=10000, api_version=api_version,
    )  # fmt: skip
    try:
        metadata = producer.send(topic, b"v", partition=1).get(timeout=15)
        assert metadata.partition == 1
    finally:
        producer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_authenticates_and_produces(sasl_pod: Pod, topic: str, mechanism: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_pod.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=mechanism, sasl_plain_username=FILE_USER,
            sasl_plain_password=FILE_PASSWORD, request_timeout_ms=10000,
        )  # fmt: skip
        await producer.start()
        try:
            sent = await producer.send_and_wait(topic, b"v", partition=2)
            assert sent.partition == 2
        finally:
            await producer.stop()

    asyncio.run(run())


def test_aiokafka_wrong_password_fails_to_start(sasl_pod: Pod) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=sasl_pod.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=FILE_USER,
            sasl_plain_password="wrong", request_timeout_ms=5000,
        )  # fmt: skip
        with pytest.raises(KafkaError):
            await producer.start()
        await producer.stop()

    asyncio.run(run())


# --- raw client: refusals --------------------------------------------------------------------


def _metadata() -> object:
    return METADATA.request[12](topics=None, allow_auto_topic_creation=False)


def _plain_token(user: str, password: str) -> bytes:
    return f"\0{user}\0{password}".encode()


def test_requests_before_authentication_close_the_connection(sasl_pod: Pod) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        versions = raw.call(API_VERSIONS, 3, API_VERSIONS.request[3](
            client_software_name="t", client_software_version="1"
        ))  # fmt: skip
        assert versions.error_code == errors.NONE  # allowed before authentication
        assert {SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key} <= {a.api_key for a in versions.api_keys}
        raw.send(METADATA, 12, _metadata())
        assert raw.closed_by_peer()


def test_wrong_password_answers_sasl_authentication_failed_then_closes(
    sasl_pod: Pod,
) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
        assert shake.error_code == errors.NONE
        assert set(shake.mechanisms) == set(MECHANISMS)
        reply = raw.call(SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request[2](
            auth_bytes=_plain_token(FILE_USER, "wrong")
        ))  # fmt: skip
        assert reply.error_code == errors.SASL_AUTHENTICATION_FAILED
        assert "invalid user name or password" in reply.error_message
        assert raw.closed_by_peer()


def test_unknown_mechanism_and_authenticate_without_handshake(sasl_pod: Pod) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="GSSAPI"))
        assert shake.error_code == errors.UNSUPPORTED_SASL_MECHANISM
        assert "PLAIN" in shake.mechanisms
        assert raw.closed_by_peer()
    with RawKafka(sasl_pod.kafka_port) as raw:
        reply = raw.call(SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request[1](
            auth_bytes=_plain_token(FILE_USER, FILE_PASSWORD)
        ))  # fmt: skip
        assert reply.error_code == errors.ILLEGAL_SASL_STATE
        assert raw.closed_by_peer()


@pytest.mark.parametrize("token", [b"\xff\xfe", b"no separators", b"x\0alice\0pw"])
def test_malformed_plain_tokens_fail_cleanly(sasl_pod: Pod, token: bytes) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
        reply = raw.call(SASL_AUTHENTICATE, 0, SASL_AUTHENTICATE.request[0](auth_bytes=token))
        assert reply.error_code == errors.SASL_AUTHENTICATION_FAILED
        assert raw.closed_by_peer()


def test_a_request_pipelined_behind_authenticate_sees_its_outcome(sasl_pod: Pod) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
        raw.send(SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request[2](
            auth_bytes=_plain_token(REDIS_USER, REDIS_PASSWORD)
        ))  # fmt: skip
        raw.send(METADATA, 12, _metadata())
        assert raw.receive(SASL_AUTHENTICATE, 2).error_code == errors.NONE
        assert raw.receive(METADATA, 12).brokers


def test_handshake_v0_takes_raw_tokens_then_requests(sasl_pod: Pod) -> None:
    with RawKafka(sasl_pod.kafka_port) as raw:
        shake = raw.call(SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request[0](mechanism="PLAIN"))
        assert (shake.error_code, set(shake.mechanisms)) == (errors.NONE, set(MECHANISMS))
        assert raw.raw_exchange(_plain_token(FILE_USER, FILE_PASSWORD)) == b""  # PLAIN: empty
        assert raw.call(METADATA, 0, METADATA.request[0](topics=[])).brokers
    with RawKafka(sasl_pod.kafka_port) as raw:  # SCRAM: server-first, then server-final
        raw.call(SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request[0](mechanism="SCRAM-SHA-256"))
        client = ScramClient(["SCRAM-SHA-256"], REDIS_USER, REDIS_PASSWORD)
        client.set_server_first(raw.raw_exchange(client.get_client_first().encode()).decode())
        client.set_server_final(raw.raw_exchange(client.get_client_final().encode()).decode())
        assert raw.call(METADATA, 0, METADATA.request[0](topics=[])).brokers


def test_handshake_v0_with_a_wrong_password_closes_without_an_answer(sasl_pod: Pod) -> None:
    """v0's raw exchange has no error to carry: the pod closes, as Kafka does."""
    with RawKafka(sasl_pod.kafka_port) as raw:
        raw.call(SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request[0](mechanism="PLAIN"))
        raw.sock.sendall(frame(_plain_token(FILE_USER, "wrong")))
        assert raw.closed_by_peer()


def test_a_connection_that_never_authenticates_is_closed(sasl_pod: Pod) -> None:
    with RawKafka(sasl_pod.kafka_port, timeout=AUTH_TIMEOUT_S * 5) as raw:
        assert raw.closed_by_peer()


# --- SASL_SSL --------------------------------------------------------------------------------


def test_sasl_over_tls(redis_url: str, tmp_path: Path, topic: str) -> None:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    server.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    tls = ["--tls-cert", str(tmp_path / "server.pem"), "--tls-key", str(tmp_path / "server.key")]
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    pod = Pod(redis_url, *_auth_args(redis_url, tmp_path), *tls, connect=tls_connect(context))
    pod.start()
    try:
        for mechanism in ("PLAIN", "SCRAM-SHA-512"):
            config = {
                **_confluent_config(pod, mechanism, FILE_USER, FILE_PASSWORD),
                "security.protocol": "SASL_SSL", "ssl.ca.location": str(tmp_path / "ca.pem"),
            }  # fmt: skip
            assert _confluent_produce_one(config, topic) == [None], mechanism
    finally:
        pod.stop()
