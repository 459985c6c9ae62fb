"""The README as printed. Every code block is picked up, in order, as a reader goes through
it in a terminal beside `make run`: commands (```sh) and programs (```python) run against
one pod served as `make run` serves it (its embedded Redis), with only the ports changed
(tests never take 9092, 9093, 6390 or 6379; `request` and `ping` with no `--port` reach the
pod through ADAPTER_REQUEST_PORT/ADAPTER_PING_PORT) and /tmp; what a block says it prints (```text,
and the replies after a `$ ` prompt) is compared with what ran. The few blocks that cannot
run here are listed in `NOT_RUN` with the reason and checked as far as they can be; a block
added to the README runs too, or fails here until it runs or is listed.

Blocks run from a folder of their own where `.venv` is this run's virtualenv (a link), so
`.venv/bin/python -m adapter ...` runs as printed; the Spark blocks run in a test of their
own (marked spark). Each section's blocks also run alone on a fresh pod, so what a
section prints holds whether or not the sections before it ran."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import click
import pytest
import yaml

from adapter.cli import main
from adapter.client import Client
from mapping.connection.embedded import RedisProcess, free_port
from tests.support import ROOT
from tests.support.waiting import wait_until

README = (ROOT / "README.md").read_text()
# The printed ports: make run's V1 and Kafka listeners and its embedded Redis; 6379, "an
# existing Redis" (a pod of its own would take over make run's replicas for a while).
V1_PORT, KAFKA_PORT, REDIS_PORT, OTHER_REDIS_PORT = "9092", "9093", "6390", "6379"
BLOCK_TIMEOUT_S = 180


@dataclass(frozen=True)
class Block:
    language: str
    text: str
    line: int  # where its fence is in README.md

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.language})"


def readme_blocks() -> list[Block]:
    return [
        Block(m.group(1), m.group(2), README.count("\n", 0, m.start()) + 1)
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", README, re.S | re.M)
    ]


# Blocks that cannot run here: a distinctive part of the block -> why, and what checks it.
NOT_RUN = {
    "make test": "`make test` is this test suite, and `make run` is the `served` fixture "
    "below (what tools/run.sh execs); tests/deploy/test_front_door.py runs the targets' "
    "other parts: the ADAPTER_REDIS_URL refusal and what each one installs",
}
# Blocks that run until interrupted: a distinctive part -> the lines of output to wait for.
UNTIL_INTERRUPTED: dict[str, int] = {}


def _kind(block: Block) -> str:
    if block.language == "text":
        return "output"
    if any(key in block.text for key in NOT_RUN):
        return "not run"
    if "spark_connector" in block.text or "pyspark" in block.text:
        return "spark"
    if "docker compose" in block.text:
        return "docker"
    return "run"


def test_every_block_is_known() -> None:
    """Each block is a command or program to run, an output, or listed with its reason."""
    kinds = {str(block): _kind(block) for block in readme_blocks()}
    assert set(kinds.values()) <= {"output", "not run", "spark", "docker", "run"}
    assert list(kinds.values()).count("not run") == len(NOT_RUN), kinds  # no stale entry
    assert all(block.language in ("sh", "python", "text") for block in readme_blocks())


# --- make run's pod -------------------------------------------------------------------------


@dataclass
class Served:
    ports: dict[str, str]  # printed port -> this run's
    output: Path  # the pod's stdout and stderr
    data_dir: Path
    home: Path  # where blocks run: .venv is this run's virtualenv
    ran: set[int] = field(default_factory=set)  # the blocks (their lines) run on this pod

    def printed(self) -> list[str]:
        return self.output.read_text().splitlines()

    def env(self) -> dict[str, str]:
        """A reader's shell (none of the test run's ADAPTER_* settings), where `request` and
        `ping` reach this run's pod when they name no port."""
        shell = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTER_")}
        port = self.ports[V1_PORT]
        return {**shell, "ADAPTER_REQUEST_PORT": port, "ADAPTER_PING_PORT": port}

    def substitute(self, text: str, ports: dict[str, str] | None = None) -> str:
        """``text`` with this run's ports (one pass: a port just put in is never rewritten)
        and /tmp in the block's folder."""
        ports = ports or self.ports
        text = re.sub(rf"(?<!\d)({'|'.join(ports)})(?!\d)", lambda m: ports[m.group(1)], text)
        return text.replace("/tmp/", f"{self.home}/tmp/")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`make run` = `python -m adapter serve` with no Redis URL, on free ports."""
    with _serve(tmp_path_factory.mktemp("readme")) as session:
        yield session


@contextmanager
def _serve(folder: Path) -> Iterator[Served]:
    port, kafka_port, redis_port = free_port(), free_port(), free_port()
    existing = RedisProcess(folder / "existing-redis", appendonly=False).start()
    ports = {V1_PORT: str(port), KAFKA_PORT: str(kafka_port), REDIS_PORT: str(redis_port),
             OTHER_REDIS_PORT: str(existing.port)}  # fmt: skip
    home = folder / "home"
    (home / "tmp").mkdir(parents=True)
    (home / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    session = Served(ports, folder / "pod.log", folder / "data", home)
    with session.output.open("w") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "adapter", "serve", "--port", str(port),
             "--kafka-port", str(kafka_port), "--embedded-redis-port", str(redis_port),
             "--data-dir", str(session.data_dir)],
            cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, env=session.env(),
        )  # fmt: skip
    try:
        wait_until(lambda: _answers(port), timeout=30)
        yield session
    finally:
        process.terminate()
        process.wait(timeout=20)
        existing.stop()


def _answers(port: int) -> bool:
    try:
        with Client("127.0.0.1", port, timeout=2) as client:
            return client.ping() == "pong"
    except OSError:
        return False


def _console_answers(port: int) -> bool:
    """The console's deployment page, as a browser gets it."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as page:
            return page.status == 200 and b"<h1>Deployment</h1>" in page.read()
    except OSError:
        return False


def _loose(line: str) -> re.Pattern[str]:
    """A printed line with `...` standing for anything."""
    return re.compile(".*".join(re.escape(part) for part in line.split("...")))


def test_make_run_prints_as_printed(served: Served) -> None:
    said_at = README.count("\n", 0, README.index("`make run` prints")) + 1
    printed = next(b for b in readme_blocks() if b.language == "text" and b.line > said_at)
    expected = [
        served.substitute(line).replace(".adapter-data", str(served.data_dir))
        for line in printed.text.splitlines()
    ]
    actual = served.printed()[: len(expected)]
    for want, got in zip(expected, actual, strict=True):
        assert _loose(want).fullmatch(got), (want, got)


# --- running blocks -------------------------------------------------------------------------


def _offsets_alike(expected: list[str]) -> re.Pattern[str]:
    """Printed replies as a pattern: an offset (10 digits or more) may be any number, the
    same printed offset the same number each time it appears."""
    seen: dict[str, str] = {}  # printed offset -> its group's name
    pattern = []
    for i, part in enumerate(re.split(r"(\d{10,})", "\n".join(expected))):
        if i % 2 == 0:
            pattern.append(re.escape(part))
        elif part in seen:
            pattern.append(f"(?P={seen[part]})")
        else:
            seen[part] = f"o{len(seen)}"
            pattern.append(rf"(?P<{seen[part]}>\d+)")
    return re.compile("".join(pattern))


def _commands(text: str) -> list[str]:
    """A block's commands, a command continued with `\\` joined into one."""
    return re.sub(r"\\\n\s*", "", text).splitlines()


def _bash(script: str, served: Served) -> str:
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-O", "expand_aliases", "-c", script],
        cwd=served.home, env=served.env(), capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, (script, done.stdout, done.stderr)
    return done.stdout


def _is_server(command: str) -> bool:
    return bool(re.search(r"-m adapter (serve|console)\b", command)) and "--help" not in command


def _run_server(command: str, served: Served) -> None:
    """A command that serves until stopped: it must answer (a pod PING, the console its
    first page), then stop on SIGTERM. Its ports are fresh ones: the printed port is taken
    by make run's pod here (the console's, 9080, is its --port's default: given by its
    variable)."""
    port = free_port()
    ports = {**served.ports, V1_PORT: str(port), KAFKA_PORT: str(free_port())}
    env = {**served.env(), "ADAPTER_KAFKA_PORT": str(free_port())}  # unless it names one
    answers = partial(_answers, port)
    if re.search(r"-m adapter console\b", command):
        env["ADAPTER_CONSOLE_PORT"] = str(port)
        answers = partial(_console_answers, port)
    process = subprocess.Popen(
        ["bash", "-c", f"exec {served.substitute(command, ports)}"],
        cwd=served.home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: process.poll() is not None or answers(), timeout=30)
        assert process.poll() is None, process.communicate()[0]
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0, output


def _run_until_interrupted(block: Block, lines: int, served: Served) -> None:
    """A program that runs until Ctrl-C: once it printed ``lines`` lines, SIGINT."""
    process = subprocess.Popen(
        [sys.executable, "-u", "-c", served.substitute(block.text)],
        cwd=served.home, env=served.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    printed: list[str] = []
    try:
        assert process.stdout is not None
        while len(printed) < lines:
            line = process.stdout.readline()
            assert line, (block, printed, process.stderr.read() if process.stderr else "")
            printed.append(line)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert process.returncode in (0, 1, -signal.SIGINT, 128 + signal.SIGINT)


def run_block(block: Block, served: Served) -> None:
    if block.language == "python":
        interrupted = [n for key, n in UNTIL_INTERRUPTED.items() if key in block.text]
        if interrupted:
            _run_until_interrupted(block, interrupted[0], served)
            return
        done = subprocess.run(
            [sys.executable, "-c", served.substitute(block.text)],
            cwd=served.home, env=served.env(), capture_output=True, text=True,
            timeout=BLOCK_TIMEOUT_S,
        )  # fmt: skip
        assert done.returncode == 0, (str(block), done.stdout, done.stderr)
        return
    # `make run` is the pod this test serves.
    commands = [c for c in _commands(block.text) if not c.startswith("make run")]
    if any(command.startswith("$ ") for command in commands):  # a session: prompts, replies
        for command, replies in _session(commands):
            output = _bash(served.substitute(command), served)
            assert _offsets_alike(replies).fullmatch(output.rstrip("\n")), (command, output)
        return
    if any(_is_server(command) for command in commands):
        for command in commands:
            if _is_server(command):
                _run_server(command, served)
            else:
                _bash(served.substitute(command), served)
        return
    _bash(served.substitute("\n".join(commands)), served)


def _session(lines: list[str]) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("$ "):
            steps.append((line.removeprefix("$ "), []))
        else:
            steps[-1][1].append(line)
    return steps


def walk(served: Served, blocks: list[Block], *, spark: bool = False) -> None:
    """Run ``blocks`` in order, as a reader does, each once per pod (a block builds on what
    the blocks before it made: topics, groups); Spark's only when ``spark``."""
    for block in blocks:
        kind = _kind(block)
        if block.line in served.ran or kind not in ("run", "docker", "spark"):
            continue
        if kind == "spark" and not spark:
            continue
        if "redis-cli" in block.text and shutil.which("redis-cli") is None:
            continue  # (redis-tools comes with redis-server's package)
        if kind == "docker":
            check_compose_block(block, served)
        else:
            run_block(block, served)
        served.ran.add(block.line)


def test_blocks_run_as_printed(served: Served) -> None:
    walk(served, readme_blocks())
    assert len(served.ran) >= 5


def sections() -> dict[str, list[Block]]:
    """The README's `## ` sections that hold blocks to run, each with its blocks."""
    found: dict[str, list[Block]] = {}
    for block in readme_blocks():
        if _kind(block) not in ("run", "docker"):
            continue
        heading = re.findall(r"^## (.+)$", README[: README.index(block.text)], re.M)[-1]
        found.setdefault(heading, []).append(block)
    return found


@pytest.mark.parametrize("heading", list(sections()))
def test_each_section_runs_alone(heading: str, tmp_path: Path) -> None:
    """A section's blocks on a fresh pod and Redis: what it prints owes nothing to the
    sections before it (the Spark section's: its test below)."""
    with _serve(tmp_path) as served:
        walk(served, sections()[heading])
        assert {block.line for block in sections()[heading]} <= served.ran


# --- the compose stack, without Docker --------------------------------------------------------


def _parses(args: list[str]) -> None:
    """``args`` are a valid ``python -m adapter`` command line (parsed, not run)."""
    command: click.Command = main
    context = main.make_context("adapter", list(args))
    while isinstance(command, click.Group):
        rest = [*context.protected_args, *context.args]
        _, sub, rest = command.resolve_command(context, rest)
        assert sub is not None, args
        command, context = sub, sub.make_context(sub.name, rest, parent=context)


def check_compose_block(block: Block, served: Served) -> None:
    """The compose block needs a Docker engine (tests/deploy/test_docker_stack.py runs the
    stack for real where one answers): its files and services exist, the adapter command
    lines it runs in the containers parse, and what it runs on the host runs against the pod
    (which stands for the balancer)."""
    for command in _commands(block.text):
        command = command.split("  #")[0].strip()
        if command.startswith("docker compose"):
            argv = shlex.split(command)
            compose_file = ROOT / argv[argv.index("-f") + 1]
            services = yaml.safe_load(compose_file.read_text())["services"]
            for verb in ("exec", "logs"):
                if verb in argv:
                    rest = argv[argv.index(verb) + 1 :]
                    while rest[0].startswith("-"):  # the verb's own options (-f, -T)
                        rest = rest[1:]
                    assert rest[0] in services, (command, sorted(services))
                    if rest[1:4] == ["python", "-m", "adapter"]:
                        _parses(rest[4:])
        elif command.startswith("curl"):
            published = re.search(r"localhost:(\d+)", command)
            assert published is not None
            compose = (ROOT / "docker" / "docker-compose.yml").read_text()
            assert published.group(1) in compose, command  # a port the stack publishes
        else:
            _bash(served.substitute(command), served)


# --- Spark --------------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.slow
def test_spark_blocks_run_as_printed(served: Served) -> None:
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("no Java runtime (apt-get install openjdk-17-jre-headless)")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # (its workers' address: loopback)
    blocks = readme_blocks()
    spark_blocks = [block for block in blocks if _kind(block) == "spark"]
    assert spark_blocks
    # the blocks before them too, unless they ran already (what they read is made there)
    walk(served, [b for b in blocks if b.line <= spark_blocks[-1].line], spark=True)
    assert {b.line for b in spark_blocks} <= served.ran
