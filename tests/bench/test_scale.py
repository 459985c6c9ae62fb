"""``python -m bench.scale --quick`` runs end to end: every configuration's rows with their
raw baselines, the counts right, every process's CPU reported (no timing asserted); and the
pure parts of reading its output."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bench.scale import run as scale_run
from bench.scale.commands import Reading, per_record, summary
from bench.scale.deployment import Shape
from bench.scale.report import Pair, Row, Side, bottlenecks, finish
from bench.scale.run import with_needs
from bench.scale.workloads import Options, Stage
from tests.support import ROOT

WORKLOADS = ("Kafka produce", "Kafka fetch", "V1 PRODUCE", "V1 CONSUME")
RECORDS, PARTITIONS = 3000, 6  # what --quick sets


def test_scale_quick_run(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "bench.scale", "--quick", "--loaders", "2", "--workloads",
         "kafka-fetch,v1-consume,idle-consumers,idle-connections", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    rows = [r for r in results["rows"] if not r["extra"].get("idle")]
    idle = [r for r in results["rows"] if r["extra"].get("idle")]
    # --quick's configurations "1,1,1;2,2,1" (a redis-server, then a 2-primary cluster),
    # each again with --loaders 2 on the same deployment (the idle rows once)
    found = {(r["config"], r["workload"], r["check"]) for r in rows}
    expected = {(config, w, False) for config in ("1,1,1", "2,2,1") for w in WORKLOADS}
    expected |= {(config, w, True) for config in ("1,1,2", "2,2,2") for w in WORKLOADS}
    assert found == expected
    assert sorted((r["config"], r["workload"]) for r in idle) == [
        (config, w) for config in ("1,1,1", "2,2,1") for w in ("idle conns", "idle consumers")
    ]  # fmt: skip
    for row in idle:  # CPU with idle clients beside none, no rate
        adapter, quiet = row["adapter"], row["raw"]
        assert adapter["errors"] == 0 and row["ratio"] is None and row["scale"] is None, row
        # the records: connections still open at the end; consumers: records read (none)
        assert adapter["records"] == (20 if row["workload"] == "idle conns" else 0), row
        for side in (adapter, quiet):
            assert len(side["cpu"]["pods"]) == row["pods"], row
            assert len(side["cpu"]["redis"]) == row["primaries"], row
    for row in rows:
        adapter, raw = row["adapter"], row["raw"]
        for side in (adapter, raw):
            assert side["errors"] == 0 and side["records"] > 0, (row["workload"], row)
            assert side["records_per_s"] > 0, row
            assert len(side["cpu"]["redis"]) == row["primaries"], row
            assert len(side["cpu"]["host"]) == 1, row
        assert len(adapter["cpu"]["pods"]) == row["pods"], row
        # one share per load process: the raw side runs in as many as the adapter's
        processes = len(adapter["cpu"]["loaders"])
        assert processes == row["loaders"] == len(raw["cpu"]["loaders"]), row
        assert row["ratio"] > 0 and row["scale"] > 0 and row["raw_scale"] > 0, row
        if row["config"] == "1,1,1":  # the smallest configuration
            assert row["scale"] == row["raw_scale"] == 1.0
    for row in (r for r in rows if r["workload"] == "Kafka produce"):
        adapter = row["adapter"]
        assert adapter["records"] == RECORDS
        # one warm-up record per partition from each producer, then the measured records
        assert adapter["extra"]["stored"] == RECORDS + row["loaders"] * PARTITIONS
        # the raw side appends whole batches of librdkafka's size, at least as many records
        batch = raw_batch = row["raw"]["extra"]["records_per_batch"]
        assert adapter["extra"]["records_per_batch"] == batch >= 1
        assert RECORDS <= row["raw"]["records"] < RECORDS + row["loaders"] * raw_batch
        # partitions spread over every primary
        spread = row["extra"]["partitions_per_primary"]
        assert len(spread) == row["primaries"] and min(spread) > 0 and sum(spread) == PARTITIONS
        # what Redis ran per record: on the raw side its script, a call per batch, and the
        # XADD of each record inside it (the pods' own background calls are few)
        for side in (adapter, row["raw"]):
            assert side["extra"]["redis_per_record"]["cpu_us"] > 0, side
            # each process's [start, end] from the window's start: the first starts it
            spans = side["extra"]["process_spans_s"]
            assert len(spans) == row["loaders"] and min(start for start, _ in spans) == 0
            assert all(0 <= start <= end for start, end in spans), spans
        raw_commands = row["raw"]["extra"]["redis_per_record"]["commands"]
        # a call per batch, and the few of the pods' background tasks (leases, registrations)
        script_calls = round(raw_commands["evalsha"][0] * row["raw"]["records"])
        assert row["raw"]["records"] / batch <= script_calls <= row["raw"]["records"] / batch + 10
        assert raw_commands["xadd"][0] == pytest.approx(1, rel=0.05), raw_commands
        # the pods' scripts: an XADD per record, or the streamadapter module's call per batch
        # (mapping/connection/append_module.c, loaded by the test's Redis where it was built)
        commands = adapter["extra"]["redis_per_record"]["commands"]
        module = {
            "streamadapter.append", "streamadapter.produce", "streamadapter.producemany"
        } & set(commands)  # fmt: skip
        assert module or commands["xadd"][0] >= 1, commands
    produced = {r["config"]: r["adapter"]["extra"]["stored"]
                for r in rows if r["workload"] == "Kafka produce"}  # fmt: skip
    for row in (r for r in rows if r["workload"] == "Kafka fetch"):
        # every record read back, by the group and by the raw pages alike
        assert row["adapter"]["records"] == produced[row["config"]] == row["raw"]["records"]
        assert sum(row["adapter"]["extra"]["partitions_per_consumer"]) == PARTITIONS
    table = done.stdout
    assert "M,P,L" in table and "load processes give" in table, table
    assert "µs/rec; evalsha" in table, table


def test_redis_work_per_record_by_command() -> None:
    before = Reading(1000.0, {"evalsha": (10, 100), "publish": (1, 5), "info": (3, 30)})
    after = Reading(1700.0, {"evalsha": (20, 300), "publish": (11, 25), "info": (4, 40),
                             "xrange": (2, 400)})  # fmt: skip
    costs = per_record(before, after, 100)
    assert costs == {
        "cpu_us": 7.0,
        "commands": {"xrange": [0.02, 4.0], "evalsha": [0.1, 2.0], "publish": [0.1, 0.2]},
    }
    assert summary(costs, top=2) == "CPU 7.00 µs/rec; xrange 0.02x 4.00, evalsha 0.1x 2.00"
    assert per_record(before, after, 0) == {} and summary({}) == "-"


def test_configs_parse() -> None:
    assert Shape.parse("1,1,4;3,3,6") == [Shape(1, 1, 4), Shape(3, 3, 6)]
    for bad in ("1,1", "0,1,1", "1,1,1,1", ";"):
        with pytest.raises(ValueError):
            Shape.parse(bad)


def test_workloads_bring_what_they_need() -> None:
    assert with_needs(["kafka-fetch"]) == ["kafka-produce", "kafka-fetch"]
    assert with_needs(["v1-consume", "kafka-produce"]) == [
        "kafka-produce", "v1-produce", "v1-consume"
    ]  # fmt: skip
    with pytest.raises(ValueError):
        with_needs(["nope"])


def _row(config: str, rate: float, raw: float, loaders: int | None = None,
         check: bool = False) -> Row:  # fmt: skip
    m, p, n = (int(x) for x in config.split(","))
    cpu = {"loaders": [0.95] * n}
    return Row(config, m, p, loaders or n, "Kafka produce", Side(1, rate, cpu),
               Side(1, raw, {"loaders": [0.5] * n}), check=check)  # fmt: skip


def test_scaling_against_the_smallest_configuration() -> None:
    rows = [_row("3,3,6", 300.0, 900.0), _row("1,1,4", 100.0, 300.0)]
    finish(rows)
    big, small = rows
    assert (small.scale, small.raw_scale, small.ratio) == (1.0, 1.0, 100 / 300)
    assert (big.scale, big.raw_scale, big.ratio) == (3.0, 3.0, 300 / 900)


def test_busy_loaders_and_the_loaders_check_are_read_out() -> None:
    base = _row("1,1,4", 100.0, 300.0)  # its load processes at 95% of a core
    more = _row("1,1,8", 104.0, 300.0, check=True)
    limited = _row("3,3,6", 300.0, 900.0)
    grown = _row("3,3,8", 400.0, 900.0, check=True)
    idle_loaders = _row("6,6,8", 300.0, 900.0)
    idle_loaders.adapter.cpu["loaders"] = [0.2] * 8
    grown_anyway = _row("6,6,10", 400.0, 900.0, check=True)
    lines = bottlenecks([base, more, limited, grown, idle_loaders, grown_anyway])
    assert "1,1,4 Kafka produce (adapter): 4 of 4 load processes >= 90%" in lines[0]
    assert not any(line.startswith("6,6,8 Kafka produce (adapter)") for line in lines)
    verdicts = [line for line in lines if " load processes give " in line]
    assert verdicts == [
        "1,1,4 Kafka produce: 8 load processes give 1.04x 4: not faster: the load processes "
        "did not limit it",
        "3,3,6 Kafka produce: 8 load processes give 1.33x 6: faster, and its load processes "
        "were busy: they limited it",
        "6,6,8 Kafka produce: 10 load processes give 1.33x 8: faster, though no load process "
        "was busy: more in flight, or noise",
    ]


# A pod stand-in that spends its CPU in one function py-spy can name
BUSY_POD = "def spin_like_a_pod():\n    while True:\n        sum(range(1000))\nspin_like_a_pod()\n"


class _FakeDeployment:
    """What run() uses of a Deployment, with one busy Python process as its pod."""

    def __init__(self, base: Path, primaries: int, pods: int, partitions: int,
                 adapter_args: list[str]) -> None:  # fmt: skip
        self.redis_url = f"redis://fake/{primaries}"
        self.pod: subprocess.Popen[bytes] | None = None

    def start(self) -> _FakeDeployment:
        self.pod = subprocess.Popen([sys.executable, "-c", BUSY_POD])
        return self

    def stop(self) -> None:
        assert self.pod is not None
        self.pod.kill()
        self.pod.wait()

    def pod_pids(self) -> list[int]:
        assert self.pod is not None
        return [self.pod.pid]


def test_results_after_each_configuration_and_pod_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run cut short keeps the configurations it finished (``checkpoint`` after each but
    the last); ``--profile`` leaves each pod's py-spy stacks of each row."""

    def workload(stage: Stage) -> Pair:
        time.sleep(1.5)  # the row's work, while py-spy samples the pod
        side = Side(10, 5.0, {"pods": [1.0], "redis": [0.1], "loaders": [0.5]})
        return Pair("Kafka produce", side, Side(10, 10.0, {"redis": [0.2], "loaders": [0.5]}))

    monkeypatch.setattr(scale_run, "Deployment", _FakeDeployment)
    monkeypatch.setitem(scale_run.WORKLOADS, "kafka-produce", (workload, ()))
    checkpoints: list[dict[str, Any]] = []
    options = Options(10, 0.1, 0.0, 2, 10, None, 1)
    results = scale_run.run(
        [Shape(1, 1, 1), Shape(2, 2, 1)], options, ["kafka-produce"], None, [],
        log=lambda line: None, checkpoint=checkpoints.append, profile_folder=tmp_path / "prof",
    )  # fmt: skip
    assert [[r["config"] for r in c["rows"]] for c in checkpoints] == [["1,1,1"]]
    assert checkpoints[0]["notes"] == ["partial: 1 of 2 configurations so far"]
    assert checkpoints[0]["rows"][0]["ratio"] == 0.5  # finished, as the final results
    assert [r["config"] for r in results["rows"]] == ["1,1,1", "2,2,1"] and not results["notes"]
    profiles = sorted(p.name for p in (tmp_path / "prof").iterdir())
    assert profiles == ["1-1-1-kafka-produce-pod0.txt", "2-2-1-kafka-produce-pod0.txt"]
    for name in profiles:
        stacks = (tmp_path / "prof" / name).read_text()
        assert "spin_like_a_pod" in stacks, stacks[:500]
