"""The benchmark's rows and what is read off them: the ratios to the baseline, the goals
met or missed, the table and the plot (bench/run.py measures the rows)."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.stats import Histogram


@dataclass
class Row:
    name: str
    system: str  # "redis" (baseline) or "adapter"
    connections: int
    mode: str  # "pipelined", "one-at-a-time", "paced"
    requests_per_s: float
    records_per_s: float
    p50_us: float | None
    p99_us: float | None
    p999_us: float | None
    workers: int = 1
    ratio: float | None = None
    ratio_to: str = ""
    errors: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def make_row(name: str, system: str, connections: int, mode: str, requests: int, records: int,
         seconds: float, histogram: Histogram, **kwargs: Any) -> Row:  # fmt: skip
    return Row(
        name,
        system,
        connections,
        mode,
        requests / seconds if seconds else 0.0,
        records / seconds if seconds else 0.0,
        histogram.percentile_us(0.50),
        histogram.percentile_us(0.99),
        histogram.percentile_us(0.999),
        **kwargs,
    )


def ratio(value: float, base: Row, records: bool = False) -> float | None:
    reference = base.records_per_s if records else base.requests_per_s
    return value / reference if reference else None


def targets(rows: list[Row]) -> list[dict[str, Any]]:
    """The issue's goals, each read off one row."""

    def find(name: str, mode: str, workers: int = 1) -> list[Row]:
        return [r for r in rows if r.name == name and r.mode == mode and r.workers == workers
                and r.ratio is not None]  # fmt: skip

    targets = []

    def best(goal: str, candidates: list[Row], threshold: float, lower: bool = False) -> None:
        if not candidates:
            targets.append({"goal": goal, "value": None, "met": False, "row": "not measured"})
            return
        pick = min(candidates, key=lambda r: r.ratio) if lower else max(
            candidates, key=lambda r: r.ratio)  # fmt: skip
        assert pick.ratio is not None
        met = pick.ratio <= threshold if lower else pick.ratio >= threshold
        where = f"{pick.name}, {pick.connections} conn, {pick.mode}, {pick.workers} worker(s)"
        targets.append({"goal": goal, "value": round(pick.ratio, 2), "met": met, "row": where})

    best("pipelined PRODUCE acks=1, one process >= 1.0x raw EVALSHA",
         find("PRODUCE acks=1", "pipelined"), 1.0)  # fmt: skip
    best("CONSUME >= 0.8x raw XRANGE records/s", find("CONSUME", "pipelined"), 0.8)
    best("--workers 2 >= 1.6x one worker", find("PRODUCE acks=1", "pipelined", 2), 1.6)
    best("p99 unpipelined PRODUCE at half max rate <= 3x raw EVALSHA p99",
         find("PRODUCE acks=1 @ half max", "paced"), 3.0, lower=True)  # fmt: skip
    best("Kafka produce >= 0.7x raw kafka/produce.lua",
         find("Kafka produce (confluent)", "pipelined"), 0.7)  # fmt: skip
    produce = find("Kafka produce (confluent)", "pipelined")
    if produce:
        value = produce[0].extra["ratio_to_v1"]
        targets.append({
            "goal": "Kafka produce >= 5x V1 pipelined PRODUCE", "value": value,
            "met": value >= 5, "row": "Kafka produce (confluent) / V1 produce_many",
        })  # fmt: skip
    best("Kafka fetch (caught-up consumer) >= 0.8x raw XRANGE paging",
         find("Kafka fetch (confluent)", "pipelined"), 0.8)  # fmt: skip
    return targets


HEADER = (
    f"{'row':<26} {'sys':<7} {'w':>1} {'conn':>4} {'mode':<13} {'req/s':>9} {'rec/s':>9} "
    f"{'p50 us':>8} {'p99 us':>8} {'p999 us':>8} {'ratio':>6}  vs / note"
)


def _num(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def format_row(row: Row) -> str:
    note = row.ratio_to
    if row.errors:
        note += f" ERRORS={row.errors} {row.note!r}"
    elif row.note:
        note += f" {row.note}"
    return (
        f"{row.name:<26} {row.system:<7} {row.workers:>1} {row.connections:>4} {row.mode:<13} "
        f"{_num(row.requests_per_s):>9} {_num(row.records_per_s):>9} {_num(row.p50_us):>8} "
        f"{_num(row.p99_us):>8} {_num(row.p999_us):>8} {_num(row.ratio, 2):>6}  {note}"
    )


def format_table(results: dict[str, Any]) -> str:
    lines = [HEADER, "-" * len(HEADER)]
    lines += [format_row(Row(**row)) for row in results["rows"]]
    lines.append("")
    for target in results["targets"]:
        status = "MET " if target["met"] else "MISS"
        lines.append(f"[{status}] {target['goal']}: {target['value']}  ({target['row']})")
    rss = [m["rss_mib"] for m in results["memory"]]
    if rss:
        lines.append(f"adapter RSS MiB over the run: {' '.join(f'{r:.1f}' for r in rss)}")
    lines += results["notes"]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise click.ClickException("plotting needs matplotlib: pip install -e .[bench]") from exc
    rows = [r for r in results["rows"] if r["requests_per_s"]]
    labels = [f"{r['name']} {r['connections']}c {r['mode']} w{r['workers']}" for r in rows]
    figure, (left, right) = plt.subplots(1, 2, figsize=(14, 0.32 * len(rows) + 2))
    colors = ["tab:gray" if r["system"] == "redis" else "tab:blue" for r in rows]
    left.barh(labels, [r["records_per_s"] for r in rows], color=colors)
    left.set_xlabel("records/s (one per PRODUCE; CONSUME and XRANGE: records returned)")
    left.set_xscale("log")
    left.invert_yaxis()
    right.barh(labels, [r["p99_us"] or 0 for r in rows], color=colors)
    right.set_xlabel("p99 latency (us)")
    right.set_xscale("log")
    right.invert_yaxis()
    right.set_yticklabels([])
    figure.suptitle("adapter (blue) vs raw redis-py (gray), same Redis")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def machine() -> dict[str, Any]:
    """What a run's results say of the machine that measured them."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def default_json_path(default_dir: Path, kind: str) -> Path:
    """``default_dir/<kind>-<time>.json``."""
    return default_dir / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"


def write_json(json_path: Path, results: dict[str, Any]) -> None:
    """``results`` as indented JSON at ``json_path`` (its folder made if missing)."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=2))


def save(
    results: dict[str, Any],
    json_path: Path | None,
    default_dir: Path,
    kind: str,
    plot_path: Path | None = None,
    draw: Callable[[dict[str, Any], Path], None] | None = None,
) -> None:
    """Write ``results`` as JSON (default ``default_dir/<kind>-<time>.json``) and, when asked,
    draw them; say where."""
    if json_path is None:
        json_path = default_json_path(default_dir, kind)
    write_json(json_path, results)
    click.echo(f"JSON: {json_path}")
    if plot_path is not None and draw is not None:
        draw(results, plot_path)
        click.echo(f"plot: {plot_path}")
