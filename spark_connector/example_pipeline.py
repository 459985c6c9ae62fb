"""A ready foreachBatch pipeline: count records per key, write the counts to a topic, then
commit progress to a group.

    python -m spark_connector.example_pipeline --redis-url redis://localhost:6379/0 \\
        --topic orders --summary-topic orders-summary --group spark-counts \\
        --checkpoint /tmp/orders-ckpt

Each micro-batch prints its per-key counts (and appends them as JSON under ``--output`` when
given), writes one record per key (key = the key, value = its count in the batch) to
``--summary-topic`` through the redis-topics sink, exactly once (a replayed batch writes
nothing twice: option writerId), then stores ``max offset in the batch + 1`` per partition
in the group's committed offsets, so ``OFFSET <group> <topic> <p>`` shows how far Spark got.
The Spark checkpoint is what makes a restart exact (no gap, no duplicate); a brand-new
checkpoint starts from the group's committed offsets (``--starting-offsets`` overrides that).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import spark_connector
from mapping.core.keys import DEFAULT_PREFIX, Keys, is_valid_name
from spark_connector import offsets
from spark_connector.group_commit import commit_group_offsets
from spark_connector.options import OptionError, parse_options


@dataclass(frozen=True, slots=True)
class BatchSummary:
    batch_id: int
    records: int
    key_counts: dict[str | None, int]
    committed: dict[int, int]  # partition -> stored next offset after this batch


@dataclass
class PipelineConfig:
    redis_url: str
    topic: str
    group: str
    checkpoint: str
    key_prefix: str = DEFAULT_PREFIX
    starting_offsets: str | None = None  # None: the group's committed offsets
    max_records_per_trigger: int | None = None
    trigger_seconds: float = 5.0
    available_now: bool = False
    output: str | None = None
    summary_topic: str | None = None  # where the per-batch key counts are written
    quiet: bool = False
    extra_options: dict[str, str] = field(default_factory=dict)

    def source_options(self) -> dict[str, str]:
        options = {
            "redis.url": self.redis_url,
            "topic": self.topic,
            "keyPrefix": self.key_prefix,
            "startingOffsets": self.starting_offsets or f"group:{self.group}",
            **self.extra_options,
        }
        # The pods' login variables, so one environment serves the pods and the pipeline.
        for option, variable in (("redis.username", "ADAPTER_REDIS_USERNAME"),
                                 ("redis.password", "ADAPTER_REDIS_PASSWORD")):  # fmt: skip
            if os.environ.get(variable):
                options.setdefault(option, os.environ[variable])
        if self.max_records_per_trigger is not None:
            options["maxRecordsPerTrigger"] = str(self.max_records_per_trigger)
        return options


def write_summary(config: PipelineConfig, df: DataFrame) -> None:
    """The batch's count per key as records of ``summary_topic`` (value: the count)."""
    (
        df.groupBy("key")
        .count()
        .select("key", F.col("count").cast("string").alias("value"))
        .write.format(spark_connector.SOURCE_NAME)
        .option("redis.url", config.redis_url)
        .option("keyPrefix", config.key_prefix)
        .option("topic", config.summary_topic)
        # A writer id (with the query id and micro-batch id Spark gives the tasks): a batch
        # Spark replays after a failure finds its records written and writes nothing twice.
        .option("writerId", "summary")
        .mode("append")
        .save()
    )


def make_batch_handler(
    config: PipelineConfig, on_batch: Callable[[BatchSummary], None] | None = None
) -> Callable[[DataFrame, int], None]:
    """The foreachBatch function: process, then commit (so a crash in between re-processes
    the batch rather than losing it; the commit only moves forward)."""
    keys = Keys(config.key_prefix)
    opts = parse_options(config.source_options())

    def handle(df: DataFrame, batch_id: int) -> None:
        df = df.cache()  # read from Redis once for both aggregations below
        try:
            counts = df.groupBy("key").count().collect()
            progress = df.groupBy("partition").agg(F.max("offset").alias("last")).collect()
            key_counts = {row["key"]: int(row["count"]) for row in counts}
            if config.output and key_counts:
                (
                    df.groupBy("key")
                    .count()
                    .withColumn("batch_id", F.lit(batch_id))
                    .write.mode("append")
                    .json(config.output)
                )
            if config.summary_topic and key_counts:
                write_summary(config, df)
        finally:
            df.unpersist()
        next_offsets = {int(row["partition"]): int(row["last"]) + 1 for row in progress}
        committed: dict[int, int] = {}
        if next_offsets:
            client = offsets.connect(opts)
            try:
                committed = commit_group_offsets(
                    client, keys, config.group, config.topic, next_offsets
                )
            finally:
                client.close()
        summary = BatchSummary(batch_id, sum(key_counts.values()), key_counts, committed)
        if not config.quiet:
            top = sorted(key_counts.items(), key=lambda kv: (-kv[1], str(kv[0])))[:10]
            print(
                f"batch {batch_id}: {summary.records} records, top keys {top}, "
                f"group {config.group} offsets {committed}",
                flush=True,
            )
        if on_batch is not None:
            on_batch(summary)

    return handle


def start(
    spark: SparkSession,
    config: PipelineConfig,
    on_batch: Callable[[BatchSummary], None] | None = None,
) -> StreamingQuery:
    spark_connector.register(spark)
    reader = spark.readStream.format(spark_connector.SOURCE_NAME)
    for name, value in config.source_options().items():
        reader = reader.option(name, value)
    writer = (
        reader.load()
        .writeStream.foreachBatch(make_batch_handler(config, on_batch))
        .option("checkpointLocation", config.checkpoint)
        .queryName(f"redis-topics-{config.topic}-{config.group}")
    )
    if config.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.trigger_seconds} seconds")
    return writer.start()


def parse_args(argv: Sequence[str] | None = None) -> tuple[PipelineConfig, str]:
    """The pipeline's settings and the Spark master URL."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_connector.example_pipeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--key-prefix", default=DEFAULT_PREFIX)
    parser.add_argument("--starting-offsets", help="for a new checkpoint; default group:<group>")
    parser.add_argument("--max-records-per-trigger", type=int)
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument(
        "--available-now", action="store_true", help="process what is there, then exit"
    )
    parser.add_argument("--output", help="directory to append per-batch key counts (JSON)")
    parser.add_argument("--summary-topic", help="topic to write per-batch key counts to")
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[2]"))
    args = parser.parse_args(argv)
    if args.summary_topic is not None and not is_valid_name(args.summary_topic):
        parser.error(
            "--summary-topic must be 1-249 characters of [A-Za-z0-9._-], "
            f"got {args.summary_topic!r}"
        )
    if not is_valid_name(args.group):
        parser.error(f"--group must be 1-249 characters of [A-Za-z0-9._-], got {args.group!r}")
    config = PipelineConfig(
        redis_url=args.redis_url,
        topic=args.topic,
        group=args.group,
        checkpoint=args.checkpoint,
        key_prefix=args.key_prefix,
        starting_offsets=args.starting_offsets,
        max_records_per_trigger=args.max_records_per_trigger,
        trigger_seconds=args.trigger_seconds,
        available_now=args.available_now,
        output=args.output,
        summary_topic=args.summary_topic,
    )
    try:
        parse_options(config.source_options())  # a bad flag fails before Spark starts
    except OptionError as exc:
        parser.error(str(exc))
    return config, args.master


def _python_path_for_workers() -> None:
    # Spark's Python workers must import spark_connector and mapping too.
    root = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main(argv: Sequence[str] | None = None) -> int:
    config, master = parse_args(argv)
    _python_path_for_workers()
    spark = (
        SparkSession.builder.master(master)
        .appName(f"redis-topics example: {config.topic} -> {config.group}")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    query = start(spark, config)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
