"""``python -m bench.share`` runs end to end (small numbers: a smoke test, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_share_bench_short_run(tmp_path: Path) -> None:
    out = tmp_path / "share.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.share", "--consumers", "2", "--partitions", "2",
         "--records", "200", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    share, classic = json.loads(out.read_text())
    assert (share["mode"], classic["mode"]) == ("share", "classic")
    for row in (share, classic):
        assert row["records"] >= 200 and row["records_per_s"] > 0, row
    assert share["ratio_share_to_classic"] > 0
    assert "share/classic" in done.stdout
