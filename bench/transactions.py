"""``python -m bench.transactions``: what Kafka transactions cost (issue 23).

Produce: confluent-kafka writes ``--records`` 100-byte records in batches of
``--batch-records`` (one flush each, to one partition in turn), as an idempotent producer
(the baseline), then as a transactional one committing every 1, 10 and 100 batches; each
row is records/s and its ratio to the idempotent one (each producer first writes one
untimed record a partition, in a transaction of its own when transactional: the topic's
creation and the connections are not timed). Fetch: a confluent consumer reads the
transactional topic from the start once untimed (warm-up), then with isolation.level
read_uncommitted, then read_committed (aborted-transaction filtering and the LSO),
records/s each.

One ``redis-server`` (a free port, AOF off) and one ``serve`` child process, as
``bench.kafka``.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import click

from bench import kafka
from bench.report import Row, ratio
from mapping.connection.embedded import RedisProcess

VALUE = b"x" * 100
TXN_SIZES = (1, 10, 100)  # batches per transaction
CLIENT = {"socket.timeout.ms": 10_000, "linger.ms": 5}


def produce_rate(
    bootstrap: str, topic: str, records: int, batch_records: int, batches_per_txn: int
) -> float:
    """records/s; ``batches_per_txn`` 0: an idempotent producer, no transactions."""
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "enable.idempotence": True}
    if batches_per_txn:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer({**config, **CLIENT})
    if batches_per_txn:
        producer.init_transactions(30)
    # untimed: the topic's creation, the connections and (idempotent) the producer id, which
    # the first timed run would otherwise pay alone
    if batches_per_txn:
        producer.begin_transaction()
    for partition in range(kafka.PARTITIONS):
        producer.produce(topic, value=VALUE, partition=partition)
    producer.flush(60)
    if batches_per_txn:
        producer.commit_transaction(60)
    batches = max(1, records // batch_records)
    started = time.perf_counter()
    for index in range(batches):
        if batches_per_txn and index % batches_per_txn == 0:
            producer.begin_transaction()
        for _ in range(batch_records):
            producer.produce(topic, value=VALUE, partition=index % kafka.PARTITIONS)
        producer.flush(60)
        last = index == batches - 1
        if batches_per_txn and ((index + 1) % batches_per_txn == 0 or last):
            producer.commit_transaction(60)
    seconds = time.perf_counter() - started
    return batches * batch_records / seconds


def fetch_rate(bootstrap: str, topic: str, expected: int, isolation: str) -> float:
    """records/s of a confluent consumer reading ``topic`` from the start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "socket.timeout.ms": 10_000,
    })  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(kafka.PARTITIONS)])
    count = 0
    started = time.perf_counter()
    deadline = started + 120
    try:
        while count < expected and time.perf_counter() < deadline:
            # never more than what is left: consume() waits its whole timeout for a number
            # of messages that never comes
            wanted = min(1000, expected - count)
            count += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)
    finally:
        consumer.close()
    return count / (time.perf_counter() - started)


def measure(
    redis_url: str, records: int, batch_records: int, adapter_args: list[str] | None = None
) -> dict[str, Any]:
    served = kafka.pod(redis_url, adapter_args)
    try:
        bootstrap = served.bootstrap
        tag = uuid.uuid4().hex[:8]
        row: dict[str, Any] = {"records": records, "batch_records": batch_records}
        row["idempotent_records_per_s"] = round(
            produce_rate(bootstrap, f"idem-{tag}", records, batch_records, 0)
        )
        for size in TXN_SIZES:
            rate = produce_rate(bootstrap, f"txn{size}-{tag}", records, batch_records, size)
            row[f"txn_{size}_records_per_s"] = round(rate)
        read = f"txn1-{tag}"  # the most markers per record: read_committed's worst case
        # the timed records and the warm-up transaction's, one a partition
        written = max(1, records // batch_records) * batch_records + kafka.PARTITIONS
        fetch_rate(bootstrap, read, written, "read_uncommitted")  # untimed: warm caches
        for isolation in ("read_uncommitted", "read_committed"):
            rate = fetch_rate(bootstrap, read, written, isolation)
            row[f"fetch_{isolation}_records_per_s"] = round(rate)
        return row
    finally:
        served.stop(timeout=30)


def rows(redis_url: str, records: int, adapter_args: list[str]) -> list[Row]:
    """The table rows of ``python -m bench``."""
    found = measure(redis_url, records, 100, adapter_args)

    def rate(name: str, value: float, base: Row | None = None, note: str = "") -> Row:
        row = Row(name, "adapter", 1, "pipelined", value, value, None, None, None, note=note)
        if base is not None:
            row.ratio, row.ratio_to = ratio(value, base), base.name
        return row

    idempotent = rate("Kafka produce idempotent", found["idempotent_records_per_s"])
    table = [idempotent]
    for size in TXN_SIZES:
        table.append(rate(f"Kafka produce txn ({size} batches)",
                          found[f"txn_{size}_records_per_s"], idempotent,
                          note="100-record batches"))  # fmt: skip
    uncommitted = rate(
        "Kafka fetch read_uncommitted", found["fetch_read_uncommitted_records_per_s"]
    )
    committed = rate("Kafka fetch read_committed", found["fetch_read_committed_records_per_s"],
                     uncommitted, note="a marker every batch")  # fmt: skip
    return [*table, uncommitted, committed]


@click.command(context_settings={"show_default": True})
@click.option("--records", default=20_000, type=click.IntRange(1), help="Records per run.")
@click.option("--batch-records", default=100, type=click.IntRange(1), help="Records a batch.")
@click.option("--adapter-args", default="", help="Extra 'adapter serve' options.")
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(records: int, batch_records: int, adapter_args: str, json_path: Path | None) -> None:
    """Transactional against idempotent produce, read_committed against read_uncommitted."""
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        row = measure(server.url, records, batch_records, adapter_args.split())
    for name, value in row.items():
        click.echo(f"{name:40} {value}")
    if json_path is not None:
        json_path.write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    main()
