"""The run's shared Redis: a testcontainers container when a Docker engine answers and has
the redis:7 image, else a local redis-server child process; and a replica of a test's own
Redis (``start_replica``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from mapping.connection.embedded import RedisProcess
from tests.support.waiting import wait_until

REDIS_IMAGE = "redis:7"


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


@contextmanager
def shared_redis(folder: Path) -> Iterator[str]:
    """The URL of a Redis (no persistence) until the block ends; a child process's files go
    in ``folder``."""
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
    with RedisProcess(folder, appendonly=False) as server:
        yield server.url


def start_replica(primary: RedisProcess, folder: Path) -> RedisProcess:
    """A redis-server (no AOF) replicating ``primary``, returned once its link is up and the
    primary counts it."""
    copy = RedisProcess(
        folder, appendonly=False, extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    ).start()
    with redis.Redis(port=copy.port) as replica, redis.Redis(port=primary.port) as source:
        wait_until(lambda: replica.info("replication")["master_link_status"] == "up")
        wait_until(lambda: source.info("replication")["connected_slaves"] >= 1)
    return copy
