"""Fixtures of the reliability tests: a throw-away certificate authority (trustme)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.reliability.helpers import CustomPod


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
