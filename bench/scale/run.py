"""The configurations of ``python -m bench.scale`` in turn: each deployment started, its
workloads run (again with more load processes for ``--loaders``), stopped."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import profile
from bench.report import machine
from bench.scale.deployment import Deployment, Shape
from bench.scale.report import Row, finish, format_row
from bench.scale.workloads import IDLE, WORKLOADS, Options, Stage


def with_needs(names: list[str]) -> list[str]:
    """``names`` and the workloads they need (their rows are printed too), in WORKLOADS'
    order."""
    wanted = set(names)
    for name in names:
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r} (known: {', '.join(WORKLOADS)})")
        wanted |= set(WORKLOADS[name][1])
    return [name for name in WORKLOADS if name in wanted]


def run(
    shapes: list[Shape],
    options: Options,
    workloads: list[str],
    more_loaders: int | None,
    adapter_args: list[str],
    log: Callable[[str], None] = print,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
    profile_folder: Path | None = None,
) -> dict[str, Any]:
    """Every configuration in turn; ``checkpoint`` gets the results so far after each one
    (a run cut short keeps what it finished); with ``profile_folder``, every pod is
    recorded by py-spy through each row (``_profiled``)."""
    rows: list[Row] = []
    names = with_needs(workloads)
    for done, shape in enumerate(shapes, 1):
        with tempfile.TemporaryDirectory(prefix="bench-scale-") as folder:
            deployment = Deployment(Path(folder), shape.primaries, shape.pods,
                                    options.partitions, adapter_args)  # fmt: skip
            began = time.monotonic()
            deployment.start()
            try:
                log(f"{shape.label}: {shape.primaries} primaries, {shape.pods} pods "
                    f"({deployment.redis_url}) up in {time.monotonic() - began:.1f} s")  # fmt: skip
                loads = [shape.loaders]
                if more_loaders and more_loaders != shape.loaders:
                    loads.append(more_loaders)
                for loaders in loads:
                    stage = Stage(deployment, loaders, options)
                    for name in names:
                        if loaders != shape.loaders and name in IDLE:
                            continue  # (no load to add)
                        began = time.monotonic()
                        config = Shape(shape.primaries, shape.pods, loaders)
                        with _profiled(deployment, profile_folder, config.label, name):
                            pair = WORKLOADS[name][0](stage)
                        row = Row(config.label, shape.primaries, shape.pods, loaders,
                                  pair.workload, pair.adapter, pair.raw,
                                  check=loaders != shape.loaders, extra=pair.extra)  # fmt: skip
                        rows.append(row)
                        log(f"{format_row(row)}  ({time.monotonic() - began:.1f} s)")
            finally:
                deployment.stop()
        if checkpoint is not None and done < len(shapes):
            partial = _results(rows, shapes, options, workloads, more_loaders, adapter_args)
            partial["notes"].append(f"partial: {done} of {len(shapes)} configurations so far")
            checkpoint(partial)
    return _results(rows, shapes, options, workloads, more_loaders, adapter_args)


PROFILE_RATE = 200  # py-spy samples a second: enough for a row of seconds, little cost


def _profiled(deployment: Deployment, folder: Path | None, label: str,
              workload: str) -> contextlib.AbstractContextManager[Any]:  # fmt: skip
    """``--profile``: every pod recorded through the row (both its sides and their set-up:
    the pods are all but idle through the raw side), a file of raw collapsed stacks per
    pod and row, ``1-1-4-kafka-produce-pod0.txt`` (letters, digits and dashes alone)."""
    if folder is None:
        return contextlib.nullcontext()
    stem = f"{label.replace(',', '-')}-{workload}"
    targets = [(pid, folder / f"{stem}-pod{i}.txt") for i, pid in enumerate(deployment.pod_pids())]
    return profile.recording(targets, PROFILE_RATE)


def _results(
    rows: list[Row],
    shapes: list[Shape],
    options: Options,
    workloads: list[str],
    more_loaders: int | None,
    adapter_args: list[str],
) -> dict[str, Any]:
    finish(rows)
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "options": {
            **asdict(options),
            "configs": [s.label for s in shapes],
            "loaders_check": more_loaders,
            "workloads": workloads,
            "adapter_args": adapter_args,
        },
        "rows": [asdict(row) for row in rows],
        "notes": [],
    }
