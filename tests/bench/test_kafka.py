"""``python -m bench.kafka`` runs end to end (small numbers: a smoke test, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_kafka_bench_short_run(tmp_path: Path) -> None:
    out = tmp_path / "kafka.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.kafka", "--records", "3000", "--latency-seconds", "0.5",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())
    for name in ("produce_kafka", "produce_raw_script", "produce_v1_pipelined", "fetch_kafka"):
        assert rows[f"{name}_records_per_s"] > 0, rows
    assert rows["fetch_raw_xrange_records_per_s"] > 0
    assert rows["latency_p99_ms"] >= rows["latency_p50_ms"] > 0


def test_fairness_bench_short_run(tmp_path: Path) -> None:
    """``python -m bench.fairness`` runs end to end and reports every producer (no timing)."""
    out = tmp_path / "fairness.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.fairness", "--producers", "2", "--seconds", "1",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    row = json.loads(out.read_text())
    assert len(row["records_per_s"]) == 2 and min(row["records_per_s"]) > 0, row
    assert 0 < row["min_max_ratio"] <= 1 and row["delivery_failures"] == 0
