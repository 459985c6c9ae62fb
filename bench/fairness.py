"""``python -m bench.fairness``: the share each Kafka producer connection gets from one pod.

Several confluent-kafka producers (``--producers``, default 4; each in a process of its own,
so no client waits on another's GIL) write 100-byte values (acks=1, idempotence off,
linger 5 ms) into one topic through one pod, all at once, for ``--seconds``. Each counts the
records acknowledged inside that window; the row prints every producer's records/s and the
ratio of the slowest to the fastest (1.0: a perfectly even share). Not a timed test: on a
shared 2-core machine the absolute rates move with whatever else runs, the ratio much less.

One ``redis-server`` (a free port, AOF off) and one ``python -m adapter serve`` child
process, as ``bench.kafka``; ``--adapter-args`` passes extra ``serve`` options (e.g. the
backpressure bounds, to compare settings).
"""

from __future__ import annotations

import json
import multiprocessing
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click

from bench import kafka
from mapping.connection.embedded import RedisProcess

VALUE = b"x" * 100


def _produce(bootstrap: str, topic: str, seconds: float, ready: Any, go: Any, out: Any) -> None:
    """One producer: connect, say ``ready``, and once ``go`` is set produce as fast as the
    client takes records for ``seconds``; report its records/s (those produced in the window
    over the time until the last was answered: no Python callback per record, so the client
    spends its CPU on producing) and the delivery failures."""
    from confluent_kafka import Producer

    failures = [0]

    def failed(error: Any, _message: Any) -> None:
        failures[0] += 1

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
        "linger.ms": 5, "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 200_000,
        "delivery.report.only.error": True, "on_delivery": failed,
    })  # fmt: skip
    producer.produce(topic, value=VALUE)  # connected, metadata known, before the clock
    producer.flush(30)
    ready.set()
    go.wait(120)
    end = time.monotonic() + seconds
    produced = 0
    while time.monotonic() < end:
        try:
            producer.produce(topic, value=VALUE)
        except BufferError:
            producer.poll(0.005)
            continue
        produced += 1
        if produced % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    # every record produced in the window, over the time until the last was answered: a
    # share of a short window (1 s with --short) on a busy machine may end with all of a
    # producer's records still in flight, and a count taken at the window's end says 0
    out.put((produced / (time.monotonic() - end + seconds), failures[0]))


def measure(redis_url: str, producers: int, seconds: float, adapter_args: list[str]) -> dict:
    """Every producer's records/s against one pod of its own on ``redis_url``."""
    served = kafka.pod(redis_url, adapter_args)
    try:
        topic = f"fair-{uuid.uuid4().hex[:8]}"
        bootstrap = served.bootstrap
        context = multiprocessing.get_context("spawn")
        out, go = context.Queue(), context.Event()
        readies = [context.Event() for _ in range(producers)]
        workers = [
            context.Process(target=_produce, args=(bootstrap, topic, seconds, ready, go, out))
            for ready in readies
        ]
        for worker in workers:
            worker.start()
        for ready in readies:  # every producer connected before the window opens
            if not ready.wait(120):
                raise RuntimeError("a producer did not connect")
        go.set()
        reports = [out.get(timeout=seconds + 120) for _ in workers]
        for worker in workers:
            worker.join(timeout=30)
        rates = sorted((rate for rate, _ in reports), reverse=True)
    finally:
        served.stop(timeout=30)
    return {
        "producers": producers,
        "seconds": seconds,
        "records_per_s": [round(rate) for rate in rates],
        "total_records_per_s": round(sum(rates)),
        "min_max_ratio": round(rates[-1] / rates[0], 3) if rates[0] else 0.0,
        "delivery_failures": sum(failed for _, failed in reports),
    }


@click.command(context_settings={"show_default": True})
@click.option("--producers", default=4, type=click.IntRange(2), help="Producer connections.")
@click.option("--seconds", default=10.0, type=click.FloatRange(1), help="Measured window.")
@click.option("--adapter-args", default="", help="Extra 'adapter serve' options.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(producers: int, seconds: float, adapter_args: str, json_path: Path | None) -> None:
    """Per-connection records/s of several Kafka producers on one pod."""
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        row = measure(server.url, producers, seconds, adapter_args.split())
    for index, rate in enumerate(row["records_per_s"]):
        click.echo(f"producer {index + 1:<31} {rate} records/s")
    click.echo(f"{'total':40} {row['total_records_per_s']} records/s")
    click.echo(f"{'min/max ratio':40} {row['min_max_ratio']}")
    click.echo(f"{'delivery failures':40} {row['delivery_failures']}")
    if json_path is not None:
        json_path.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
