"""Fixtures of the deployment tests: a real 3-node Redis Cluster on loopback, and the
command line pointed at one Redis and key prefix."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from mapping.embedded import RedisProcess, free_port
from mapping.keys import Keys
from tests.support import wait_until


@dataclass
class CliTarget:
    """One Redis and key prefix, and ``python -m adapter`` pointed at them."""

    url: str
    keys: Keys
    client: redis.Redis

    def cli(self, *args: str) -> str:
        base = ["--redis-url", self.url, "--key-prefix", self.keys.prefix]
        result = CliRunner().invoke(main, [*args, *base])
        assert result.exit_code == 0, result.output
        return result.output


def _cluster_ok(ports: list[int]) -> bool:
    for port in ports:
        client = redis.Redis(port=port, socket_timeout=2)
        try:
            info = client.execute_command("CLUSTER", "INFO")
        finally:
            client.close()
        text = info.decode() if isinstance(info, bytes) else str(info)
        if "cluster_state:ok" not in text or "cluster_known_nodes:3" not in text:
            return False
    return True


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://127.0.0.1:<port>``: three primaries (no replicas), slots spread by
    ``redis-cli --cluster create``, AOF on like a real deployment."""
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (apt-get install redis-tools)")
    base = tmp_path_factory.mktemp("cluster")
    nodes = [
        RedisProcess(
            base / f"node{i}",
            appendonly=True,
            # The bus port is set: the default (port + 10000) fails for ports above 55535.
            extra_args=[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
                "--cluster-port",
                str(free_port()),
            ],
        )  # fmt: skip
        for i in range(3)
    ]
    try:
        for node in nodes:
            node.start()
        ports = [node.port for node in nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        wait_until(lambda: _cluster_ok(ports), timeout=60, interval=0.2)
        yield f"redis+cluster://127.0.0.1:{ports[0]}"
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path
