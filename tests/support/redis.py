"""The run's shared Redis: a testcontainers container when a Docker engine answers and has
the redis:7 image, else a local redis-server child process."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mapping.embedded import RedisProcess

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
