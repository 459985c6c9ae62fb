"""``python -m bench.share``: share groups (KIP-932) against classic consumer groups, in one
run.

One ``redis-server`` (a free port, AOF off) and one pod (bench/kafka.py's); a topic of
``--partitions`` partitions prefilled with ``--records`` records of ``--value-size`` bytes.
Then ``--consumers`` confluent-kafka ShareConsumers of one share group (implicit
acknowledgements: each poll accepts the records of the one before; the group reads from the
log's start, ``share.auto.offset.reset=earliest``), and as many confluent-kafka Consumers of
one classic group (auto.offset.reset earliest, no commits), each on a thread of its own,
read the whole topic. Each row is records/s from the first record any of them got until
together they got them all (what comes before the first record, the first member's joining
and assignment, is not timed; the later members' joining is); the share row's ratio is to
the classic one.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bench import kafka
from bench.report import Row, ratio
from mapping.connection.embedded import RedisProcess

DEADLINE_S = 300.0


class _Count:
    """Records got by every reader together, and when the first came."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records = 0
        self.first: float | None = None

    def add(self, records: int) -> None:
        if records:
            with self.lock:
                if self.first is None:
                    self.first = time.perf_counter()
                self.records += records


def prefill(bootstrap: str, topic: str, partitions: int, records: int, value_size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000,
    })  # fmt: skip
    value = b"x" * value_size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120) != 0:
        raise RuntimeError("the prefill was not acknowledged")


@dataclass
class Reader:
    """A consumer and its poll (a batch of messages)."""

    consumer: Any
    poll: Callable[[], list[Any]]

    def take(self) -> int:
        """One poll: how many records it got."""
        return sum(1 for m in self.poll() if m.error() is None)


def share_reader(bootstrap: str, group: str, topic: str) -> Reader:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    return Reader(consumer, lambda: consumer.poll(0.5))


def classic_reader(bootstrap: str, group: str, topic: str) -> Reader:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    return Reader(consumer, lambda: consumer.consume(1000, 0.5))


def timed_read(readers: list[Reader], records: int) -> tuple[int, float]:
    """Every reader polled on a thread of its own until together they got ``records``:
    (records got, seconds from the first record to the last)."""
    count = _Count()
    done = threading.Event()

    def run(reader: Reader) -> None:
        while not done.is_set():
            count.add(reader.take())
            if count.records >= records:
                done.set()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in readers]
    for thread in threads:
        thread.start()
    done.wait(DEADLINE_S)
    ended = time.perf_counter()
    done.set()
    for thread in threads:
        thread.join(timeout=30)
    for reader in readers:
        reader.consumer.close()
    seconds = ended - count.first if count.first is not None else 0.0
    return count.records, seconds


def _earliest(bootstrap: str, group: str) -> None:
    """The share group reads from the log's start, set as Kafka's clients set it."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    entry = ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def measure(
    redis_url: str,
    consumers: int,
    partitions: int,
    records: int,
    value_size: int,
    adapter_args: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The share row and the classic row, on a pod of their own."""
    served = kafka.pod(redis_url, adapter_args)
    try:
        bootstrap = served.bootstrap
        topic = f"share-{uuid.uuid4().hex[:8]}"
        prefill(bootstrap, topic, partitions, records, value_size)
        rows = []
        for mode, make in (("share", share_reader), ("classic", classic_reader)):
            group = f"{mode}-{topic}"
            if mode == "share":
                _earliest(bootstrap, group)
            readers = [make(bootstrap, group, topic) for _ in range(consumers)]
            got, seconds = timed_read(readers, records)
            rows.append({
                "mode": mode, "consumers": consumers, "records": got,
                "seconds": round(seconds, 3),
                "records_per_s": round(got / seconds) if seconds else 0,
            })  # fmt: skip
        share, classic = rows
        ratio = share["records_per_s"] / classic["records_per_s"] if classic["records_per_s"] else 0
        share["ratio_share_to_classic"] = round(ratio, 2)
        return rows
    finally:
        served.stop(timeout=30)


def rows(redis_url: str, records: int, adapter_args: list[str]) -> list[Row]:
    """The table rows of ``python -m bench``: share consumers against a classic group of as
    many consumers, reading the same records (3 consumers, 6 partitions)."""
    share, classic = measure(redis_url, 3, 6, records, 100, adapter_args)

    def rate(name: str, found: dict[str, Any], base: Row | None = None) -> Row:
        value = float(found["records_per_s"])
        row = Row(name, "adapter", found["consumers"], "pipelined", value, value, None, None,
                  None, note="3 consumers, 6 partitions")  # fmt: skip
        if base is not None:
            row.ratio, row.ratio_to = ratio(value, base), base.name
        return row

    classic_row = rate("Kafka classic group (confluent)", classic)
    return [classic_row, rate("Kafka share group (confluent)", share, classic_row)]


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'mode':8} {'consumers':>9} {'records':>8} {'seconds':>8} {'records/s':>10} "
             f"{'share/classic':>13}"]  # fmt: skip
    for row in rows:
        ratio = row.get("ratio_share_to_classic")
        lines.append(
            f"{row['mode']:8} {row['consumers']:>9} {row['records']:>8} {row['seconds']:>8.2f} "
            f"{row['records_per_s']:>10} {'' if ratio is None else f'{ratio:.2f}':>13}"
        )
    return "\n".join(lines)


@click.command(context_settings={"show_default": True})
@click.option("--consumers", default=3, type=click.IntRange(1), help="Consumers of each group.")
@click.option("--partitions", default=6, type=click.IntRange(1), help="The topic's partitions.")
@click.option("--records", default=100_000, type=click.IntRange(1), help="Records prefilled.")
@click.option("--value-size", default=100, type=click.IntRange(0), help="Bytes per value.")
@click.option("--adapter-args", default="", help="Extra 'adapter serve' options.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(
    consumers: int,
    partitions: int,
    records: int,
    value_size: int,
    adapter_args: str,
    json_path: Path | None,
) -> None:
    """Records/s through share consumers against a classic consumer group."""
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        rows = measure(server.url, consumers, partitions, records, value_size,
                       adapter_args.split())  # fmt: skip
    click.echo(table(rows))
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
