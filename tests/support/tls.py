"""TLS in tests: a throw-away certificate authority (trustme), the pod's TLS options, TLS
clients, and a TLS-terminating proxy in front of a plain redis-server (the local one is
built without TLS)."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import trustme

from adapter.client import Client
from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.waiting import port_open, wait_until


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA pods and clients trust
    server_cert: Path
    server_key: Path
    client_cert: Path  # signed by ca
    client_key: Path
    rogue_cert: Path  # signed by another CA
    rogue_key: Path


def make_certs(folder: Path) -> Certs:
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


def tls_args(certs: Certs, *, verify_clients: bool) -> list[str]:
    """The pod's options for TLS listeners with the ``certs`` server certificate."""
    args = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    if verify_clients:
        args += ["--tls-client-ca", str(certs.ca)]
    return args


def tls_connect(context: ssl.SSLContext) -> Callable[[int], Client]:
    """A pod's ``connect``: a V1 client over TLS."""
    return lambda port: Client("127.0.0.1", port, timeout=10, ssl_context=context)


@dataclass
class TLSProxy:
    """rediss://127.0.0.1:<port>: TLS with the ``certs`` server certificate, client
    certificates of ``certs.ca`` required, plain TCP on to the test's own redis-server."""

    port: int


@contextmanager
def running_tls_proxy(certs: Certs, redis_port: int) -> Iterator[TLSProxy]:
    """``tests.support.tls_proxy`` as a child process in front of the redis-server on
    ``redis_port``."""
    port = free_port()
    args = [certs.server_cert, certs.server_key, certs.ca, port, redis_port]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.tls_proxy", *map(str, args)], cwd=ROOT
    )
    try:
        wait_until(lambda: port_open(port), timeout=20)
        yield TLSProxy(port)
    finally:
        process.kill()
        process.wait(timeout=10)
