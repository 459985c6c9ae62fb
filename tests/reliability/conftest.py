"""Fixtures of the reliability tests: a throw-away certificate authority (trustme), and a
TLS-terminating proxy in front of a plain redis-server (the local one is built without TLS)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from mapping.embedded import RedisProcess, free_port
from tests.reliability.helpers import CustomPod
from tests.support import ROOT, port_open, wait_until


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA pods and clients trust
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by ca
    client_key: Path
    rogue_cert: Path  # signed by another CA
    rogue_key: Path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    folder = tmp_path_factory.mktemp("certs")
    ca, rogue_ca = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client@example.org")
    rogue = rogue_ca.issue_cert("rogue@example.org")
    paths = {}
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    for name, leaf in (("server", server), ("client", client), ("rogue", rogue)):
        leaf.cert_chain_pems[0].write_to_path(str(folder / f"{name}.pem"))
        leaf.private_key_pem.write_to_path(str(folder / f"{name}.key"))
        paths[name] = (folder / f"{name}.pem", folder / f"{name}.key")
    return Certs(folder / "ca.pem", *paths["server"], *paths["client"], *paths["rogue"])


@pytest.fixture
def start_custom_pod() -> Iterator[Callable[..., CustomPod]]:
    """``start_custom_pod(redis_url, *serve_args, connect=...)``, stopped after the test."""
    pods: list[CustomPod] = []

    def start(redis_url: str, *args: str, connect: Callable) -> CustomPod:
        pod = CustomPod(redis_url, *args, connect=connect)
        pods.append(pod)
        return pod.start()  # type: ignore[return-value]

    yield start
    for pod in pods:
        pod.stop()


@dataclass
class TLSProxy:
    """rediss://127.0.0.1:<port>: TLS with the ``certs`` server certificate, client
    certificates of ``certs.ca`` required, plain TCP on to the test's own redis-server."""

    port: int


@pytest.fixture
def tls_proxy(own_redis: RedisProcess, certs: Certs) -> Iterator[TLSProxy]:
    port = free_port()
    args = [certs.server_cert, certs.server_key, certs.ca, port, own_redis.port]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.tls_proxy", *map(str, args)], cwd=ROOT
    )
    try:
        wait_until(lambda: port_open(port), timeout=20)
        yield TLSProxy(port)
    finally:
        process.kill()
        process.wait(timeout=10)
