"""`mapping.embedded.RedisProcess` options (the process itself: tests/pod/test_pods.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mapping.embedded import RedisProcess


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
    import redis

    with RedisProcess(tmp_path, appendfsync="always") as server:
        client = redis.Redis(port=server.port)
        assert client.config_get("appendfsync")["appendfsync"] == "always"
        assert client.config_get("appendonly")["appendonly"] == "yes"
        client.close()
