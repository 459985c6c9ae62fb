"""A Quix Streams application against two pods: a stateful per-key aggregation whose state
(RocksDB + a compacted changelog topic) survives a SIGKILL and the loss of its local state
directory (``quix_app.py``; the scenario is ``streams.crash_and_recover``), at least once
(exact through the app's own seq check) and exactly once (Kafka transactions: no check,
the read_committed output holds each input record's result once, in order); and at least
once when the app dies inside its checkpoint and compaction runs before it recovers: the
recovery falls back on each key's previous changelog record, which compaction leaves in the
active segment (docs/compaction.md, "Segments")."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
import redis

from mapping.core.keys import Keys
from tests.apps.streams import (
    APPS_PREFIX,
    EARLY,
    KEYS,
    AppRun,
    committed_outputs,
    committed_states,
    crash_and_recover,
    early_records,
    expected_states,
    late_records,
)
from tests.support import ROOT
from tests.support.cli import CliTarget
from tests.support.pods import Pod

pytestmark = pytest.mark.slow

# Quix Streams pins confluent-kafka below the project's: it has its own interpreter, made by
# tools/bootstrap.sh from tests/apps/quix-requirements.txt (see tests/README.md)
QUIX_PYTHON = Path(os.environ.get("QUIX_PYTHON", ROOT / ".venv-quix" / "bin" / "python"))


@pytest.fixture
def quix_python() -> Path:
    if not QUIX_PYTHON.exists():
        pytest.skip(f"no Quix Streams interpreter at {QUIX_PYTHON}: run tools/bootstrap.sh")
    return QUIX_PYTHON


def test_stateful_app_recovers_its_state_from_the_changelog(
    app_pods: tuple[Pod, Pod], quix_python: Path, tmp_path: Path
) -> None:
    bootstrap = ",".join(pod.bootstrap for pod in app_pods)
    name = uuid.uuid4().hex[:8]
    group, source, sink = f"quix-{name}", f"quix-in-{name}", f"quix-out-{name}"
    state_dir = tmp_path / "state"

    def start_app(run: int) -> AppRun:
        command = [str(quix_python), str(ROOT / "tests/apps/quix_app.py"),
                   bootstrap, group, source, sink, str(state_dir)]  # fmt: skip
        return AppRun(command, tmp_path / f"run-{run}.log").start()

    outcome = crash_and_recover(bootstrap, group, source, sink, state_dir, start_app)

    assert outcome.states == expected_states([*early_records(), *late_records()])
    # run 2 never read the early records again (their offsets were committed before the
    # kill): the late keys' totals hold them only because their state came back from the
    # changelog, into a state directory made anew
    assert min(seq for _, seq, _ in outcome.second.processed()) >= EARLY
    assert {key for key, _, _ in outcome.second.processed()} < set(KEYS)
    assert state_dir.exists()


# Runs of the die-inside-the-checkpoint scenario in one test (each lands in the window).
CHECKPOINT_DEATHS = 3


def _dies_in_checkpoint_then_recovers(
    bootstrap: str, quix_python: Path, run_dir: Path, target: CliTarget
) -> None:
    name = uuid.uuid4().hex[:8]
    group, source, sink = f"quixcp-{name}", f"quixcp-in-{name}", f"quixcp-out-{name}"
    state_dir = run_dir / "state"
    # run 1 dies inside the first checkpoint after it processed a late record
    dies = ["env", f"QUIX_EXIT_IN_CHECKPOINT={len(early_records()) + 1}"]

    def start_app(run: int) -> AppRun:
        command = [*(dies if run == 1 else []), str(quix_python),
                   str(ROOT / "tests/apps/quix_app.py"), bootstrap, group, source, sink,
                   str(state_dir)]  # fmt: skip
        return AppRun(command, run_dir / f"run-{run}.log").start()

    outcome = crash_and_recover(
        bootstrap, group, source, sink, state_dir, start_app,
        dies_in_checkpoint=True, after_crash=lambda: target.cli("topic", "compact"),
    )  # fmt: skip
    assert outcome.states == expected_states([*early_records(), *late_records()])
    assert min(seq for _, seq, _ in outcome.second.processed()) >= EARLY


def test_app_dying_inside_its_checkpoint_recovers_after_compaction(
    app_pods: tuple[Pod, Pod], quix_python: Path, tmp_path: Path, redis_url: str
) -> None:
    """Run 1 dies after its checkpoint flushed the changelog (the late keys' seq-20 states)
    and before it committed the offsets; every compacted topic is compacted; run 2 skips the
    changelog records at or above the committed offset and falls back on seq 19's, which
    Kafka's cleaner leaves (the active segment), whatever compaction ran meanwhile."""
    bootstrap = ",".join(pod.bootstrap for pod in app_pods)
    client = redis.Redis.from_url(redis_url)
    target = CliTarget(redis_url, Keys(APPS_PREFIX), client)
    try:
        for attempt in range(CHECKPOINT_DEATHS):
            run_dir = tmp_path / f"attempt-{attempt}"
            run_dir.mkdir()
            _dies_in_checkpoint_then_recovers(bootstrap, quix_python, run_dir, target)
    finally:
        client.close()


def test_exactly_once_app_sigkilled_gives_exact_output(
    app_pods: tuple[Pod, Pod], quix_python: Path, tmp_path: Path
) -> None:
    bootstrap = ",".join(pod.bootstrap for pod in app_pods)
    name = uuid.uuid4().hex[:8]
    group, source, sink = f"quixeos-{name}", f"quixeos-in-{name}", f"quixeos-out-{name}"
    state_dir = tmp_path / "state"

    def start_app(run: int) -> AppRun:
        command = [str(quix_python), str(ROOT / "tests/apps/quix_app.py"),
                   bootstrap, group, source, sink, str(state_dir), "exactly-once"]  # fmt: skip
        return AppRun(command, tmp_path / f"run-{run}.log").start()

    records = [*early_records(), *late_records()]
    outcome = crash_and_recover(
        bootstrap, group, source, sink, state_dir, start_app, read_states=committed_states
    )
    assert outcome.states == expected_states(records)
    # every input record's result exactly once, in order per key: nothing the killed run
    # had sent in its open transaction shows, nothing is repeated
    outputs = committed_outputs(bootstrap, sink, len(records))
    per_key: dict[str, list[int]] = {}
    for output in outputs:
        per_key.setdefault(output["key"], []).append(output["seq"])
    assert per_key == {key: [seq for k, seq, _ in records if k == key] for key in KEYS}
