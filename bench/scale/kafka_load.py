"""The Kafka load processes of ``python -m bench.scale``: confluent-kafka producers and the
consumers of one group, each in a process of its own (bench/scale/harness.py runs them)."""

from __future__ import annotations

import json
import time
from typing import Any

from bench.scale.harness import Clock, Report

# librdkafka's statistics period: the records per batch the producers made (the raw
# baseline appends batches of that size)
STATS_MS = 100


def produce(bootstrap: str, topic: str, partitions: int, records: int, value_size: int,
            batch_records: int, ready: Any, go: Any) -> Report:  # fmt: skip
    """A producer (acks=1, linger 5 ms, batches of at most ``batch_records``, no
    idempotence, librdkafka's own partitioner: null keys stick to one partition per batch)
    writing ``records`` values of ``value_size`` bytes; first one record to every partition,
    before the word (connected to every leader, metadata known). Its report counts the
    records from the word until the last was acknowledged, and librdkafka's batches:
    ``extra`` batch_records / batches."""
    from confluent_kafka import Producer

    failures: list[str] = []
    batches = {"batch_records": 0, "batches": 0}

    def failed(error: Any, _message: Any) -> None:
        failures.append(str(error))

    def stats(text: str) -> None:
        seen = json.loads(text).get("topics", {}).get(topic)
        if seen:  # a window since the last statistics: sum and count of records per batch
            batches["batch_records"] += seen["batchcnt"]["sum"]
            batches["batches"] += seen["batchcnt"]["cnt"]

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
        "enable.idempotence": False, "batch.num.messages": batch_records,
        "queue.buffering.max.messages": 1_000_000, "delivery.report.only.error": True,
        "on_delivery": failed, "statistics.interval.ms": STATS_MS, "stats_cb": stats,
    })  # fmt: skip
    value = b"x" * value_size
    for partition in range(partitions):
        producer.produce(topic, value=value, partition=partition)
    if producer.flush(60) or failures:
        raise RuntimeError(f"warm-up records not delivered: {failures[:1]}")
    producer.poll(STATS_MS / 1000 * 2)
    batches.update(batch_records=0, batches=0)
    ready.set()
    go.wait()
    clock = Clock()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    report = clock.report(records - left, errors=len(failures) + left,
                          note=failures[0] if failures else "")  # fmt: skip
    producer.poll(STATS_MS / 1000 * 2)  # the last statistics window
    report.extra.update(batches)
    return report


def consume(bootstrap: str, topic: str, group: str, index: int, assigned: Any,
            ready: Any, go: Any) -> Report:  # fmt: skip
    """A member of ``group`` reading ``topic`` from the start: its partitions are paused as
    they are assigned (``assigned[index]``: how many it holds), so nothing is read before
    the word, once the group settled; then it reads until each of its partitions reports
    its end. Clocked from its first record to its last."""
    from confluent_kafka import Consumer, KafkaError

    mine: list[Any] = []

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        consumer.assign(partitions)
        consumer.pause(partitions)
        mine[:] = partitions
        assigned[index] = len(partitions)

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        consumer.unassign()
        mine.clear()
        assigned[index] = 0

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 10,
    })  # fmt: skip
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    ready.set()
    while not go.is_set():
        consumer.poll(0.05)  # serves the rebalance callbacks; paused: no records
    clock = Clock()
    consumer.resume(mine)
    pending = {message.partition for message in mine}
    count = errors = 0
    note = ""
    first: float | None = None
    last = time.monotonic()
    deadline = time.monotonic() + 600
    while pending and time.monotonic() < deadline:
        got = 0
        if first is None:  # one record at first: the clock starts at the first record
            messages = [m for m in (consumer.poll(0.5),) if m is not None]
        else:  # consume(n) waits for n records or its timeout: a short one, not to idle
            messages = consumer.consume(10_000, 0.01)
        for message in messages:
            error = message.error()
            if error is None:
                got += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                pending.discard(message.partition())
            else:
                errors, note = errors + 1, note or str(error)
        if got:
            first = first or time.monotonic()
            count += got
            last = time.monotonic()
    if pending:
        errors, note = errors + 1, note or f"partitions {sorted(pending)} never reached the end"
    report = clock.report(count, started=first, ended=last, errors=errors, note=note)
    report.extra["partitions"] = len(mine)
    consumer.close()
    return report
