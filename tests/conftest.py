"""Shared fixtures: a real redis-server over TCP (a testcontainers container when a Docker
engine answers, else a local child process) and adapter pods as child processes."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mapping.embedded import RedisProcess
from tests.support import Pod


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Redis for the run; tests isolate themselves with unique topic/group names."""
    if _docker_answers():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7") as container:
            host = container.get_container_host_ip()
            yield f"redis://{host}:{container.get_exposed_port(6379)}/0"
        return
    with RedisProcess(tmp_path_factory.mktemp("redis"), appendonly=False) as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis of the test's own (AOF on), for tests that kill or restart it."""
    server = RedisProcess(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def start_pod() -> Iterator[Callable[..., Pod]]:
    """``start_pod(redis_url, *serve_args)`` -> a running pod, stopped after the test."""
    pods: list[Pod] = []

    def start(redis_url: str, *args: str) -> Pod:
        pod = Pod(redis_url, *args)
        pods.append(pod)
        return pod.start()

    yield start
    for pod in pods:
        pod.stop()


@pytest.fixture(scope="session")
def pod(redis_url: str) -> Iterator[Pod]:
    """A pod shared by the run, with single-replica topics so records are visible at once
    (replication has its own tests)."""
    shared = Pod(
        redis_url, "--default-replication-factor", "1", "--default-min-insync-replicas", "1"
    )
    shared.start()
    yield shared
    shared.stop()
