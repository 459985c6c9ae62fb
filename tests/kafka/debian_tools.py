"""Debian's packaged Kafka tools for ``test_debian_clients.py`` (installed by
``tools/bootstrap-clients.sh``): our Go programs over Sarama and kafka-go built with Debian's
Go in GOPATH mode (no network: the libraries' sources come with their ``-dev`` packages),
kcat, and Burrow with the ZooKeeper it needs (``libzookeeper-java``'s server on the
project's Java runtime)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.waiting import port_open, wait_until

GO_SOURCES = Path(__file__).parent / "debian_clients"
BUILD = ROOT / "build" / "debian-clients"  # (git ignores build/)
GOCODE = Path("/usr/share/gocode")
# What each Go program imports, by the Debian package that ships it.
GO_LIBRARIES = {
    "sarama": ("github.com/Shopify/sarama", "golang-github-shopify-sarama-dev"),
    "kafkago": ("github.com/segmentio/kafka-go", "golang-github-segmentio-kafka-go-dev"),
}
ZOOKEEPER_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
JAVA_LIBS = Path("/usr/share/java")
MISSING = "not installed (tools/bootstrap-clients.sh installs it)"


def build_go_client(name: str) -> Path:
    """``debian_clients/<name>`` built into ``build/debian-clients/<name>`` (Go's build cache
    there too: a build with nothing changed takes a second); skips without Go or the
    library's package."""
    go = shutil.which("go")
    if go is None:
        pytest.skip(f"go (golang-go) {MISSING}")
    import_path, package = GO_LIBRARIES[name]
    if not (GOCODE / "src" / import_path).is_dir():
        pytest.skip(f"{package} {MISSING}")
    binary = BUILD / name
    env = {
        **os.environ,
        "GO111MODULE": "off",  # Debian's Go libraries are GOPATH sources, not modules
        "GOPATH": str(GOCODE),
        "GOCACHE": str(BUILD / "go-cache"),
        "GOFLAGS": "",
        "CGO_ENABLED": "0",  # (Sarama's zstd then needs no C compiler; no test uses zstd)
    }
    result = subprocess.run(
        [go, "build", "-o", str(binary), "."],
        cwd=GO_SOURCES / name,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, f"go build {name}: {result.stderr}"
    return binary


def run_json(command: list[str], timeout: float = 60) -> list[dict[str, Any]]:
    """Run one of the Go programs (or kcat -J): its JSON lines; a failure shows its stderr."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, f"{command} exited {result.returncode}: {result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} ({package}) {MISSING}")
    return path


@contextmanager
def running_zookeeper(folder: Path) -> Iterator[int]:
    """A standalone ZooKeeper on a free port (Burrow 1.2.1 will not start without one), its
    data in ``folder``; stopped on exit."""
    java = require("java", "openjdk-17-jre-headless")
    jars = [JAVA_LIBS / jar for jar in ZOOKEEPER_JARS]
    if not all(jar.exists() for jar in jars):
        pytest.skip(f"ZooKeeper's jars (libzookeeper-java) {MISSING}")
    port = free_port()
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        java, "-Xmx128m",
        "-Dzookeeper.admin.enableServer=false",  # (its admin server would take port 8080)
        "-cp", os.pathsep.join(map(str, jars)),
        "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), str(folder / "data"),
    ]  # fmt: skip
    with (folder / "zookeeper.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _alive(process, folder / "zookeeper.log") and _serving(port), 30)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _serving(port: int) -> bool:
    """ZooKeeper answers sessions (its port opens before that: a client then gets EOF): its
    ``srvr`` command (the one four-letter word allowed by default) names its mode."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"srvr")
            return b"Mode:" in sock.makefile("rb").read()
    except OSError:
        return False


def _alive(process: subprocess.Popen[bytes], log: Path) -> bool:
    assert process.poll() is None, f"exited {process.returncode}: {log.read_text()[-2000:]}"
    return True


BURROW_CONFIG = """\
[general]
pidfile="{folder}/burrow.pid"

[logging]
level="info"

[zookeeper]
servers=["127.0.0.1:{zookeeper}"]
timeout=6
root-path="/burrow"

[client-profile.pods]
client-id="burrow"
kafka-version="{kafka_version}"

[cluster.{cluster}]
class-name="kafka"
servers={servers}
client-profile="pods"
topic-refresh=1
offset-refresh=1

[httpserver.default]
address="127.0.0.1:{http_port}"

[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
"""
# Burrow's consumer module: the groups it follows, read from the cluster's __consumer_offsets.
BURROW_CONSUMERS = """
[consumer.{cluster}]
class-name="kafka"
cluster="{cluster}"
servers={servers}
client-profile="pods"
group-whitelist="{group_pattern}"
"""


class BurrowExited(AssertionError):
    """Burrow stopped by itself (it exits when one of its modules cannot start)."""


class Burrow:
    """Burrow 1.2.1 (``/usr/bin/Burrow``) watching the pods as cluster ``cluster``: the
    partitions' offsets, and with ``group_pattern`` the groups it matches; its HTTP API on
    ``http_port``."""

    def __init__(
        self,
        folder: Path,
        zookeeper_port: int,
        bootstrap: list[str],
        cluster: str,
        group_pattern: str | None = None,
        kafka_version: str = "2.1.0",
    ) -> None:
        self.binary = require("Burrow", "burrow")
        self.folder = folder
        self.cluster = cluster
        self.http_port = free_port()
        self.log_path = folder / "burrow.log"
        folder.mkdir(parents=True, exist_ok=True)
        fields = {
            "folder": folder, "zookeeper": zookeeper_port, "kafka_version": kafka_version,
            "cluster": cluster, "servers": json.dumps(bootstrap), "http_port": self.http_port,
            "group_pattern": group_pattern,
        }  # fmt: skip
        config = BURROW_CONFIG + (BURROW_CONSUMERS if group_pattern is not None else "")
        (folder / "burrow.toml").write_text(config.format(**fields))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Burrow:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "--config-dir", str(self.folder)],
                cwd=self.folder,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(lambda: self.running() and port_open(self.http_port), 30)
        except BaseException:
            self.stop()
            raise
        return self

    def running(self) -> bool:
        """True while Burrow runs; ``BurrowExited`` (with its log's end) once it stopped."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise BurrowExited(f"Burrow exited {self.process.returncode}: {self.log()[-3000:]}")
        return True

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if Burrow is not gone in 10 s: it stops in milliseconds
        here, but once, late in a whole CI run, it took longer than that (its log's end is
        printed, for a test that fails later)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"Burrow did not stop in 10 s; killed. Its log's end:\n{self.log()[-3000:]}")
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        """GET ``/v3/kafka/<cluster>/<path>``: (HTTP status, the JSON answer)."""
        url = f"http://127.0.0.1:{self.http_port}/v3/kafka/{self.cluster}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")
        except OSError:  # (no answer yet: callers poll, and check that Burrow still runs)
            return 0, {}
