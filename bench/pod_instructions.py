"""``python -m bench.pod_instructions``: instructions a pod spends per pipelined V1 PRODUCE,
counted by callgrind (valgrind), so the figure repeats from run to run whatever else the
machine does (a pod's rate on a shared 2-core machine moves by a fifth between runs).

A pod (``adapter serve``) runs under ``valgrind --tool=callgrind`` against a redis-server of
its own (with the streamadapter module where it was built), counting nothing at first. A
client in this process sends a first round of ``--window`` PRODUCE lines (the topic is
created, the scripts loaded); then counting is turned on (``callgrind_control``), ``--requests``
more are sent, ``--window`` a round trip, acks=1, a 100-byte value and a key of each
``--key-sizes`` size (zero-padded numbers: 1024 keys over the topic's partitions), and
counting is turned off once the last reply is read: the requests' own cost, reading the
lines to writing the replies, the Redis calls' packing and their replies' reading included.
The pod serves V1 only, with no retention or transaction checks: none of their timers runs
while it counts.

Each key size is measured side by side with the pure-Python paths (``ADAPTER_PURE_PYTHON=1``:
what an install without a C compiler runs), and the ratio printed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

from mapping.connection.embedded import RedisProcess, free_port
from tests.support import ROOT
from tests.support.pods import stop_process

TOPIC = "instructions"
# The pod's timers that would run while it is counted, off: no Kafka listener (its broker
# registration), no retention or transaction checks.
QUIET = ("--no-kafka", "--retention-interval-ms", "0", "--transaction-check-interval-ms", "0")
VALUE = b"x" * 100


def _connect(port: int, pod: subprocess.Popen[bytes]) -> socket.socket:
    deadline = time.monotonic() + 180  # a pod starts slowly under valgrind
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=120)
        except OSError:
            if pod.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the pod did not start under valgrind") from None
            time.sleep(0.5)


def _round(connection: socket.socket, first: int, count: int, key_size: int) -> None:
    """``count`` PRODUCEs pipelined, then their replies, each checked."""
    lines = (
        b"V1|%d|PRODUCE|%s %0*d:%s\n" % (i, TOPIC.encode(), key_size, i % 1024, VALUE)
        for i in range(first, first + count)
    )
    connection.sendall(b"".join(lines))
    replies = b""
    while replies.count(b"\n") < count:
        data = connection.recv(1 << 20)
        if not data:
            raise RuntimeError("the pod closed the connection")
        replies += data
    if replies.count(b"|OK|partition=") != count:
        raise RuntimeError(f"a PRODUCE failed: {replies[:300]!r}")


def _counting(pod: subprocess.Popen[bytes], on: bool) -> None:
    subprocess.run(
        ["callgrind_control", "--instr=on" if on else "--instr=off", str(pod.pid)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip


def pod_instructions(
    redis_url: str, requests: int, window: int, key_size: int, pure: bool, folder: Path
) -> int:
    """Instructions of a pod answering ``requests`` PRODUCEs after a first round."""
    out = folder / f"callgrind.{requests}.{key_size}.{int(pure)}"
    port = free_port()
    environment = dict(os.environ)
    environment.pop("ADAPTER_PURE_PYTHON", None)
    if pure:
        environment["ADAPTER_PURE_PYTHON"] = "1"
    pod = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
         sys.executable, "-m", "adapter", "serve", "--redis-url", redis_url,
         "--port", str(port), "--key-prefix", f"instructions-{requests}-{key_size}-{int(pure)}",
         *QUIET, "--log-level", "WARNING"],
        cwd=ROOT, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with _connect(port, pod) as connection:
            _round(connection, 0, window, key_size)
            _counting(pod, True)
            for first in range(window, window + requests, window):
                _round(connection, first, min(window, window + requests - first), key_size)
            _counting(pod, False)
    finally:  # SIGTERM: callgrind writes its count as the pod exits
        stop_process(pod, timeout=300)
    # (with counting turned on later, the file's "summary:" says 0; "totals:" has the count)
    totals = [
        int(line.split()[1]) for line in out.read_text().splitlines() if line.startswith("totals:")
    ]
    if not totals or not totals[0]:
        raise RuntimeError("callgrind counted nothing (callgrind_control could not reach the pod?)")
    return totals[0]


def per_request(
    redis_url: str, requests: int, window: int, key_size: int, pure: bool, folder: Path
) -> float:
    """The pod's instructions per PRODUCE."""
    return pod_instructions(redis_url, requests, window, key_size, pure, folder) / requests


@click.command()
@click.option("--requests", default=10_240, show_default=True, help="PRODUCEs counted")
@click.option("--window", default=1024, show_default=True, help="PRODUCEs a round trip")
@click.option("--key-sizes", default="4,36", show_default=True, help="bytes of a key, each")
def main(requests: int, window: int, key_sizes: str) -> None:
    sizes = [int(size) for size in key_sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="pod-instructions-") as folder:
        server = RedisProcess(Path(folder) / "redis", appendonly=False)
        server.start()
        try:
            print(f"pod instructions per V1 PRODUCE ({requests} pipelined, {window} a round trip,"
                  f" acks=1, {len(VALUE)}-byte values), by callgrind:")  # fmt: skip
            for size in sizes:
                compiled = per_request(server.url, requests, window, size, False, Path(folder))
                pure = per_request(server.url, requests, window, size, True, Path(folder))
                print(f"key of {size:3d} bytes: {compiled:9,.0f} | pure Python {pure:9,.0f}"
                      f" ratio {pure / compiled:5.2f}")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
