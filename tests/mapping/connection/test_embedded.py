"""`mapping.connection.embedded.RedisProcess` options (the process itself:
tests/pod/test_pods.py)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
import redis

from mapping.connection import embedded
from mapping.connection.embedded import DataDirInUse, RedisProcess, RedisServerError, free_port


def test_appendfsync_choices(tmp_path: Path) -> None:
    for choice in ("always", "everysec", "no"):
        assert RedisProcess(tmp_path, appendfsync=choice).appendfsync == choice
    with pytest.raises(ValueError):
        RedisProcess(tmp_path, appendfsync="sometimes")


def test_defaults(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path)
    assert server.appendonly and server.appendfsync == "everysec" and server.die_with_parent
    assert server.url == f"redis://127.0.0.1:{server.port}/0"


def test_appendfsync_always_is_applied(tmp_path: Path) -> None:
    with RedisProcess(tmp_path, appendfsync="always") as server:
        client = redis.Redis(port=server.port)
        assert client.config_get("appendfsync")["appendfsync"] == "always"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        client.close()


def _occupy(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_picked_port_taken_before_the_start_is_picked_again(tmp_path: Path) -> None:
    """CI once lost a cluster fixture to this race: another process took the free port (or
    the bus port) between the pick and redis-server's bind."""
    server = RedisProcess(tmp_path, appendonly=False, cluster_bus=True)
    first_port, first_bus = server.port, server.bus_port
    assert first_bus is not None
    with _occupy(first_port), _occupy(first_bus):
        with server:
            assert server.port != first_port and server.bus_port != first_bus
            client = redis.Redis(port=server.port)
            assert client.ping()
            client.close()


def test_a_port_given_and_taken_fails_with_redis_own_words(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path, port=free_port(), appendonly=False)
    with _occupy(server.port), pytest.raises(RedisServerError, match="Address already in use"):
        server.start()
    assert server.process is None


# --- free_port: each port once per process ----------------------------------------------------


def test_free_port_never_gives_a_port_twice() -> None:
    """Thousands of picks (more than a test run's pods and servers take): all distinct, though
    the OS hands a closed port out again whenever it likes."""
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)


def test_free_port_never_gives_a_port_twice_across_threads() -> None:
    picked: list[list[int]] = []

    def pick() -> None:
        picked.append([free_port() for _ in range(200)])

    threads = [threading.Thread(target=pick) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ports = [port for batch in picked for port in batch]
    assert len(ports) == 8 * 200 and len(set(ports)) == len(ports)


class _OsPorts:
    """A stand-in for ``socket.socket`` whose port-0 binds get ``ports`` in order."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def __call__(self, *args: object) -> _OsPorts:
        return self

    def __enter__(self) -> _OsPorts:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def bind(self, address: tuple[str, int]) -> None:
        self.bound = self.ports.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.bound)


def test_free_port_asks_again_when_the_os_repeats_a_port(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's `make test` lost a pod to this: its --metrics-port and --kafka-port, picked one
    after the other, were the same port."""
    given = free_port()
    # ports no pick gave yet (privileged ones: nothing real binds them here)
    one, two = [port for port in range(1, 1024) if port not in embedded._ports_given][:2]
    monkeypatch.setattr(embedded.socket, "socket", _OsPorts([given, one, one, two]))
    assert [free_port(), free_port()] == [one, two]


# --- one server per data directory (serve's refusal: tests/pod/test_data_dir_lock.py) ----------


def test_a_second_server_on_a_data_directory_in_use_is_refused(tmp_path: Path) -> None:
    with RedisProcess(tmp_path, appendonly=False) as first:
        assert first.process is not None
        second = RedisProcess(tmp_path, appendonly=False)
        with pytest.raises(DataDirInUse) as refused:
            second.start()
        assert f"redis-server pid {first.process.pid} on port {first.port}" in refused.value.holder
        assert second.process is None and second.data_dir_lock.fd is None
    with second:  # the first has stopped: nothing stale is left
        with redis.Redis(port=second.port) as client:
            assert client.ping()
