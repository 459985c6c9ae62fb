"""The pod launcher the tests and benchmarks share (``tests/support/pods.py``): a start that
loses a race for a port it picked starts again on new ones, a port the caller gave is kept,
and a group of pods that fails half-way leaves none running."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.support.pods import RF1, Pod, start_all
from tests.support.waiting import port_open


def _occupy(port: int) -> socket.socket:
    """Another process's listener on ``port`` (what took a picked port before the pod)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.fixture
def pods() -> Iterator[list[Pod]]:
    made: list[Pod] = []
    yield made
    for pod in made:
        pod.stop()


def test_a_pod_whose_picked_ports_were_taken_starts_on_new_ones(
    redis_url: str, pods: list[Pod]
) -> None:
    pod = Pod(redis_url, *RF1, metrics=True)
    pods.append(pod)
    taken = (pod.kafka_port, pod.metrics_port)
    assert pod.metrics_port is not None
    with _occupy(pod.kafka_port), _occupy(pod.metrics_port):
        pod.start()
    assert pod.kafka_port not in taken and pod.metrics_port not in taken
    with pod.client() as client:
        assert client.ping() == "pong"
    assert port_open(pod.kafka_port) and port_open(pod.metrics_port)


def test_a_port_the_caller_gave_is_kept_and_its_start_fails(
    redis_url: str, pods: list[Pod]
) -> None:
    """Only ports the launcher picked are its to change: the caller may have told others."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        given = holder.getsockname()[1]
        pod = Pod(redis_url, *RF1, port=given)
        pods.append(pod)
        with pytest.raises(AssertionError, match="the port is in use"):
            pod.start()
    assert pod.port == given


def test_pods_started_together_that_fail_half_way_leave_none_running(
    redis_url: str, pods: list[Pod]
) -> None:
    first = Pod(redis_url, *RF1)
    broken = Pod(redis_url, *RF1, "--no-such-option")
    never = Pod(redis_url, *RF1)
    pods.extend([first, broken, never])
    with pytest.raises(AssertionError, match="pod exited"):
        start_all([first, broken, never])
    assert first.process is not None and first.process.poll() is not None
    assert not port_open(first.port) and not port_open(first.kafka_port)
    assert never.process is None
