"""``python -m bench.spark_sink``: rows/s written by the redis-topics Spark sink vs a raw
redis-py pipeline of the same appends, in one run, ratios printed.

- one ``redis-server`` started here (``mapping.connection.embedded.RedisProcess``, free port, AOF
off);
- raw: this process, redis-py + hiredis, ``XADD`` of the same records (fields key, value,
  ts; ids chosen by Redis) to the same partition logs, ``--batch-size`` per pipeline;
- appender: the sink's Redis side without Spark (``spark_connector.appender.Appender``: the
  ``spark/sink_append.lua`` calls with their replay markers, pipelined the same way), one task;
- spark: ``df.write.format("redis-topics").save()`` of a DataFrame of the same rows
  (cached first, so Spark's own generation is not counted), ``local[N]``, one task per core.

Every row writes ``--rows`` records of ``--value-size`` bytes with 256 distinct keys to a
fresh 3-partition RF 1 topic (acks=all then answers from the append itself). A benchmark
script, not a test: the figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from mapping.topic.partitioner import partition_for
from spark_connector.appender import Appender, ensure_topic, sequence_bits
from spark_connector.sink_options import parse_sink_options
from spark_connector.sink_records import Record

PARTITIONS = 3


def _records(rows: int, value_size: int) -> list[tuple[bytes, bytes]]:
    value = b"v" * value_size
    return [(b"k%d" % (i % 256), value) for i in range(rows)]


def _options(url: str, topic: str, batch_size: int) -> dict[str, str]:
    return {
        "redis.url": url,
        "topic": topic,
        "batchSize": str(batch_size),
        "topic.partitions": str(PARTITIONS),
        "topic.replicationFactor": "1",
    }


def raw_pipeline(url: str, topic: str, records: list[tuple[bytes, bytes]], batch: int) -> float:
    keys = Keys()
    logs = [keys.partition(topic, p).log for p in range(PARTITIONS)]
    client = redis.Redis.from_url(url)
    try:
        started = time.perf_counter()
        ts = str(int(time.time() * 1000))
        for start in range(0, len(records), batch):
            pipe = client.pipeline(transaction=False)
            for key, value in records[start : start + batch]:
                log = logs[partition_for(key, PARTITIONS)]
                pipe.xadd(log, {"key": key, "value": value, "ts": ts})
            pipe.execute()
        return time.perf_counter() - started
    finally:
        client.close()


def appender(url: str, topic: str, records: list[tuple[bytes, bytes]], batch: int) -> float:
    opts = parse_sink_options(_options(url, topic, batch))
    client = redis.Redis.from_url(url)
    try:
        ensure_topic(client, Keys(), topic, opts.new_topics)
        bits = sequence_bits(client, Keys())
        started = time.perf_counter()
        task = Appender(client, opts, bits, marker="bench:0", epoch=0, task_partition=0)
        for key, value in records:
            task.add(Record(None, None, key, value))
        task.finish()
        return time.perf_counter() - started
    finally:
        client.close()


def spark_save(
    url: str, topic: str, records: list[tuple[bytes, bytes]], batch: int, cores: int
) -> float:
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("bench.spark_sink")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark_connector.register(spark)
        df = spark.createDataFrame(records, "key binary, value binary").repartition(cores).cache()
        df.count()
        writer = df.write.format("redis-topics").mode("append")
        for name, value in _options(url, topic, batch).items():
            writer = writer.option(name, value)
        started = time.perf_counter()
        writer.save()
        return time.perf_counter() - started
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_sink", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--cores", type=int, default=2, help="Spark local[N]")
    parser.add_argument("--no-spark", action="store_true", help="raw and appender rows only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = parser.parse_args(argv)

    records = _records(args.rows, args.value_size)
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(Path(tmp) / "redis", appendonly=False)
        server.start()
        try:
            runs: list[tuple[str, Callable[[str, str], float]]] = [
                ("raw XADD pipeline", lambda u, t: raw_pipeline(u, t, records, args.batch_size)),
                ("sink appender", lambda u, t: appender(u, t, records, args.batch_size)),
            ]
            if not args.no_spark:
                runs.append(
                    (
                        f"spark save() local[{args.cores}]",
                        lambda u, t: spark_save(u, t, records, args.batch_size, args.cores),
                    )
                )
            rows = []
            for i, (name, run) in enumerate(runs):
                seconds = run(server.url, f"bench-sink-{i}")
                rows.append({"row": name, "rows": args.rows, "rows_per_s": args.rows / seconds})
        finally:
            server.stop()
    raw = rows[0]["rows_per_s"]
    print(f"{'row':<28} {'rows':>9} {'rows/s':>12} {'vs raw':>8}")
    for row in rows:
        row["ratio_to_raw"] = row["rows_per_s"] / raw
        print(
            f"{row['row']:<28} {row['rows']:>9} {row['rows_per_s']:>12,.0f} "
            f"{row['ratio_to_raw']:>7.2f}x"
        )
    if args.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
