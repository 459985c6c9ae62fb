"""The README's front door, run as printed: `make run`'s first lines (the embedded Redis and
the pod), the `adapter request` example and the standard-library one-liner, with only the
ports changed (tests never take 9092 or 6390) and `...`/offsets matched loosely."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mapping.embedded import free_port
from tests.support import ROOT
from tests.support.waiting import wait_until

README = (ROOT / "README.md").read_text()


def _block_after(marker: str, language: str) -> list[str]:
    """The lines of the first ```language block after ``marker``."""
    start = README.index(marker)
    match = re.compile(rf"```{language}\n(.*?)```", re.S).search(README, start)
    assert match is not None, f"no {language} block after {marker!r}"
    return match.group(1).splitlines()


def _pattern(line: str, ports: dict[str, str]) -> re.Pattern[str]:
    # One pass for every port: replacing them in turn could rewrite a port just put in.
    line = re.sub("|".join(ports), lambda m: ports[m.group(0)], line)
    parts = [re.escape(part) for part in line.split("...")]
    return re.compile(".*".join(parts))


@pytest.fixture
def served(tmp_path: Path):
    """`make run` = `python -m adapter serve` with no Redis URL, on free ports."""
    port, kafka_port, redis_port = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "adapter", "serve", "--port", str(port),
         "--kafka-port", str(kafka_port), "--embedded-redis-port", str(redis_port),
         "--data-dir", str(tmp_path / "data")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    printed = len(_block_after("`make run` prints", "text"))

    def all_printed() -> bool:
        lines.append(process.stdout.readline())
        return len(lines) >= printed

    try:
        wait_until(all_printed, timeout=30)
        ports = {"9092": str(port), "9093": str(kafka_port), "6390": str(redis_port)}
        yield ports, lines, tmp_path
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_make_run_then_request_as_printed(served) -> None:
    ports, first_lines, data = served
    printed = _block_after("`make run` prints", "text")
    printed = [line.replace(".adapter-data", str(data / "data")) for line in printed]
    for expected, actual in zip(printed, first_lines, strict=True):
        assert _pattern(expected, ports).fullmatch(actual.rstrip("\n")), (expected, actual)

    session = _block_after("## Talking to it", "sh")
    command, *expected_replies = session
    argv = shlex.split(command.removeprefix("$ "))
    assert argv[:3] == [".venv/bin/python", "-m", "adapter"]
    result = subprocess.run(
        [sys.executable, *argv[1:], "--port", ports["9092"]],
        cwd=ROOT, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    replies = result.stdout.splitlines()
    assert len(replies) == len(expected_replies)
    offset_free = [re.sub(r"\d{10,}", "OFFSET", line) for line in expected_replies]
    assert [re.sub(r"\d{10,}", "OFFSET", line) for line in replies] == offset_free
    produced = re.fullmatch(r"V1\|1\|OK\|partition=2 offset=(\d+) hw=(\d+)", replies[0])
    assert produced is not None and produced.group(1) == produced.group(2)
    assert replies[1] == f"V1|2|OK|messages={produced.group(1)}:created hw={produced.group(1)}"

    one_liner = next(
        line for line in _block_after("Python's standard library", "sh") if "socket" in line
    )
    result = subprocess.run(
        ["bash", "-c", one_liner.replace("9092", ports["9092"])],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    assert result.stdout == "V1|1|OK|pong\n"
