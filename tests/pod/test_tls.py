"""TLS on the client listener, with and without client-certificate verification: a client
without TLS, without a certificate or with one from another CA gets nothing but the refusal
(no V1 byte ever reaches it)."""

from __future__ import annotations

import signal
import socket
import ssl
import uuid
from collections.abc import Callable

import pytest
import redis

from adapter.client import AsyncClient, Client
from adapter.client.tls import client_context
from adapter.v1 import protocol
from mapping.core.keys import Keys
from tests.support.pods import RF1, Pod
from tests.support.tls import Certs, tls_args, tls_connect
from tests.support.v1 import raw_connection
from tests.support.waiting import port_open, wait_until

StartPod = Callable[..., Pod]


def received_by(sock: socket.socket) -> bytes:
    """Everything the pod sends until it closes (or an error/timeout ends the read)."""
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (OSError, ssl.SSLError):
        pass
    return data


def test_tls_listener_serves_tls_clients(
    start_pod: StartPod, redis_url: str, certs: Certs, topic: str
) -> None:
    context = client_context(certs.ca)
    pod = start_pod(
        redis_url, *RF1, *tls_args(certs, verify_clients=False), connect=tls_connect(context)
    )
    with pod.client() as client:
        assert client.ping() == "pong"
        produced = client.produce(topic, "user1", "over tls")
        assert client.consume(topic, produced.partition, 0).records[-1][1] == b"over tls"

    async def async_roundtrip() -> str:
        async with await AsyncClient.connect("127.0.0.1", pod.port, ssl_context=context) as c:
            return (await c.request("PING")).payload

    import asyncio

    assert asyncio.run(async_roundtrip()) == "pong"

    # a plain-text client gets no V1 reply, and the pod goes on serving
    with socket.create_connection(("127.0.0.1", pod.port), timeout=10) as sock:
        sock.sendall(b"V1|1|PING|\n")
        assert b"V1|" not in received_by(sock)
    # a client that does not trust the pod's CA refuses the pod
    with pytest.raises(ssl.SSLCertVerificationError):
        Client("127.0.0.1", pod.port, timeout=10, ssl_context=client_context())
    with pod.client() as client:
        assert client.ping() == "pong"


def _refused(port: int, context: ssl.SSLContext) -> bytes:
    """What a client with this context gets after sending a request: the handshake
    fails, or (TLS 1.3: the server checks the client certificate after the client's side
    of the handshake is done) the connection is closed without a reply."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
    except (ssl.SSLError, OSError):
        raw.close()
        return b""
    with sock:
        try:
            sock.sendall(b"V1|1|PING|\nV1|2|PRODUCE|t k:v\n")
        except (ssl.SSLError, OSError):
            return b""
        return received_by(sock)


def test_client_certificates_verified(start_pod: StartPod, redis_url: str, certs: Certs) -> None:
    good = client_context(certs.ca, certs.client_cert, certs.client_key)
    pod = start_pod(
        redis_url, *RF1, *tls_args(certs, verify_clients=True), connect=tls_connect(good)
    )
    with pod.client() as client:
        assert client.ping() == "pong"
    no_cert = client_context(certs.ca)
    rogue = client_context(certs.ca, certs.rogue_cert, certs.rogue_key)
    for context in (no_cert, rogue):
        assert _refused(pod.port, context) == b""
    with socket.create_connection(("127.0.0.1", pod.port), timeout=10) as sock:
        sock.sendall(b"V1|1|PING|\n")
        assert b"V1|" not in received_by(sock)
    with pod.client() as client:  # the refusals did not disturb the pod
        assert client.ping() == "pong"
    assert "Traceback" not in pod.log()


def test_tls_and_auth_together(start_pod: StartPod, redis_url: str, certs: Certs, tmp_path) -> None:
    from mapping.security.auth import hash_password

    users = tmp_path / "users"
    users.write_text(f"app:{hash_password('pw')}\n")
    context = client_context(certs.ca)
    pod = start_pod(
        redis_url,
        *RF1,
        *tls_args(certs, verify_clients=False),
        "--auth-file",
        str(users),
        connect=tls_connect(context),
    )
    with pod.client() as client:
        assert client.request("PING").code == "AUTH_REQUIRED"
        client.auth("app", "pw")
        assert client.ping() == "pong"


def test_tls_key_without_cert_is_a_usage_error(redis_url: str, certs: Certs) -> None:
    import subprocess
    import sys

    from tests.support import ROOT

    result = subprocess.run(
        [sys.executable, "-m", "adapter", "serve", "--redis-url", redis_url,
         "--tls-key", str(certs.server_key)],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode != 0 and "--tls-key needs --tls-cert" in result.stderr


def test_sigterm_answers_what_a_tls_connection_sent(
    start_pod: StartPod, redis_url: str, certs: Certs, topic: str
) -> None:
    """Draining through TLS: a request waiting for replication when SIGTERM arrives is
    answered, then the pod closes the connection and exits 0."""
    context = client_context(certs.ca)
    prefix = f"s{uuid.uuid4().hex[:8]}"
    stopping = start_pod(
        redis_url, "--key-prefix", prefix, "--no-replicator", "--acks-timeout-ms", "60000",
        *tls_args(certs, verify_clients=False), connect=tls_connect(context),
    )  # fmt: skip
    helper = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator")
    store = redis.Redis.from_url(redis_url)
    sock = context.wrap_socket(
        raw_connection(stopping.port, timeout=60), server_hostname="127.0.0.1"
    )
    try:
        sock.sendall(f"V1|7|PRODUCE|{topic} user1:in-flight acks=all\n".encode())
        log = Keys(prefix).partition(topic, 2).log
        wait_until(lambda: store.xlen(log) == 1, timeout=30)
        stopping.signal(signal.SIGTERM)
        wait_until(lambda: not port_open(stopping.port), timeout=30)
        assert stopping.process is not None and stopping.process.poll() is None
        with helper.client() as follower:
            for replica in (1, 2):
                fetched = follower.request("REPLICA_FETCH", f"{topic} 2 {replica} {(1 << 53) - 1}")
                assert fetched.ok, fetched
        replies = [protocol.parse_response(line) for line in received_by(sock).splitlines()]
    finally:
        sock.close()
        store.close()
    assert [(r.correlation_id, r.ok) for r in replies] == [("7", True)], replies
    assert stopping.process.wait(timeout=30) == 0
