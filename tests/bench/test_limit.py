"""``python -m bench.limit --short`` runs end to end: each front door's table has every row,
with a positive ratio in each, and the JSON says the same (no timing is asserted); the
Kafka consumers take ``--fetch-max-bytes``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT

ROWS = [
    "produce, records/s",
    "produce, Redis CPU µs per record",
    "produce, pod CPU µs per record",
    "fetch, records/s",
    "fetch, Redis CPU µs per record",
    "fetch, pod CPU µs per record",
    "Redis memory, bytes per record",
]
HEADER = "| | through the pods | plain Redis | ratio |"


def tables(stdout: str) -> dict[str, list[list[str]]]:
    """Each ``## title``'s table rows, as cells."""
    found: dict[str, list[list[str]]] = {}
    title = ""
    for line in stdout.splitlines():
        if line.startswith("## "):
            title = line[3:]
            found[title] = []
        elif line.startswith("| ") and line != HEADER:
            found[title].append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def number(cell: str) -> float:
    assert re.fullmatch(r"[\d,]+(\.\d+)?", cell), cell
    return float(cell.replace(",", ""))


def test_limit_short_run(tmp_path: Path) -> None:
    out = tmp_path / "limit.json"
    done = subprocess.run(
        # (a fetch.max.bytes below the partitions' limits: the consumers' option passes on)
        [sys.executable, "-m", "bench.limit", "--short", "--fetch-max-bytes", "1048576",
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    printed = tables(done.stdout)
    assert [title.split(":")[0] for title in printed] == [
        "Kafka", "Kafka, batches of 4 records", "V1"
    ], done.stdout  # fmt: skip
    assert done.stdout.count(HEADER) == 3
    kafka_titles = [title for title in printed if title.startswith("Kafka")]
    assert all("consumer (fetch.max.bytes 1048576)" in title for title in kafka_titles)
    for title, rows in printed.items():
        assert [row[0] for row in rows] == ROWS, title
        for name, pods, plain, ratio in rows:
            assert number(ratio) > 0, (title, name)
            assert number(pods) > 0, (title, name)
            if "pod CPU" in name:
                assert plain == "—", (title, name)
            else:
                assert number(plain) > 0, (title, name)

    # what a record costs Redis, the pod and the client together, for each side and phase
    budgets = re.findall(
        r"^(produce|fetch), CPU a record in all: through the pods (\d+\.\d\d) µs .*"
        r"plain (\d+\.\d\d) µs .*\d+ cores give at most ([\d,]+) records/s",
        done.stdout,
        flags=re.MULTILINE,
    )
    assert [kind for kind, *_ in budgets] == ["produce", "fetch"] * 3, done.stdout
    assert all(float(ours) > 0 and float(plain) > 0 for _, ours, plain, _ in budgets), budgets

    document = json.loads(out.read_text())
    assert set(document["sections"]) == {"kafka", "kafka-small", "v1"}
    for name, section in document["sections"].items():
        records = document["records"]
        assert section["produce"]["pods"]["records"] == records, name
        assert section["produce"]["plain"]["records"] == records, name
        assert section["fetch"]["pods"]["records"] == records, name
        assert section["fetch"]["plain"]["records"] == records, name
        assert [row[0] for row in section["table"]] == ROWS
        for phase in ("produce", "fetch"):
            for side in ("pods", "plain"):
                measured = section[phase][side]
                # /proc counts 10 ms ticks: a light client (V1 CONSUME's, 0.15 µs a record)
                # over --short's 50,000 records may read none
                assert measured["client_cpu_us_per_record"] >= 0, (name, phase, side)
                assert measured["cores_busy"] > 0, (name, phase, side)
    # V1 CONSUME beside the same logs' XRANGE pages read with redis-py
    (redis_py,) = [n for n in document["sections"]["v1"]["notes"] if "redis-py" in n]
    assert re.search(r"[\d,]+ records/s; CONSUME \d+\.\d\dx that", redis_py), redis_py
