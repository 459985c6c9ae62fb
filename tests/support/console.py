"""The console launcher: ``python -m adapter console`` as a child process on a free port, up
once it prints its ``console: http://HOST:PORT/`` line, and the browser that looks at it
(Debian's Chromium under Playwright), for the console's tests and its benchmark
(bench/console.py) alike."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
from pathlib import Path

from mapping.connection.embedded import free_port
from tests.support import ROOT
from tests.support.pods import LOG_DIR, stop_process
from tests.support.waiting import port_open, wait_until

# Debian's Chromium (tools/bootstrap.sh installs it; Playwright's own download is not used),
# with the flags it needs on a machine whose network is closed (without them it stalls on
# the network).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# The line the console prints on stdout once it listens.
_LISTENING = re.compile(r"^console: (http://\S+)$", re.MULTILINE)


class Console:
    """``python -m adapter console --redis-url URL --port PORT *args`` as a child process.

    - ``args``: more options (``--key-prefix P``, the Redis login options);
    - ``log_dir``: its stdout and stderr go to ``console-<port>.log`` there; None: to a
      temporary file this process reads its start line from, then drops.
    """

    def __init__(
        self, redis_url: str, *args: str, port: int | None = None, log_dir: Path = LOG_DIR
    ) -> None:
        self.redis_url = redis_url
        self.args = list(args)
        self.port = port or free_port()
        self.log_dir = log_dir
        self.log_path = log_dir / f"console-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}/"

    def start(self, timeout: float = 30.0) -> Console:
        """Start it and wait until it says it listens (its URL is read from that line) and
        its port accepts connections; one that exits first fails with its output."""
        command = [
            sys.executable, "-m", "adapter", "console",
            "--redis-url", self.redis_url,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            *self.args,
        ]  # fmt: skip
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(self._listening, timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"console exited with {self.process.returncode}: {self.log()}")
        said = _LISTENING.search(self.log())
        if said is None:
            return False
        self.url = said.group(1).rstrip("/") + "/"
        return port_open(self.port)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """One GET of ``path`` on its own connection: (status, body)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        stop_process(self.process, timeout)
