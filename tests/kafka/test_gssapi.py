"""Kafka SASL GSSAPI (``--kerberos-keytab``) against a real MIT KDC: kafka-python, aiokafka
and Debian's kcat (librdkafka with Cyrus SASL) authenticate with Kerberos tickets, and a raw
client with SaslHandshake v0's unframed tokens; the principal-to-local rules name the user
Kafka's ACLs check; tickets the pod cannot read and tokens that are not tickets are
refused."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import TopicAuthorizationFailedError

from adapter.kafka import errors
from adapter.kafka.framing import frame
from adapter.kafka.versions import METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from tests.kafka.debian_tools import require
from tests.support.authorizing import authorizing_pod
from tests.support.kafka import RawKafka
from tests.support.kerberos import REALM, Kdc, log_in, realm_env, running_kdc
from tests.support.pods import Pod, scrape_metrics

PREFIX = "krb-"
ORDERS, ETL_TOPIC = f"{PREFIX}orders", f"{PREFIX}etl"
# etl/<anything> is the user svc-etl; everyone else of the realm their first component
RULES = "RULE:[2:$1](etl)s/^/svc-/,DEFAULT"
BINDINGS = [
    *(
        AclBinding(rtype, PREFIX, PatternType.PREFIXED, "User:alice", "*", Operation.ALL,
                   Permission.ALLOW)
        for rtype in (ResourceType.TOPIC, ResourceType.GROUP)
    ),
    *(
        AclBinding(ResourceType.TOPIC, ETL_TOPIC, PatternType.LITERAL, "User:svc-etl", "*",
                   operation, Permission.ALLOW)
        for operation in (Operation.WRITE, Operation.DESCRIBE)
    ),
]  # fmt: skip


SESSION_MS = 2000  # --max-reauth-ms: clients re-authenticate with a new ticket exchange


@pytest.fixture(scope="module")
def kdc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kdc]:
    pytest.importorskip("gssapi")
    with running_kdc(tmp_path_factory.mktemp("kdc")) as started, realm_env(started):
        yield started


@pytest.fixture(scope="module")
def pod(redis_url: str, kdc: Kdc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    """Kerberos beside password users, under ACLs; its keytab holds kafka/127.0.0.1, the
    service principal clients ask tickets for (they connect to 127.0.0.1)."""
    keytab = kdc.keytab("kafka/127.0.0.1", "pod")
    kerberos = ["--kerberos-keytab", str(keytab), "--kerberos-principal-to-local-rules", RULES,
                "--max-reauth-ms", str(SESSION_MS)]  # fmt: skip
    with authorizing_pod(
        redis_url, tmp_path_factory.mktemp("gssapi"), user="nobody", admin="admin",
        password="admin pass", bindings=BINDINGS, topics=(ORDERS, ETL_TOPIC),
        extra_args=kerberos, metrics=True,
    ) as started:  # fmt: skip
        yield started


def _kafka_python(pod: Pod, **extra: object) -> dict[str, object]:
    return {
        "bootstrap_servers": pod.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kafka",
        **extra,
    }


def _produce_and_read(pod: Pod, topic: str, tag: str, **extra: object) -> list[bytes]:
    producer = KafkaProducer(**_kafka_python(pod, **extra), acks="all")
    try:
        for n in range(3):
            producer.send(topic, f"{tag}-{n}".encode(), partition=0).get(timeout=15)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        **_kafka_python(pod, **extra),
        group_id=f"{PREFIX}{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        return [m.value for m in consumer if m.value.startswith(tag.encode())]
    finally:
        consumer.close()


def test_kafka_python_authenticates_with_a_ticket(pod: Pod, kdc: Kdc) -> None:
    log_in(kdc, "alice")
    tag = uuid.uuid4().hex[:8]
    assert _produce_and_read(pod, ORDERS, tag) == [f"{tag}-{n}".encode() for n in range(3)]


def _gssapi_events(pod: Pod) -> dict[str, float]:
    assert pod.metrics_port is not None
    return {
        dict(labels)["event"]: value
        for (name, labels), value in scrape_metrics(pod.metrics_port).items()
        if name == "adapter_kafka_sasl_events_total" and dict(labels)["mechanism"] == "GSSAPI"
    }


def test_kafka_python_re_authenticates_on_its_connections(pod: Pod, kdc: Kdc) -> None:
    """KIP-368 with GSSAPI: sessions of --max-reauth-ms; the client goes through the
    exchange again on the same connection, and goes on producing."""
    log_in(kdc, "alice")
    before = _gssapi_events(pod)
    producer = KafkaProducer(**_kafka_python(pod), acks="all")
    try:
        deadline = time.monotonic() + 2.5 * SESSION_MS / 1000
        while time.monotonic() < deadline:
            producer.send(ORDERS, b"again", partition=0).get(timeout=15)
            time.sleep(0.1)
    finally:
        producer.close()
    after = _gssapi_events(pod)
    assert after.get("reauthenticated", 0) - before.get("reauthenticated", 0) >= 1, after
    assert after.get("session_expired", 0) == before.get("session_expired", 0), after


def test_handshake_v0_raw_tokens_end_on_the_clients_message(pod: Pod, kdc: Kdc) -> None:
    """After SaslHandshake v0 the tokens go unframed; GSSAPI's exchange ends on the client's
    message, and Kafka's broker sends nothing after it (aiokafka expects nothing either): the
    next frame is the answer to the next request, not an empty token."""
    import gssapi

    log_in(kdc, "alice")
    target = gssapi.Name("kafka@127.0.0.1", gssapi.NameType.hostbased_service)
    client = gssapi.SecurityContext(name=target, usage="initiate")
    with RawKafka(pod.kafka_port) as raw:
        shake = raw.call(SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request[0](mechanism="GSSAPI"))
        assert shake.error_code == errors.NONE
        assert client.step(raw.raw_exchange(client.step(None))) is None  # AP-REQ, AP-REP
        offer = client.unwrap(raw.raw_exchange(b"")).message
        assert offer == b"\x01\x01\x00\x00"
        raw.sock.sendall(frame(client.wrap(b"\x01" + offer[1:], False).message))
        assert raw.call(METADATA, 0, METADATA.request[0](topics=[ORDERS])).topics


def test_the_rules_name_the_user_the_acls_check(pod: Pod, kdc: Kdc) -> None:
    """etl/batch@REALM is User:svc-etl by the first rule: it may write krb-etl (its ACLs),
    not krb-orders (alice's)."""
    log_in(kdc, "etl/batch")
    producer = KafkaProducer(**_kafka_python(pod), acks="all", max_block_ms=10_000)
    try:
        metadata = producer.send(ETL_TOPIC, b"from etl", partition=0).get(timeout=15)
        assert metadata.topic == ETL_TOPIC
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(ORDERS, b"not allowed", partition=0).get(timeout=15)
    finally:
        producer.close()


def test_aiokafka_authenticates_with_a_ticket(pod: Pod, kdc: Kdc) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    log_in(kdc, "alice")
    tag = uuid.uuid4().hex[:8]
    config = {
        "bootstrap_servers": pod.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "GSSAPI",
        "sasl_kerberos_service_name": "kafka",
    }

    async def body() -> list[bytes]:
        producer = AIOKafkaProducer(**config, acks="all")
        await producer.start()
        try:
            for n in range(3):
                await producer.send_and_wait(ORDERS, f"{tag}-{n}".encode(), partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            ORDERS, **config, group_id=f"{PREFIX}aio-{tag}", auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(20):
                while len(got) < 3:
                    message = await consumer.getone()
                    if message.value.startswith(tag.encode()):
                        got.append(message.value)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(body()) == [f"{tag}-{n}".encode() for n in range(3)]


def test_kcat_authenticates_with_its_keytab(pod: Pod, kdc: Kdc) -> None:
    """librdkafka (Debian's, with Cyrus SASL's GSSAPI plugin) runs kinit with the keytab
    and principal it is given, as its users configure it."""
    kcat = require("kcat", "kcat")
    principal = "alice"
    keytab = kdc.keytab(principal, "kcat-alice")
    env = {**os.environ, **kdc.env, "KRB5CCNAME": f"FILE:{kdc.folder / 'kcat.ccache'}"}
    config = [
        "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=GSSAPI",
        "-X", "sasl.kerberos.service.name=kafka", "-X", f"sasl.kerberos.keytab={keytab}",
        "-X", f"sasl.kerberos.principal={principal}@{REALM}",
    ]  # fmt: skip
    tag = uuid.uuid4().hex[:8]
    lines = "".join(f"{tag}-{n}\n" for n in range(3))
    produced = subprocess.run(
        [kcat, "-b", pod.bootstrap, "-P", "-t", ORDERS, "-p", "0", *config],
        input=lines, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    read = subprocess.run(
        [kcat, "-b", pod.bootstrap, "-C", "-t", ORDERS, "-p", "0", "-o", "beginning", "-e",
         *config],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert [v for v in read.stdout.split() if v.startswith(tag)] == [f"{tag}-{n}" for n in range(3)]


def _first_token(service: str) -> bytes:
    import gssapi

    target = gssapi.Name(f"{service}@127.0.0.1", gssapi.NameType.hostbased_service)
    return gssapi.SecurityContext(name=target, usage="initiate").step(None)


@pytest.mark.parametrize("token", ["ticket for another service", "not a ticket"])
def test_tickets_for_another_service_and_bad_tokens_are_refused(
    pod: Pod, kdc: Kdc, token: str
) -> None:
    """SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection closes: a
    ticket for other/127.0.0.1 (a real one, but the pod has no key for it), or bytes that
    are no Kerberos token."""
    kdc.keytab("other/127.0.0.1", "other-service")
    log_in(kdc, "alice")
    auth_bytes = _first_token("other") if token.startswith("ticket") else b"\x60not a ticket"
    with RawKafka(pod.kafka_port) as raw:
        shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="GSSAPI"))
        assert shake.error_code == errors.NONE and "GSSAPI" in shake.mechanisms
        body = SASL_AUTHENTICATE.request[2](auth_bytes=auth_bytes)
        refused = raw.call(SASL_AUTHENTICATE, 2, body)
        assert refused.error_code == errors.SASL_AUTHENTICATION_FAILED
        assert refused.error_message.startswith(
            "Authentication failed during authentication due to invalid credentials with SASL"
            " mechanism GSSAPI"
        )
        assert raw.closed_by_peer()
