"""Helpers for the reliability tests: pods whose readiness check speaks TLS or expects AUTH,
and a look at a pod process's file descriptors and memory."""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable
from pathlib import Path

from adapter.client import Client
from tests.support import Pod


class CustomPod(Pod):
    """A pod that is "up" once a client made by ``connect`` gets any V1 reply to PING
    (``AUTH_REQUIRED`` counts: the pod answered)."""

    def __init__(self, redis_url: str, *args: str, connect: Callable[[int], Client]) -> None:
        super().__init__(redis_url, *args)
        self.connect = connect

    def _answers(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"pod exited with {self.process.returncode}: {self.log()}")
        try:
            with self.connect(self.port) as client:
                return client.request("PING").correlation_id != ""
        except (OSError, ssl.SSLError):
            return False

    def client(self, timeout: float = 30.0) -> Client:
        return self.connect(self.port)


def tls_connect(context: ssl.SSLContext) -> Callable[[int], Client]:
    return lambda port: Client("127.0.0.1", port, timeout=10, ssl_context=context)


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
