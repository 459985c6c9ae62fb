"""Kafka SASL OAUTHBEARER (``--oauth-jwks``) and KIP-368 re-authentication
(``--max-reauth-ms``, and a token's expiry): confluent-kafka, kafka-python and aiokafka with
bearer tokens, the token's subject as the principal Kafka's ACLs check, sessions that end
with their token and clients that re-authenticate on the same connection; V1 AUTH with a
token; refusals with a raw client."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trustme

from adapter.client import Client, RequestFailed
from adapter.kafka import errors
from adapter.kafka.versions import METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from mapping.core.errors import AUTH_FAILED, AUTH_REQUIRED
from mapping.security.acls import AclBinding, Operation, PatternType, Permission, ResourceType
from mapping.security.auth import auth_file_line
from tests.support.authorizing import authorizing_pod
from tests.support.kafka import RawKafka
from tests.support.oauth import AUDIENCE, ISSUER, TokenIssuer, write_jwks
from tests.support.pods import RF1, Pod, plain_client, scrape_metrics
from tests.support.waiting import wait_until

SERVICE, OTHER, ADMIN, PASSWORD = "svc-a", "svc-b", "admin", "admin pass"
PREFIX = "oa-"
BINDINGS = [
    AclBinding(rtype, PREFIX, PatternType.PREFIXED, f"User:{SERVICE}", "*", Operation.ALL,
               Permission.ALLOW)
    for rtype in (ResourceType.TOPIC, ResourceType.GROUP)
]  # fmt: skip


@pytest.fixture(scope="module")
def idp() -> TokenIssuer:
    return TokenIssuer("k1")


@pytest.fixture(scope="module")
def pod(
    redis_url: str, tmp_path_factory: pytest.TempPathFactory, idp: TokenIssuer
) -> Iterator[Pod]:
    """Password users (the super user) and bearer tokens side by side, under ACLs."""
    folder = tmp_path_factory.mktemp("oauth")
    jwks = write_jwks(folder / "jwks.json", idp)
    oauth = ["--oauth-jwks", str(jwks), "--oauth-issuer", ISSUER, "--oauth-audience", AUDIENCE]
    with authorizing_pod(
        redis_url, folder, user="nobody", admin=ADMIN, password=PASSWORD, bindings=BINDINGS,
        topics=(f"{PREFIX}orders", f"{PREFIX}v1"), extra_args=oauth, metrics=True,
    ) as started:  # fmt: skip
        yield started


def _confluent_config(pod: Pod, oauth_cb: object) -> dict:
    return {
        "bootstrap.servers": pod.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


class _Tokens:
    """confluent-kafka's ``oauth_cb``: a new token for ``subject`` at each call, with the
    expiry librdkafka wants (epoch seconds) the token's own ``exp``; counted."""

    def __init__(self, idp: TokenIssuer, subject: str, lifetime_s: int = 300) -> None:
        self.idp, self.subject, self.lifetime_s = idp, subject, lifetime_s
        self.calls = 0

    def __call__(self, _config: str) -> tuple[str, float]:
        self.calls += 1
        expires = int(time.time()) + self.lifetime_s
        return self.idp.token(self.subject, exp=expires), float(expires)


# --- real clients ----------------------------------------------------------------------------


def test_confluent_kafka_produces_and_consumes_with_a_bearer_token(
    pod: Pod, idp: TokenIssuer
) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"{PREFIX}orders"
    producer = Producer({**_confluent_config(pod, _Tokens(idp, SERVICE)), "acks": "all"})
    delivered: list = []
    for n in range(5):
        producer.produce(topic, f"bt-{n}".encode(), partition=0,
                         on_delivery=lambda e, m: delivered.append(e))  # fmt: skip
    assert producer.flush(15) == 0
    assert delivered == [None] * 5
    consumer = Consumer({
        **_confluent_config(pod, _Tokens(idp, SERVICE)), "group.id": f"{PREFIX}readers",
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                if message.value().startswith(b"bt-"):  # (not other tests' records)
                    values.append(message.value())
    finally:
        consumer.close()
    assert values == [f"bt-{n}".encode() for n in range(5)]


def test_the_tokens_subject_is_the_principal_the_acls_check(pod: Pod, idp: TokenIssuer) -> None:
    from confluent_kafka import KafkaError, Producer

    producer = Producer({**_confluent_config(pod, _Tokens(idp, OTHER)), "acks": "all",
                         "message.timeout.ms": 10000})  # fmt: skip
    delivered: list = []
    producer.produce(f"{PREFIX}orders", b"x", on_delivery=lambda e, m: delivered.append(e))
    producer.flush(15)
    assert [e.code() for e in delivered] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def _sasl_events(pod: Pod) -> dict[tuple[str, str], float]:
    """The pod's ``adapter_kafka_sasl_events`` so far: (event, mechanism) -> count."""
    assert pod.metrics_port is not None
    return {
        (dict(labels)["event"], dict(labels)["mechanism"]): value
        for (name, labels), value in scrape_metrics(pod.metrics_port).items()
        if name == "adapter_kafka_sasl_events_total"
    }


def _events_since(pod: Pod, before: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    after = _sasl_events(pod)
    return {
        key: after[key] - before.get(key, 0.0) for key in after if after[key] > before.get(key, 0.0)
    }


def test_confluent_kafka_re_authenticates_before_its_token_expires(
    pod: Pod, idp: TokenIssuer
) -> None:
    """Tokens of 12 s: librdkafka fetches a new one at 80% of its life (checked once a
    second) and re-authenticates at 90% of the session's: the pod counts the
    re-authentications, and no connection outlives its session."""
    from confluent_kafka import Producer

    tokens = _Tokens(idp, SERVICE, lifetime_s=12)
    before = _sasl_events(pod)
    producer = Producer({**_confluent_config(pod, tokens), "acks": "all", "linger.ms": 0})
    delivered: list = []
    deadline = time.monotonic() + 14  # past the first re-authentication
    while time.monotonic() < deadline:
        producer.produce(f"{PREFIX}orders", b"r", on_delivery=lambda e, m: delivered.append(e))
        time.sleep(0.05)
        producer.poll(0)
    assert producer.flush(15) == 0
    assert delivered and all(e is None for e in delivered)
    assert tokens.calls >= 2  # the first token and at least one more
    events = _events_since(pod, before)
    assert events.get(("reauthenticated", "OAUTHBEARER"), 0) >= 1, events
    assert ("session_expired", "OAUTHBEARER") not in events, events


def test_kafka_python_authenticates_and_re_authenticates(pod: Pod, idp: TokenIssuer) -> None:
    from kafka import KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def __init__(self) -> None:
            self.calls = 0

        def token(self) -> str:
            self.calls += 1
            return idp.token(SERVICE, lifetime_s=3)

    provider = Provider()
    before = _sasl_events(pod)
    producer = KafkaProducer(
        bootstrap_servers=pod.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=provider,
        request_timeout_ms=10000,
    )  # fmt: skip
    try:
        for _ in range(12):  # 6 s: twice the token's life
            assert producer.send(f"{PREFIX}orders", b"k").get(timeout=15).topic
            time.sleep(0.5)
    finally:
        producer.close()
    assert provider.calls >= 3
    events = _events_since(pod, before)
    assert events.get(("reauthenticated", "OAUTHBEARER"), 0) >= 2, events
    assert ("session_expired", "OAUTHBEARER") not in events, events


def test_aiokafka_authenticates_with_a_bearer_token(pod: Pod, idp: TokenIssuer) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return idp.token(SERVICE)

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=pod.bootstrap, security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Provider(),
            request_timeout_ms=10000,
        )  # fmt: skip
        await producer.start()
        try:
            sent = await producer.send_and_wait(f"{PREFIX}orders", b"v", partition=1)
            assert sent.partition == 1
        finally:
            await producer.stop()

    asyncio.run(run())


def test_confluent_kafka_with_an_expired_token_gets_an_authentication_error(
    pod: Pod, idp: TokenIssuer
) -> None:
    from confluent_kafka import KafkaError, Producer

    seen: list = []
    # expired 2 minutes ago (the clock skew allows 30 s); librdkafka only checks the expiry
    # it is told, so the callback says it is still good
    producer = Producer({
        **_confluent_config(pod, lambda _: (idp.token(SERVICE, -120), time.time() + 60)),
        "error_cb": seen.append,
    })  # fmt: skip

    def refused() -> bool:
        producer.poll(0.1)
        return any(e.code() == KafkaError._AUTHENTICATION for e in seen)

    wait_until(refused, timeout=15)
    assert any("token expired" in e.str() for e in seen), seen


# --- raw client: sessions and refusals -------------------------------------------------------


def _message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def _authenticate(raw: RawKafka, token: str, mechanism: str = "OAUTHBEARER") -> object:
    shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism=mechanism))
    assert shake.error_code == errors.NONE
    auth_bytes = _message(token) if mechanism == "OAUTHBEARER" else token.encode()
    return raw.call(SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request[2](auth_bytes=auth_bytes))


METADATA_ALL = METADATA.request[12](topics=None, allow_auto_topic_creation=False)


def _metadata(raw: RawKafka) -> object:
    return raw.call(METADATA, 12, METADATA_ALL)


def test_a_session_lasts_as_long_as_its_token_and_renews_on_the_connection(
    pod: Pod, idp: TokenIssuer
) -> None:
    with RawKafka(pod.kafka_port) as raw:
        first = _authenticate(raw, idp.token(SERVICE, lifetime_s=3))
        assert first.error_code == errors.NONE
        assert 1000 < first.session_lifetime_ms <= 3000
        assert _metadata(raw).brokers
        # a second exchange within a second of the last: refused (Kafka's rule against
        # re-authentication loops); the session goes on
        soon = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="OAUTHBEARER"))
        assert soon.error_code == errors.ILLEGAL_SASL_STATE
        assert _metadata(raw).brokers
        time.sleep(1.0)
        renewed = _authenticate(raw, idp.token(SERVICE, lifetime_s=3600))
        assert renewed.error_code == errors.NONE
        assert 3_590_000 < renewed.session_lifetime_ms <= 3_600_000
        time.sleep(2.2)  # past the first token: the renewed session goes on
        assert _metadata(raw).brokers
    with RawKafka(pod.kafka_port) as raw:
        assert _authenticate(raw, idp.token(SERVICE, lifetime_s=2)).error_code == errors.NONE
        time.sleep(2.2)
        raw.send(METADATA, 12, METADATA_ALL)
        assert raw.closed_by_peer()  # as Kafka: the session is over, the connection closed


def test_re_authentication_keeps_the_principal_and_the_mechanism(
    pod: Pod, idp: TokenIssuer
) -> None:
    with RawKafka(pod.kafka_port) as raw:
        assert _authenticate(raw, idp.token(SERVICE)).error_code == errors.NONE
        time.sleep(1.0)  # (re-authentication waits a second after the last exchange)
        other = _authenticate(raw, idp.token(OTHER))
        assert other.error_code == errors.SASL_AUTHENTICATION_FAILED
        assert other.error_message == (
            f"Cannot change principals during re-authentication from User.{SERVICE}: User.{OTHER}"
        )
        assert raw.closed_by_peer()
    with RawKafka(pod.kafka_port) as raw:
        assert _authenticate(raw, idp.token(SERVICE)).error_code == errors.NONE
        time.sleep(1.0)
        shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
        assert shake.error_code == errors.UNSUPPORTED_SASL_MECHANISM
        assert shake.mechanisms == ["OAUTHBEARER"]
        assert raw.closed_by_peer()


@pytest.mark.parametrize(
    ("make_token", "message"),
    [
        (lambda idp: idp.token(SERVICE, lifetime_s=-120), "token expired"),
        (lambda idp: idp.token(SERVICE, aud="elsewhere"), "Audience doesn't match"),
        (lambda idp: TokenIssuer("k1").token(SERVICE), "signature does not verify"),
        (lambda idp: "not-a-jwt", "malformed token"),
    ],
)
def test_a_bad_token_answers_sasl_authentication_failed_then_closes(
    pod: Pod, idp: TokenIssuer, make_token: object, message: str
) -> None:
    with RawKafka(pod.kafka_port) as raw:
        reply = _authenticate(raw, make_token(idp))  # type: ignore[operator]
        assert reply.error_code == errors.SASL_AUTHENTICATION_FAILED
        assert message in reply.error_message
        assert raw.closed_by_peer()


def test_a_malformed_message_and_an_authorization_id_of_someone_else(
    pod: Pod, idp: TokenIssuer
) -> None:
    for auth_bytes, message in [
        (b"n,,auth=Bearer x", "malformed OAUTHBEARER"),
        (f"n,a={OTHER},\x01auth=Bearer {idp.token(SERVICE)}\x01\x01".encode(),
         "authorization id"),
    ]:  # fmt: skip
        with RawKafka(pod.kafka_port) as raw:
            raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="OAUTHBEARER"))
            reply = raw.call(SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request[1](
                auth_bytes=auth_bytes
            ))  # fmt: skip
            assert reply.error_code == errors.SASL_AUTHENTICATION_FAILED
            assert message in reply.error_message
            assert raw.closed_by_peer()


# --- V1 --------------------------------------------------------------------------------------


def test_v1_auth_takes_a_token_until_it_expires(pod: Pod, idp: TokenIssuer) -> None:
    with Client("127.0.0.1", pod.port, timeout=10) as v1:
        with pytest.raises(RequestFailed) as refused:
            v1.auth(OTHER, idp.token(SERVICE))
        assert refused.value.code == AUTH_FAILED
        with pytest.raises(RequestFailed) as refused:
            v1.auth(SERVICE, idp.token(SERVICE, lifetime_s=-120))
        assert refused.value.code == AUTH_FAILED
        v1.auth(SERVICE, idp.token(SERVICE, lifetime_s=2))
        assert v1.produce(f"{PREFIX}v1", "k", "v").offset >= 0
        time.sleep(2.2)
        with pytest.raises(RequestFailed) as expired:
            v1.ping()
        assert expired.value.code == AUTH_REQUIRED
        v1.auth(SERVICE, idp.token(SERVICE))
        assert v1.ping() == "pong"
    with Client("127.0.0.1", pod.port, timeout=10) as v1:  # passwords still work beside tokens
        v1.auth(ADMIN, PASSWORD)
        assert v1.ping() == "pong"


# --- --max-reauth-ms with passwords; a pod of tokens alone, its JWKS over HTTPS ---------------


def test_max_reauth_ms_bounds_password_sessions(redis_url: str, tmp_path: Path, topic: str) -> None:
    users = tmp_path / "users"
    users.write_text(auth_file_line(ADMIN, PASSWORD) + "\n")
    # (a key prefix of its own: the default one's broker registry may list other tests' pods)
    pod = Pod(redis_url, *RF1, "--key-prefix", f"reauth-{uuid.uuid4().hex[:8]}",
              "--auth-file", str(users), "--max-reauth-ms", "3000",
              connect=plain_client, metrics=True)  # fmt: skip
    pod.start()
    try:
        plain = f"\0{ADMIN}\0{PASSWORD}"
        with RawKafka(pod.kafka_port) as raw:
            assert _authenticate(raw, plain, "PLAIN").session_lifetime_ms == 3000
            time.sleep(3.2)
            raw.send(METADATA, 12, METADATA_ALL)
            assert raw.closed_by_peer()
        from confluent_kafka import Producer

        before = _sasl_events(pod)
        producer = Producer({
            "bootstrap.servers": pod.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": ADMIN, "sasl.password": PASSWORD,
            "linger.ms": 0,
        })  # fmt: skip
        delivered: list = []
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            producer.produce(topic, b"r", on_delivery=lambda e, m: delivered.append(e))
            producer.poll(0.25)
        assert producer.flush(15) == 0
        assert delivered and all(e is None for e in delivered)
        events = _events_since(pod, before)
        assert events.get(("reauthenticated", "SCRAM-SHA-512"), 0) >= 2, events
        assert ("session_expired", "SCRAM-SHA-512") not in events, events
    finally:
        pod.stop()


class _Jwks(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


def test_tokens_alone_with_the_jwks_fetched_over_https(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idp: TokenIssuer
) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Jwks)
    _Jwks.body = json.dumps({"keys": [idp.jwk()]}).encode()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # the pod trusts the CA
    url = f"https://127.0.0.1:{server.server_address[1]}/jwks"
    pod = Pod(redis_url, *RF1, "--key-prefix", f"jwks-{uuid.uuid4().hex[:8]}", "--oauth-jwks", url,
              connect=plain_client)  # fmt: skip
    pod.start()
    try:
        with RawKafka(pod.kafka_port) as raw:
            shake = raw.call(SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request[1](mechanism="PLAIN"))
            assert (shake.error_code, shake.mechanisms) == (
                errors.UNSUPPORTED_SASL_MECHANISM, ["OAUTHBEARER"]
            )  # fmt: skip
        with RawKafka(pod.kafka_port) as raw:  # no issuer or audience configured: any
            reply = _authenticate(raw, idp.token("anyone", iss="https://other", aud=None))
            assert reply.error_code == errors.NONE
            assert _metadata(raw).brokers
        with RawKafka(pod.kafka_port) as raw:
            reply = _authenticate(raw, TokenIssuer("k7").token("anyone"))
            assert reply.error_code == errors.SASL_AUTHENTICATION_FAILED
            assert "no signing key 'k7'" in reply.error_message
    finally:
        pod.stop()
        server.shutdown()
