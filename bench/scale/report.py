"""The rows of ``python -m bench.scale`` and what is read off them: the ratio to raw Redis,
the scaling factor against the smallest configuration, every process's CPU, the table, the
JSON and the plot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from bench.scale import commands

BUSY = 0.9  # a load process above this share of a core may be what limits its row


@dataclass
class Side:
    """One side of a row (the pods, or raw Redis): records, records/s over the window, and
    each process's share of a core by role (pods, redis, loaders), and the machine's busy
    share of all its cores (host)."""

    records: int
    records_per_s: float
    cpu: dict[str, list[float]]
    errors: int = 0
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Pair:
    """A workload measured through the pods and straight to Redis."""

    workload: str
    adapter: Side
    raw: Side
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Row:
    config: str  # "primaries,pods,loaders"
    primaries: int
    pods: int
    loaders: int
    workload: str
    adapter: Side
    raw: Side
    ratio: float | None = None  # adapter / raw records/s
    scale: float | None = None  # adapter records/s / the smallest configuration's
    raw_scale: float | None = None
    check: bool = False  # a --loaders row: the same deployment, more load processes
    extra: dict[str, Any] = field(default_factory=dict)


def finish(rows: list[Row]) -> None:
    """Ratios, and scaling factors against the smallest configuration that ran the same
    workload (fewest primaries, then pods, then loaders; --loaders rows excluded); none for
    the idle rows."""
    for row in rows:
        if row.extra.get("idle"):
            continue  # CPU only: its records are the clients' count
        if row.raw.records_per_s:
            row.ratio = row.adapter.records_per_s / row.raw.records_per_s
        for role, name in (("pods", "pod"), ("redis", "redis")):  # for sizing: per busy core
            used = sum(row.adapter.cpu.get(role, []))
            if used > 0:
                row.extra[f"records_per_s_per_{name}_core"] = row.adapter.records_per_s / used
        bases = [r for r in rows if r.workload == row.workload and not r.check]
        if not bases:
            continue
        base = min(bases, key=lambda r: (r.primaries, r.pods, r.loaders))
        if base.adapter.records_per_s:
            row.scale = row.adapter.records_per_s / base.adapter.records_per_s
        if base.raw.records_per_s:
            row.raw_scale = row.raw.records_per_s / base.raw.records_per_s


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.1f}k" if value >= 1e3 else f"{value:.0f}"


def _cpu(cpu: dict[str, list[float]], roles: tuple[str, ...]) -> str:
    parts = []
    for role in roles:
        shares = " ".join(f"{share * 100:.0f}" for share in cpu.get(role, []))
        parts.append(f"{role} {shares or '-'}")
    return " | ".join(parts)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


HEADER = (
    f"{'M,P,L':<9} {'workload':<14} {'adapter':>8} {'raw':>8} {'ratio':>5} {'scale':>5} "
    f"{'raw sc':>6}  CPU % of one core per process (host: % of all cores busy): adapter run "
    "|| raw run"
)


RAW, RAW_IDLE = ("redis", "loaders", "host"), ("pods", "redis", "host")


def format_row(row: Row) -> str:
    """One line; an idle row (no throughput: CPU with idle clients || with none) says what
    its clients were on a second."""
    config = row.config + ("*" if row.check else "")
    idle = row.extra.get("idle")
    adapter, raw = ("-", "-") if idle else map(_rate, (row.adapter.records_per_s,
                                                       row.raw.records_per_s))  # fmt: skip
    text = (
        f"{config:<9} {row.workload:<14} {adapter:>8} {raw:>8} {_num(row.ratio):>5} "
        f"{_num(row.scale):>5} {_num(row.raw_scale):>6}  "
        f"{_cpu(row.adapter.cpu, ('pods', 'redis', 'loaders', 'host'))}"
        f" || {_cpu(row.raw.cpu, RAW_IDLE if idle else RAW)}"
    )
    if idle:
        text += f"\n    {idle} || no client"
    costs = [side.extra.get("redis_per_record") for side in (row.adapter, row.raw)]
    if any(costs):
        text += "\n    Redis " + " || ".join(commands.summary(c or {}) for c in costs)
    for name, side in (("adapter", row.adapter), ("raw", row.raw)):
        if side.errors:
            text += f"\n    {name} ERRORS={side.errors} {side.note!r}"
    return text


def _busy_loaders(side: Side) -> bool:
    return any(share >= BUSY for share in side.cpu.get("loaders", []))


def _verdict(base: Row, more: Row) -> str:
    """What a --loaders row says about the row of its configuration: a row that is no
    faster with more load processes was not limited by them; one that is faster was, if its
    load processes were busy, else it gained from more in flight (more producers, more
    batches) or from noise."""
    gain = more.adapter.records_per_s / base.adapter.records_per_s
    if gain < 1.1:
        verdict = "not faster: the load processes did not limit it"
    elif _busy_loaders(base.adapter):
        verdict = "faster, and its load processes were busy: they limited it"
    else:
        verdict = "faster, though no load process was busy: more in flight, or noise"
    return (f"{base.config} {base.workload}: {more.loaders} load processes give {gain:.2f}x "
            f"{base.loaders}: {verdict}")  # fmt: skip


def bottlenecks(rows: list[Row]) -> list[str]:
    """Lines naming the rows whose load processes were near a full core, what each
    --loaders row says about its configuration, and how many rows ran on a machine that was
    busy throughout (then the machine, not one process, bounds them)."""
    lines = []
    for row in rows:
        if row.check or row.extra.get("idle"):
            continue
        for name, side in (("adapter", row.adapter), ("raw", row.raw)):
            if _busy_loaders(side):
                busy = [share for share in side.cpu["loaders"] if share >= BUSY]
                lines.append(f"{row.config} {row.workload} ({name}): {len(busy)} of "
                             f"{len(side.cpu['loaders'])} load processes >= {BUSY:.0%} of a "
                             "core: the load generator may limit this row")  # fmt: skip
    for more in (row for row in rows if row.check):
        for base in rows:
            same = (base.workload, base.primaries, base.pods) == (
                more.workload, more.primaries, more.pods)  # fmt: skip
            if same and not base.check and base.adapter.records_per_s:
                lines.append(_verdict(base, more))
    hosts = [row for row in rows if row.adapter.cpu.get("host")]
    full = [row for row in hosts if row.adapter.cpu["host"][0] >= BUSY]
    if full:
        lines.append(f"{len(full)} of {len(hosts)} rows ran with the machine >= {BUSY:.0%} "
                     "busy (host): the machine bounds those, whoever used it")  # fmt: skip
    return lines


def sizing(rows: list[Row]) -> list[str]:
    """Records/s per core the pods used, and per core Redis used (a primary is one core at
    most), for each throughput row: a deployment's size follows from these (docs/scale.md)."""
    lines = []
    for row in rows:
        pod, redis = (row.extra.get(f"records_per_s_per_{name}_core") for name in ("pod", "redis"))
        if pod and redis and not row.check:
            lines.append(f"{row.config} {row.workload}: {_rate(pod)} records/s per pod core, "
                         f"{_rate(redis)} per Redis core")  # fmt: skip
    return lines


def format_table(results: dict[str, Any]) -> str:
    rows = [Row(**{**r, "adapter": Side(**r["adapter"]), "raw": Side(**r["raw"])})
            for r in results["rows"]]  # fmt: skip
    lines = [HEADER, "-" * len(HEADER), *(format_row(row) for row in rows), ""]
    lines.append("M,P,L: Redis primaries (1: one redis-server), pods, load processes (Kafka "
                 "fetch: consumers); records/s; ratio: adapter / raw; scale: against the "
                 "smallest configuration; *: a --loaders row (same Redis and pods)")  # fmt: skip
    lines += sizing(rows)
    lines += bottlenecks(rows)
    lines += results["notes"]
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    """records/s per configuration, adapter against raw, one panel per throughput workload
    (not the --loaders rows, not the idle ones)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise click.ClickException("plotting needs matplotlib: pip install -e .[bench]") from exc
    rows = [r for r in results["rows"] if not r["check"] and not r["extra"].get("idle")]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    figure, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 4),
                                squeeze=False)  # fmt: skip
    for axis, workload in zip(axes[0], workloads, strict=True):
        mine = [r for r in rows if r["workload"] == workload]
        labels = [r["config"] for r in mine]
        axis.plot(labels, [r["adapter"]["records_per_s"] for r in mine], "o-", label="adapter")
        axis.plot(labels, [r["raw"]["records_per_s"] for r in mine], "s--", color="tab:gray",
                  label="raw Redis")  # fmt: skip
        axis.set_title(workload)
        axis.set_xlabel("primaries,pods,loaders")
        axis.set_ylabel("records/s")
        axis.set_ylim(bottom=0)
        axis.legend()
    figure.suptitle("bench.scale: the adapter against raw Redis, same run")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
