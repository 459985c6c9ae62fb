"""py-spy on running pods, for the benchmarks' profiles (``python -m bench.one --py-spy``,
``python -m bench.scale --profile``): each pod recorded without pausing it (--nonblocking)
until the block ends; py-spy writes its file when interrupted."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


def executable() -> str | None:
    """py-spy of this Python's environment (not always on PATH: an unactivated venv), else
    PATH's."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def _spy(pid: int, path: Path, rate: int) -> subprocess.Popen[bytes]:
    spy = executable()
    if spy is None:
        raise RuntimeError("py-spy is not installed: pip install py-spy")
    form = "flamegraph" if path.suffix == ".svg" else "raw"  # raw: collapsed stacks
    command = [spy, "record", "--pid", str(pid), "--rate", str(rate), "--nonblocking",
               "--format", form, "--output", str(path)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextlib.contextmanager
def recording(targets: list[tuple[int, Path]], rate: int) -> Iterator[None]:
    """Each (pid, file) of ``targets`` recorded by py-spy at ``rate`` samples a second while
    the block runs (a ``.svg`` file: a flame graph)."""
    for _, path in targets:
        path.parent.mkdir(parents=True, exist_ok=True)
    spies = [_spy(pid, path, rate) for pid, path in targets]
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
