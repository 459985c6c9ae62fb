"""``python -m bench.console --short`` runs end to end: its table has a row for every page,
each answered 200 with a measured time and a verdict against the budget (no timing is
asserted), and the JSON says the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT
from tests.support.console import CHROMIUM

HEADER = (
    "| page | path | status | median ms | p95 ms | browser median ms | browser p95 ms "
    "| budget ms | verdict |"
)
PAGES = [
    "deployment",
    "topics",
    "topics, page 2",
    "topics, search '0025'",
    "topic",
    "messages",
    "groups",
    "group",
]


def test_console_bench_short_run(tmp_path: Path) -> None:
    out = tmp_path / "console.json"
    browser = CHROMIUM.exists()  # the page loads in Chromium too, where it is installed
    done = subprocess.run(
        [sys.executable, "-m", "bench.console", "--short", "--json", str(out),
         "--browser" if browser else "--no-browser"],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert HEADER in lines, done.stdout
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in lines[lines.index(HEADER) + 2 :]
        if line.startswith("| ")
    ]
    assert [row[0] for row in rows] == PAGES, done.stdout
    for page, path, status, median, p95, loaded, loaded_p95, budget, verdict in rows:
        assert path.startswith("/"), page
        assert status == "200", (page, path)
        assert float(median) > 0 and float(p95) >= float(median), page
        if browser:
            assert 0 < float(loaded) <= float(loaded_p95), page
        else:
            assert loaded == loaded_p95 == "-", page
        assert budget == "200" and verdict in ("PASS", "OVER"), page
    found = json.loads(out.read_text())
    seeded = found["seeded"]
    assert (seeded["topics"], seeded["partitions"], seeded["records"]) == (50, 500, 45)
    assert [page["status"] for page in found["pages"]] == [200] * len(PAGES)
