"""The two commands of the README: `make run` installs only what serving needs and refuses a
Redis URL left in the shell (it would replace the embedded Redis); `make test` installs
everything the tests use; CI runs `make test`. What bootstrap installs is read from its
``--dry-run`` with nothing installed (an empty PATH): nothing is installed here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import ROOT

TEST_ONLY = ("haproxy", "valgrind", "chromium", "krb5-kdc", "openjdk", "[test", "spark", "Quix")


def _make(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("variable", ["ADAPTER_REDIS_URL", "ADAPTER_REDIS_SENTINEL"])
def test_make_run_refuses_a_redis_in_the_environment(variable: str) -> None:
    env = {**os.environ, variable: "redis://:s3cret@10.0.0.1:6379/0"}
    done = _make("run", env=env)
    assert done.returncode != 0
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"make run: refusing: {variable} is set in this shell"), done.stderr
    assert f"unset {variable}" in first and "-m adapter serve" in first
    assert "s3cret" not in done.stderr
    assert done.stdout == ""  # nothing installed, nothing served


def _bootstrap_plan(mode: str, tmp_path: Path) -> list[str]:
    """The steps ``tools/bootstrap.sh MODE`` takes on a machine with nothing installed."""
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {"PATH": str(empty), "VENV": str(tmp_path / "venv"), "QUIX_VENV": str(tmp_path / "q")}
    bash = shutil.which("bash")
    assert bash is not None
    done = subprocess.run(
        [bash, "tools/bootstrap.sh", "--dry-run", mode],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(line.startswith("bootstrap: ") for line in lines), lines  # a line per step
    return lines


def test_make_run_installs_redis_and_the_project_only(tmp_path: Path) -> None:
    plan = "\n".join(_bootstrap_plan("run", tmp_path))
    assert "redis-server" in plan
    assert f"creating the virtualenv {tmp_path / 'venv'}" in plan
    assert "installing the project and its Kafka client into" in plan
    assert " -e .[examples])" in plan
    for tool in TEST_ONLY:
        assert tool not in plan, (tool, plan)


def test_make_test_installs_everything(tmp_path: Path) -> None:
    plan = "\n".join(_bootstrap_plan("test", tmp_path))
    for tool in ("redis-server", *TEST_ONLY):
        assert tool in plan, (tool, plan)


def test_targets_call_the_right_parts() -> None:
    run = _make("-n", "run", env=dict(os.environ)).stdout
    assert "./tools/run.sh" in run
    run_script = (ROOT / "tools" / "run.sh").read_text()
    assert "./tools/bootstrap.sh run\n" in run_script
    assert 'bin/python" -m adapter serve "$@"' in run_script
    test = _make("-n", "test", env=dict(os.environ)).stdout.splitlines()
    assert "./tools/bootstrap.sh test" in test[0] and "-m pytest" in test[-1]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_make_alone_prints_the_targets_and_does_nothing() -> None:
    """A newcomer's first `make` says what there is; it installs and starts nothing."""
    plan = _make("-n", env=dict(os.environ)).stdout
    assert "tools/" not in plan and "-m pytest" not in plan, plan  # only echo lines
    printed = _make(env=dict(os.environ))
    assert printed.returncode == 0, printed.stderr
    targets = [line.split()[1] for line in printed.stdout.splitlines() if line.startswith("make ")]
    assert targets[:2] == ["run", "test"], printed.stdout
