"""A Kafka client pointed at the V1 port by mistake: the pod closes that connection at once
(no half-open connection waiting for a line that never comes, no V1 reply misread as a
frame size), logs a line naming the Kafka port (once a minute per host), and goes on serving."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from adapter.kafka import protocol as kafka_protocol
from adapter.kafka.versions import API_VERSIONS
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

ESTABLISHED, CLOSE_WAIT = "01", "08"


def _api_versions_frame() -> bytes:
    body = API_VERSIONS.request[3](client_software_name="raw", client_software_version="1")
    return kafka_protocol.encode_request(API_VERSIONS, 3, body, 1, "raw-client")


def _pod_side_states(port: int) -> list[str]:
    """TCP states of the sockets the pod accepted on ``port`` (/proc/net/tcp, IPv4)."""
    states = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if int(local.split(":")[1], 16) == port and not remote.endswith(":0000"):
            states.append(state)
    return states


def _no_connection_left(port: int) -> bool:
    states = _pod_side_states(port)
    return ESTABLISHED not in states and CLOSE_WAIT not in states


def _refusals(pod: Pod, since: int) -> list[str]:
    return [line for line in pod.log()[since:].splitlines() if "a Kafka client (" in line]


def _closed_by_pod(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _answers_ping(pod: Pod) -> bool:
    with pod.client(timeout=5) as client:
        return client.ping() == "pong"


@pytest.fixture
def lone_pod(start_pod: Callable[..., Pod], redis_url: str) -> Pod:
    """A pod of the test's own: its log holds only this test's lines."""
    return start_pod(redis_url, *RF1)


def test_a_kafka_frame_closes_the_connection_with_a_log_line(lone_pod: Pod) -> None:
    since = len(lone_pod.log())
    frame = _api_versions_frame()
    with socket.create_connection(("127.0.0.1", lone_pod.port), timeout=5) as sock:
        sock.sendall(frame)
        assert _closed_by_pod(sock)
    # A frame whose first bytes come alone is told apart once its header is complete.
    with socket.create_connection(("127.0.0.1", lone_pod.port), timeout=5) as sock:
        sock.sendall(frame[:3])
        sock.sendall(frame[3:])
        assert _closed_by_pod(sock)
    wait_until(lambda: _refusals(lone_pod, since))
    (line,) = _refusals(lone_pod, since)  # the second one within the minute: not logged
    assert "ApiVersions v3 request" in line
    assert f"V1 port {lone_pod.port}" in line
    assert f"connect to port {lone_pod.kafka_port} (--kafka-port)" in line
    assert _answers_ping(lone_pod)
    wait_until(lambda: _no_connection_left(lone_pod.port))


def test_v1_clients_are_not_mistaken(lone_pod: Pod) -> None:
    since = len(lone_pod.log())
    with socket.create_connection(("127.0.0.1", lone_pod.port), timeout=5) as sock:
        sock.sendall(b"V1")  # a line's first bytes alone
        sock.sendall(b"|1|PING|\n")
        assert sock.recv(100) == b"V1|1|OK|pong\n"
    with socket.create_connection(("127.0.0.1", lone_pod.port), timeout=5) as sock:
        sock.sendall(b"\x00\n")  # short binary junk with a line end: a V1 parse error
        assert sock.recv(100).startswith(b"V1|0|ERR|BAD_REQUEST|")
    assert _refusals(lone_pod, since) == []


def test_confluent_kafka_on_the_v1_port(lone_pod: Pod) -> None:
    from confluent_kafka import Producer

    since = len(lone_pod.log())
    errors: list[str] = []
    reports: list[object] = []
    producer = Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{lone_pod.port}",
            "error_cb": lambda error: errors.append(str(error)),
            "message.timeout.ms": 3000,
            "log_level": 0,  # its own lines about each closed connection
        }
    )
    producer.produce("orders", b"created", on_delivery=lambda err, _msg: reports.append(err))
    producer.poll(0)
    wait_until(lambda: _refusals(lone_pod, since))
    assert "ApiVersions" in _refusals(lone_pod, since)[0]
    # While the client retries, the pod holds none of its connections open.
    wait_until(lambda: _no_connection_left(lone_pod.port), timeout=2)
    producer.flush(10)
    assert len(reports) == 1 and reports[0] is not None  # not delivered: no Kafka there
    assert errors  # librdkafka saw its connections closed
    assert _answers_ping(lone_pod)
    del producer


def test_kafka_python_on_the_v1_port(lone_pod: Pod) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    since = len(lone_pod.log())
    outcome: list[BaseException] = []

    def connect() -> None:
        try:
            KafkaProducer(bootstrap_servers=f"127.0.0.1:{lone_pod.port}", bootstrap_timeout_ms=5000)
        except BaseException as exc:  # noqa: BLE001  (looked at below)
            outcome.append(exc)

    client = threading.Thread(target=connect)
    client.start()
    wait_until(lambda: _refusals(lone_pod, since))
    wait_until(lambda: _no_connection_left(lone_pod.port), timeout=2)  # while it tries
    client.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], KafkaError)  # no broker answered
    assert _answers_ping(lone_pod)


def test_refusals_are_logged_once_a_minute_per_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter.v1 import connection

    now = [1000.0]
    monkeypatch.setattr(connection.time, "monotonic", lambda: now[0])
    refusals = connection._RefusalLog()
    assert refusals.count("10.0.0.1") == 0  # the first: logged
    assert [refusals.count("10.0.0.1") for _ in range(5)] == [None] * 5
    assert refusals.count("10.0.0.2") == 0  # another host: its own minute
    now[0] += 61
    assert refusals.count("10.0.0.1") == 5  # logged, with the five in between
    assert refusals.count("10.0.0.1") is None
