"""``python -m bench.authorizer`` runs end to end (small numbers: a smoke test, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_authorizer_bench_short_run(tmp_path: Path) -> None:
    out = tmp_path / "authorizer.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.authorizer", "--records", "2000", "--requests", "50",
         "--rounds", "1", "--unrelated", "10", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert rows["bindings"] == 14 and rows["rounds"] == 1
    units = {"produce": "records", "fetch": "records", "produce_requests": "requests",
             "fetch_requests": "requests"}  # fmt: skip
    for row, unit in units.items():
        for pod in ("plain", "authorizer"):
            assert rows[f"{row}_{pod}_{unit}_per_s"] > 0, rows
            assert rows[f"{row}_{pod}_pod_cpu_us_per_{unit[:-1]}"] >= 0, rows
        assert rows[f"{row}_rate_ratio"] > 0, rows
    assert rows["check_authorizer_us"] > 0 and rows["check_off_us"] > 0
