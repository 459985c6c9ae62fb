"""``python -m bench.pod_cost --quick`` runs end to end: each row beside its baseline, on a
real 3-primary cluster for the cluster row (no timing asserted)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.support import ROOT


def test_pod_cost_quick_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.pod_cost", "--quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert set(rows) == {"pack", "walk", "request", "answer", "hash", "cluster"}
    for line in rows.values():
        costs = re.findall(r"([\d.]+) µs/(?:rec|part|key|call)", line)
        assert len(costs) == 2 and all(float(cost) > 0 for cost in costs), line
        assert re.search(r"ratio +[\d.]+$", line), line
