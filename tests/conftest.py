"""Shared fixtures: a real redis-server over TCP (a testcontainers container when a Docker
engine answers and has the redis:7 image, else a local child process) and adapter pods as
child processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mapping.embedded import RedisProcess
from tests.support import Pod

REDIS_IMAGE = "redis:7"

# Pods started by tests take a free Kafka port unless told one (tests.support.Pod passes
# its own): parallel pods never collide on 9093.
os.environ.setdefault("ADAPTER_KAFKA_PORT", "0")


def _testcontainers_can_work() -> bool:
    """A Docker engine answers on the default socket (or DOCKER_HOST) and the Redis image is
    already there: nothing has to be pulled, so a machine whose registry is out of reach
    falls back to the local redis-server instead of erroring in every Redis fixture."""
    if shutil.which("docker") is None:
        return False
    try:
        found = subprocess.run(
            ["docker", "image", "inspect", REDIS_IMAGE], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return found.returncode == 0


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Redis for the run; tests isolate themselves with unique topic/group names."""
    if _testcontainers_can_work():
        # Ryuk (the reaper container) would be pulled: the container is stopped by the
        # context manager instead. Read when testcontainers is imported, hence set first.
        os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
        if os.environ.get("DOCKER_HOST", "unix://").startswith("unix://"):
            # A local engine publishes its ports on this host: reach them on loopback, also
            # when this host is itself a container (testcontainers would pick the gateway).
            os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")
            os.environ.setdefault("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
        from testcontainers.redis import RedisContainer

        with RedisContainer(REDIS_IMAGE) as container:
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
