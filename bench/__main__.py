"""``python -m bench``: the command line of bench/run.py (what runs where is said there)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.report import format_table, plot, save
from bench.run import Options, run
from tests.support import ROOT


@click.command(context_settings={"show_default": True})
@click.option("--short", is_flag=True, help="A few seconds in all: proves the bench works.")
@click.option("--duration", type=float, default=3.0, help="Measured seconds per row.")
@click.option("--warmup", type=float, default=0.5, help="Unmeasured seconds before each row.")
@click.option("--connections", default="1,16,256", help="Connection counts, comma-separated.")
@click.option("--load-procs", type=int, default=1, help="Load generator processes.")
@click.option("--value-size", type=int, default=100, help="Bytes per record value.")
@click.option("--prefill", type=int, default=30_000, help="Records written for CONSUME.")
@click.option("--workers", type=int, default=2, help="Also run PRODUCE on --workers N.")
@click.option("--groups/--no-groups", default=True, help="Run the groups mix rows.")
@click.option("--kafka/--no-kafka", default=True, help="Run the Kafka rows (bench/kafka.py).")
@click.option("--kafka-records", type=int, default=200_000, help="Records per Kafka row.")
@click.option(
    "--soak",
    type=float,
    default=30.0,
    help="Seconds of sustained PRODUCE watching the adapter's RSS (0: none).",
)
@click.option(
    "--adapter-args",
    default="",
    help="Extra 'adapter serve' options for the pods, e.g. '--no-uvloop'.",
)
@click.option(
    "--redis-replicas",
    type=click.IntRange(0, 4),
    default=0,
    help="Replicas following the Redis, for --adapter-args '--redis-wait-replicas N'.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the JSON goes (default bench-results/bench-<time>.json).",
)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None,
              help="Also draw a PNG (needs the 'bench' extra: matplotlib).")  # fmt: skip
def main(
    short: bool,
    duration: float,
    warmup: float,
    connections: str,
    load_procs: int,
    value_size: int,
    prefill: int,
    workers: int,
    groups: bool,
    kafka: bool,
    kafka_records: int,
    soak: float,
    adapter_args: str,
    redis_replicas: int,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Benchmark the adapter against raw redis-py on one fresh redis-server."""
    counts = [int(c) for c in connections.split(",") if c.strip()]
    if short:
        duration, warmup, prefill = min(duration, 0.3), min(warmup, 0.1), min(prefill, 3000)
        counts = [c for c in counts if c <= 16] or [1]
        soak = min(soak, 0.6)
        kafka_records, kafka_latency = min(kafka_records, 5000), 0.5
    else:
        kafka_latency = 5.0
    options = Options(
        duration,
        warmup,
        counts,
        load_procs,
        value_size,
        prefill,
        workers,
        groups,
        soak,
        adapter_args.split(),
        kafka_records if kafka else 0,
        kafka_latency,
        redis_replicas,
    )
    results = run(options, log=lambda line: click.echo(line, err=True))
    click.echo(format_table(results))
    save(results, json_path, ROOT / "bench-results", "bench", plot_path, plot)


if __name__ == "__main__":
    main()
