"""`mapping.embedded.RedisProcess` options (the process itself: tests/pod/test_pods.py)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from mapping.embedded import RedisProcess, RedisServerError, free_port


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
