"""``python -m bench.scale --profile FOLDER``: every pod recorded by py-spy while a row runs
(both its sides and their set-up: the pods are all but idle through the raw side), one
file of py-spy's raw collapsed stacks per pod and row, for finding what a pod spends a
row's CPU on where the row was measured (docs/scale.md)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

RATE = 200  # samples a second: enough for a row of seconds, little cost to the pod


def executable() -> str | None:
    """py-spy of this Python's environment (not always on PATH: an unactivated venv), else
    PATH's."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def file_name(label: str, workload: str, pod: int) -> str:
    """``1-1-4-kafka-produce-pod0.txt``: letters, digits and dashes alone."""
    return f"{label.replace(',', '-')}-{workload}-pod{pod}.txt"


def _spy(pid: int, path: Path, rate: int) -> subprocess.Popen[bytes]:
    spy = executable()
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    command = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking",
               "--format", "raw", "--output", str(path)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def recording(pids: list[int], folder: Path, label: str, workload: str,
              rate: int = RATE) -> Iterator[list[Path]]:  # fmt: skip
    """py-spy on each of ``pids`` (without pausing them: --nonblocking) until the block
    ends; py-spy writes its file when interrupted."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / file_name(label, workload, i) for i in range(len(pids))]
    spies = [_spy(pid, path, rate) for pid, path in zip(pids, paths, strict=True)]
    try:
        yield paths
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
