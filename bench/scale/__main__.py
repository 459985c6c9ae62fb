"""``python -m bench.scale``: the command line of the scale-out benchmark (what runs where:
bench/scale/__init__.py; how to read it: docs/scale.md)."""

from __future__ import annotations

from pathlib import Path

import click

from bench import profile
from bench.report import default_json_path, save, write_json
from bench.scale.deployment import Shape
from bench.scale.report import format_table, plot
from bench.scale.run import run
from bench.scale.workloads import THROUGHPUT, WORKLOADS, Options
from tests.support import ROOT

# The curve of the earlier 16-core measurement (docs/scale.md)
DEFAULT_CONFIGS = "1,1,4;1,4,6;3,3,6;6,6,8;6,8,10"
QUICK_CONFIGS = "1,1,1;2,2,1"


@click.command(context_settings={"show_default": True})
@click.option(
    "--configs",
    default=DEFAULT_CONFIGS,
    help="primaries,pods,loaders;... (1 primary: one redis-server, else a cluster).",
)
@click.option(
    "--loaders",
    "more_loaders",
    type=click.IntRange(1),
    default=None,
    help="Also run every configuration with this many load processes (same Redis and "
    "pods): a row that is not faster with them was not limited by the load generator.",
)
@click.option(
    "--consumers",
    type=click.IntRange(1),
    default=None,
    help="Kafka fetch consumers (default: the configuration's loaders).",
)
@click.option(
    "--records",
    type=click.IntRange(1),
    default=200_000,
    help="Kafka produce records, over all producers (fetch reads them back).",
)
@click.option("--duration", type=float, default=3.0, help="Measured seconds of V1 and idle rows.")
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=24,
    help="Partitions of every topic, spread over the primaries.",
)
@click.option("--value-size", type=click.IntRange(1), default=100, help="Bytes per value.")
@click.option(
    "--batch-records",
    type=click.IntRange(1),
    default=10_000,
    help="Kafka produce: the most records in one of librdkafka's batches (batch.num.messages); "
    "a few, as many producers over many partitions make them, measure the per-batch costs.",
)
@click.option("--v1-connections", type=click.IntRange(1), default=8, help="V1 connections per pod.")
@click.option(
    "--workloads",
    default=",".join(THROUGHPUT),
    help=f"Comma-separated, of {', '.join(WORKLOADS)}; kafka-fetch and v1-consume bring "
    "their produce along.",
)
@click.option(
    "--idle-partitions",
    type=click.IntRange(1),
    default=2000,
    help="idle-consumers: partitions of the topic they wait on.",
)
@click.option(
    "--idle-consumers",
    type=click.IntRange(1),
    default=10,
    help="idle-consumers: consumers in the group.",
)
@click.option(
    "--idle-connections",
    type=click.IntRange(1),
    default=1000,
    help="idle-connections: V1 connections over all pods (a pod takes --max-connections, "
    "1000 by default).",
)
@click.option("--adapter-args", default="", help="Extra 'adapter serve' options for the pods.")
@click.option(
    "--quick",
    is_flag=True,
    help=f"Seconds in all: configurations {QUICK_CONFIGS}, 3,000 records, 6 partitions, "
    "0.5 s rows, idle rows of 50 partitions, 2 consumers and 20 connections (proves the "
    "tool works, measures nothing).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the JSON goes (default bench-results/scale-<time>.json); it is written after "
    "each configuration too, so a run cut short keeps the ones it finished.",
)
@click.option(
    "--profile",
    "profile_folder",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Record every pod with py-spy through each row, a file of raw collapsed stacks per "
    "pod and row in this folder (needs py-spy: the 'bench' extra).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Also draw a PNG (needs the 'bench' extra: matplotlib).",
)
def main(
    configs: str,
    more_loaders: int | None,
    consumers: int | None,
    records: int,
    duration: float,
    partitions: int,
    value_size: int,
    batch_records: int,
    v1_connections: int,
    workloads: str,
    idle_partitions: int,
    idle_consumers: int,
    idle_connections: int,
    adapter_args: str,
    quick: bool,
    json_path: Path | None,
    profile_folder: Path | None,
    plot_path: Path | None,
) -> None:
    """Throughput as Redis primaries and pods are added, beside raw Redis in the same run."""
    warmup = 0.5
    if quick:
        if configs == DEFAULT_CONFIGS:
            configs = QUICK_CONFIGS
        records, partitions = min(records, 3000), min(partitions, 6)
        duration, warmup, v1_connections = min(duration, 0.5), 0.2, min(v1_connections, 2)
        idle_partitions, idle_consumers = min(idle_partitions, 50), min(idle_consumers, 2)
        idle_connections = min(idle_connections, 20)
    try:
        shapes = Shape.parse(configs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--configs") from exc
    if profile_folder is not None and profile.executable() is None:
        raise click.BadParameter("needs py-spy: pip install py-spy", param_hint="--profile")
    if json_path is None:
        json_path = default_json_path(ROOT / "bench-results", "scale")
    names = [name.strip() for name in workloads.split(",") if name.strip()]
    if not names or any(name not in WORKLOADS for name in names):
        raise click.BadParameter(f"known: {', '.join(WORKLOADS)}", param_hint="--workloads")
    options = Options(
        records, duration, warmup, partitions, value_size, consumers, v1_connections,
        idle_partitions, idle_consumers, idle_connections, batch_records,
    )  # fmt: skip
    results = run(shapes, options, names, more_loaders, adapter_args.split(),
                  log=lambda line: click.echo(line, err=True),
                  checkpoint=lambda partial: write_json(json_path, partial),
                  profile_folder=profile_folder)  # fmt: skip
    if quick:
        results["notes"].append("--quick: a smoke run, its numbers mean nothing")
    click.echo(format_table(results))
    save(results, json_path, ROOT / "bench-results", "scale", plot_path, plot)


if __name__ == "__main__":
    main()
