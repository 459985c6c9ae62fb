"""``python -m bench --short`` runs end to end and writes its table and JSON (no timings
are asserted: the benchmark measures, tests only prove it works)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def test_bench_short_mode(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--short", "--connections", "1,4", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    rows = {(r["name"], r["connections"], r["mode"], r["workers"]) for r in results["rows"]}
    expected = {
        ("raw EVALSHA produce", 1, "pipelined", 1),
        ("raw EVALSHA produce", 1, "one-at-a-time", 1),
        ("raw XRANGE pages", 1, "pipelined", 1),
        ("PRODUCE acks=1", 16, "pipelined", 2),
    }
    for name in ("PRODUCE acks=1", "PRODUCE acks=all", "CONSUME"):
        for connections in (1, 4):
            for mode in ("pipelined", "one-at-a-time"):
                expected.add((name, connections, mode, 1))
    assert expected <= rows, expected - rows
    assert any(r["name"] == "PRODUCE acks=1 @ half max" and r["mode"] == "paced"
               for r in results["rows"])  # fmt: skip
    groups = [r for r in results["rows"] if r["name"] == "groups mix"]
    assert len(groups) == 4
    assert all(r["ratio"] and r["ratio_to"].startswith("raw group scripts") for r in groups)
    raw = {r["mode"] for r in results["rows"] if r["name"] == "raw group scripts"}
    assert raw == {"pipelined", "one-at-a-time"}
    # the Kafka rows (bench/kafka.py), each throughput row with its baseline
    kafka = {r["name"]: r for r in results["rows"] if r["name"].startswith(("Kafka", "raw k"))}
    kafka_throughput = {"raw kafka/produce.lua", "Kafka produce (confluent)",
                        "Kafka fetch (confluent)", "Kafka Fetch (plain)"}  # fmt: skip
    assert kafka_throughput | {"Kafka produce->fetch"} <= set(kafka)
    assert kafka["Kafka produce (confluent)"]["ratio_to"] == "raw kafka/produce.lua"
    assert kafka["Kafka fetch (confluent)"]["ratio_to"] == "raw XRANGE paging"
    # four producers on one pod (bench/fairness.py): each connection's share in the note
    share = kafka["Kafka 4 producers, 1 pod"]
    assert len(share["extra"]["records_per_s"]) == 4 and "min/max" in share["note"]
    throughput_only = kafka_throughput | {"raw XRANGE paging", "V1 produce_many", share["name"]}
    # bench/transactions.py's rows: records/s only
    throughput_only |= {r["name"] for r in results["rows"] if r["name"].startswith(
        ("Kafka produce idempotent", "Kafka produce txn", "Kafka fetch read_"))}  # fmt: skip
    # bench/share.py's rows: share consumers against a classic group, records/s only
    shared = kafka["Kafka share group (confluent)"]
    assert shared["ratio_to"] == "Kafka classic group (confluent)" and shared["ratio"] > 0
    throughput_only |= {shared["name"], shared["ratio_to"]}
    # bench/compaction.py's rows: produce beside compaction, its ratio the p99's
    during = next(r for r in results["rows"] if r["name"] == "produce during compaction")
    assert during["ratio_to"] == "p99 / idle p99" and during["extra"]["removed"] > 0
    for row in results["rows"]:
        assert row["requests_per_s"] > 0 and row["errors"] == 0, row
        if row["name"] in throughput_only:
            continue  # throughput only: no per-request latency measured
        assert row["p50_us"] is not None and row["p99_us"] >= row["p50_us"], row
    assert [t["goal"] for t in results["targets"]]
    assert len(results["memory"]) > 1 and all(m["rss_mib"] > 0 for m in results["memory"])
    table = done.stdout
    assert "raw EVALSHA produce" in table and "PRODUCE acks=1" in table and "ratio" in table


def test_bench_one_workload() -> None:
    """``python -m bench.one`` (the profiling helper) runs one workload on a fresh pod and
    prints its row and the CPU the pod and Redis used."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.one", "groups", "--connections", "2", "--window", "4",
         "--duration", "0.5", "--adapter-args=--no-uvloop"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = done.stdout.splitlines()[:2]
    assert first.startswith("groups connections=2 window=4") and "errors 0" in first, first
    assert second.startswith("CPU over") and "redis" in second, second


def test_script_cost_counts_instructions_per_record() -> None:
    """``python -m bench.script_cost`` (callgrind in Redis' request handling) prints, per
    shape and batch size, the instructions per record, the part inside EVALSHA and the ratio
    to plain XADD: a record with a header costs more than one without (it takes the generic
    field list), a small batch more per record than a large one (the call's own work), and
    the module's STREAMADAPTER.PRODUCE less than the script (no interpreter)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.script_cost", "--records", "50,4", "--total", "100",
         "--shapes", "kafka key,kafka key + header,kafka key as sent (PRODUCE)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    costs: dict[tuple[str, int], tuple[int, str, float]] = {}
    for line in done.stdout.splitlines()[1:]:
        size, whole, script, ratio = line[44:].split()
        costs[line[:44].strip(), int(size)] = (int(whole.replace(",", "")), script, float(ratio))
    shapes = {"plain XADD", "kafka key", "kafka key + header", "kafka key as sent (PRODUCE)"}
    assert set(costs) == {(shape, size) for shape in shapes for size in (50, 4)}
    for (shape, size), (whole, script, ratio) in costs.items():
        assert whole > 1000, (shape, size)
        if shape == "plain XADD":
            assert (script, ratio) == ("-", 1.0)
        else:
            assert 1000 < int(script.replace(",", "")) < whole, (shape, size)
            # the scripts cost more than plain XADD; the module's command, at 50 records a
            # call, less
            assert (ratio > 1.0) is (shape != "kafka key as sent (PRODUCE)" or size == 4)
    assert costs["kafka key + header", 50][0] > costs["kafka key", 50][0]
    assert costs["kafka key", 4][0] > costs["kafka key", 50][0]
    for size in (50, 4):
        assert costs["kafka key as sent (PRODUCE)", size][0] < costs["kafka key", size][0]
