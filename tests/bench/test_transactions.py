"""``python -m bench.transactions`` runs end to end (small numbers: a smoke test, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_transactions_bench_short_run(tmp_path: Path) -> None:
    out = tmp_path / "transactions.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.transactions", "--records", "300", "--batch-records", "3",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(out.read_text())
    for name in ("idempotent", "txn_1", "txn_10", "txn_100"):
        assert row[f"{name}_records_per_s"] > 0, row
    for isolation in ("read_uncommitted", "read_committed"):
        assert row[f"fetch_{isolation}_records_per_s"] > 0, row
