"""``python -m bench.one``: one workload against a fresh pod, optionally under py-spy.

For finding what a row of ``python -m bench`` spends its time on: prints the row and the
CPU seconds the pod(s) and Redis used during it (a pod near 100% of one core is the
bottleneck; one well below is waiting on something else), and with ``--py-spy FILE``
records the pod with py-spy (``pip install py-spy``; ``.svg``: a flame graph, otherwise
py-spy's raw collapsed stacks). This is how the anyio per-read cost and the GC cost of
CONSUME were found (see docs/performance.md).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from bench import loadgen, profile
from bench.run import PARTITIONS, prefill_topic, start_pod
from mapping.connection.embedded import RedisProcess
from tests.support.procfs import cpu_seconds


@click.command(context_settings={"show_default": True})
@click.argument("kind", type=click.Choice(["produce", "consume", "groups"]))
@click.option("--connections", type=int, default=1)
@click.option("--window", type=int, default=1, help="Requests in flight per connection.")
@click.option("--rate", type=float, default=None, help="Paced: total requests/s (window 1).")
@click.option("--acks", default="1")
@click.option("--duration", type=float, default=4.0)
@click.option("--workers", type=int, default=1)
@click.option("--adapter-args", default="", help="Extra 'adapter serve' options.")
@click.option("--py-spy", "py_spy", type=click.Path(path_type=Path), default=None,
              help="Record the pod with py-spy into this file.")  # fmt: skip
def main(
    kind: str,
    connections: int,
    window: int,
    rate: float | None,
    acks: str,
    duration: float,
    workers: int,
    adapter_args: str,
    py_spy: Path | None,
) -> None:
    """Run KIND (produce, consume or groups) against a fresh redis-server and pod."""
    if py_spy is not None and profile.executable() is None:
        raise click.ClickException("--py-spy needs py-spy: pip install py-spy")
    with tempfile.TemporaryDirectory(prefix="bench-one-") as tmp:
        server = RedisProcess(Path(tmp) / "redis", appendonly=False)
        server.start()
        try:
            pod = start_pod(server.url, workers, Path(tmp), adapter_args.split())
        except BaseException:
            server.stop()
            raise
        try:
            pages = prefill_topic(pod.port, "one-c", 30_000, 100) if kind == "consume" else []
            load = loadgen.Load(
                port=pod.port, kind=kind, connections=connections, window=window, rate=rate,
                duration_s=duration, topic="one-c" if kind == "consume" else "one-p",
                acks=acks, pages=tuple(pages), group_prefix="one-g",
            )  # fmt: skip
            spying = [(pod.pids()[0], py_spy)] if py_spy is not None else []
            watched = [*pod.pids(), server.process.pid]  # type: ignore[union-attr]
            before = [cpu_seconds(pid) for pid in watched]
            with profile.recording(spying, rate=500):
                result = loadgen.run_load(load)
            used = [cpu_seconds(pid) - b for pid, b in zip(watched, before, strict=True)]
        finally:
            pod.stop(timeout=15)
            server.stop()
    records = result.records if kind == "consume" else result.requests
    wall = duration + load.warmup_s
    histogram = result.histogram
    click.echo(
        f"{kind} connections={connections} window={window} partitions={PARTITIONS}: "
        f"{result.requests / duration:,.0f} req/s, {records / duration:,.0f} records/s, "
        f"p50 {histogram.percentile_us(0.5):,.0f} us, p99 {histogram.percentile_us(0.99):,.0f} "
        f"us, errors {result.errors} {result.error_sample}"
    )
    shares = ", ".join(f"{seconds / wall:.0%}" for seconds in used[:-1])
    click.echo(f"CPU over {wall:g}s: pod(s) {shares} of a core; redis {used[-1] / wall:.0%}")
    if py_spy is not None:
        click.echo(f"py-spy: {py_spy}")


if __name__ == "__main__":
    main()
