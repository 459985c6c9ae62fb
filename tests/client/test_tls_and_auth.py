"""Client, AsyncClient, Producer and GroupConsumer against a pod that serves TLS, verifies
client certificates and requires AUTH: the same options everywhere (`Endpoint`), every
connection authenticated (the consumer's heartbeat connection too), a wrong password
refused with AUTH_FAILED, and the pod serving on after every refusal."""

from __future__ import annotations

import asyncio
import ssl
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from adapter.client import AsyncClient, Client, Endpoint, RequestFailed
from adapter.client.group_consumer import GroupConsumer, Record
from adapter.client.producer import Producer
from adapter.client.tls import client_context
from mapping.security.auth import hash_password
from tests.support.pods import RF1, Pod
from tests.support.tls import Certs, tls_args
from tests.support.v1 import KEYS
from tests.support.waiting import wait_until

USER = "app"
PASSWORD = "s3cret pass|%"  # escaped on the wire: spaces, | and % work
REFUSED = "AUTH_FAILED: invalid user or password"


def options(certs: Certs, password: str = PASSWORD) -> dict[str, Any]:
    """The TLS (CA and client certificate) and AUTH options every client takes."""
    context = client_context(certs.ca, certs.client_cert, certs.client_key)
    return {"ssl_context": context, "user": USER, "password": password}


@pytest.fixture(scope="module")
def secure_pod(
    redis_url: str, certs: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pod]:
    users = tmp_path_factory.mktemp("users") / "users"
    users.write_text(f"{USER}:{hash_password(PASSWORD)}\n")
    pod = Pod(
        redis_url,
        *RF1,
        *tls_args(certs, verify_clients=True),
        "--auth-file",
        str(users),
        connect=lambda port: Client("127.0.0.1", port, timeout=10, **options(certs)),
    )
    pod.start()
    yield pod
    pod.stop()


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def test_client_and_async_client_authenticate_first(secure_pod: Pod, certs: Certs) -> None:
    with Client("127.0.0.1", secure_pod.port, **options(certs)) as client:
        assert client.ping() == "pong"
    tls_only = {"ssl_context": options(certs)["ssl_context"]}
    with Client("127.0.0.1", secure_pod.port, **tls_only) as anonymous:
        assert anonymous.request("PING").code == "AUTH_REQUIRED"

    async def async_ping() -> str:
        async with await AsyncClient.connect("127.0.0.1", secure_pod.port, **options(certs)) as c:
            return (await c.request("PING")).payload

    assert asyncio.run(async_ping()) == "pong"
    with pytest.raises(ValueError, match="user and password go together"):
        Endpoint("127.0.0.1", secure_pod.port, user=USER)
    assert PASSWORD not in repr(Endpoint(**options(certs)))


def test_wrong_password_is_refused_with_auth_failed(
    secure_pod: Pod, certs: Certs, topic: str, group: str
) -> None:
    wrong = options(certs, password="wrong")
    with pytest.raises(RequestFailed, match=REFUSED) as refused:
        Client("127.0.0.1", secure_pod.port, **wrong)
    assert refused.value.code == "AUTH_FAILED"

    async def async_connect() -> None:
        await AsyncClient.connect("127.0.0.1", secure_pod.port, **wrong)

    with pytest.raises(RequestFailed, match=REFUSED):
        asyncio.run(async_connect())

    with Producer("127.0.0.1", secure_pod.port, **wrong) as producer:
        future = producer.send(topic, "k", "v")
        with pytest.raises(RequestFailed, match=REFUSED):
            future.result(timeout=30)
    tls_only = {"ssl_context": options(certs)["ssl_context"]}
    with Producer("127.0.0.1", secure_pod.port, **tls_only) as anonymous:
        with pytest.raises(RequestFailed) as required:
            anonymous.send(topic, "k", "v").result(timeout=30)
        assert required.value.code == "AUTH_REQUIRED"

    consumer = GroupConsumer(group, topic, "a", port=secure_pod.port, **wrong)
    try:
        with pytest.raises(RequestFailed, match=REFUSED):
            consumer.join()
        with pytest.raises(RequestFailed, match=REFUSED):  # run ends: retrying cannot help
            consumer.run(lambda record: None)
    finally:
        consumer.close()
    with Client("127.0.0.1", secure_pod.port, **options(certs)) as client:
        assert client.ping() == "pong"  # the refusals left the pod serving
        assert client.committed(group, topic, 0) == 0
        for partition in range(3):  # nothing refused was written
            assert client.consume(topic, partition, 0).records == []


def test_producer_and_group_consumer_over_tls_with_auth(
    secure_pod: Pod, certs: Certs, topic: str, group: str, redis_url: str
) -> None:
    handled: list[Record] = []
    consumer = GroupConsumer(
        group,
        topic,
        "a",
        port=secure_pod.port,
        heartbeat_interval_s=0.05,
        idle_wait_s=0.02,
        **options(certs),
    )
    thread = threading.Thread(target=consumer.run, args=(handled.append,), daemon=True)
    thread.start()
    members = KEYS.group(group, topic).members
    store = redis.Redis.from_url(redis_url)
    try:
        wait_until(lambda: consumer.generation == 1, timeout=30)
        joined_at = int(store.hget(members, "a") or 0)
        # Nothing to commit yet: only HEARTBEATs, over the consumer's second connection
        # (TLS and AUTH of its own), move the member's last-seen time.
        wait_until(lambda: int(store.hget(members, "a") or 0) > joined_at, timeout=30)

        with Producer("127.0.0.1", secure_pod.port, linger_s=0.01, **options(certs)) as producer:
            futures = [producer.send(topic, f"k{i}", f"secure {i}") for i in range(40)]
            producer.flush()
        last: dict[int, int] = {}
        for reply in (f.result() for f in futures):
            last[reply.partition] = max(last.get(reply.partition, -1), reply.offset)
        wait_until(lambda: len(handled) == 40, timeout=30)
        assert sorted(r.value for r in handled) == sorted(f"secure {i}".encode() for i in range(40))
        with Client("127.0.0.1", secure_pod.port, **options(certs)) as client:
            wait_until(
                lambda: all(client.committed(group, topic, p) == o + 1 for p, o in last.items()),
                timeout=30,
            )
    finally:
        consumer.stop()
        thread.join(timeout=30)
        consumer.close()  # LEAVE, authenticated
    assert store.hlen(members) == 0
    store.close()


def test_tls_options(secure_pod: Pod, certs: Certs, topic: str) -> None:
    """``server_hostname`` is checked against the pod's certificate (issued for 127.0.0.1
    and localhost); ``insecure`` skips the checks; a CA the pod's certificate is not from
    fails the handshake."""
    auth = {"user": USER, "password": PASSWORD}
    context = options(certs)["ssl_context"]
    port = secure_pod.port
    with Client("127.0.0.1", port, ssl_context=context, server_hostname="localhost", **auth) as c:
        assert c.ping() == "pong"
    with pytest.raises(ssl.SSLCertVerificationError):
        Client("127.0.0.1", port, ssl_context=context, server_hostname="pod.example", **auth)
    with Producer(
        "127.0.0.1", port, ssl_context=context, server_hostname="pod.example", **auth
    ) as producer:
        with pytest.raises(ConnectionError) as failed:
            producer.send(topic, "k", "v").result(timeout=30)
        assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)

    untrusting = client_context(None, certs.client_cert, certs.client_key)
    with pytest.raises(ssl.SSLCertVerificationError):
        Client("127.0.0.1", port, ssl_context=untrusting, **auth)
    insecure = client_context(None, certs.client_cert, certs.client_key, insecure=True)
    with Client("127.0.0.1", port, ssl_context=insecure, **auth) as client:
        assert client.ping() == "pong"
    with pytest.raises(ValueError, match="insecure"):
        client_context(certs.ca, insecure=True)
