"""The "redis-topics" Python data source: batch and micro-batch streaming reads of a topic.

Planning (topic lookup, high watermarks, start/end positions, splits) happens on the driver,
so a missing topic, a bad option or an unreachable Redis fails before any task runs. Tasks
get only the options and a `RangePartition` and open their own Redis connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from mapping.keys import Keys
from spark_connector import offsets
from spark_connector.offsets import Positions, RangePartition, TopicInfo
from spark_connector.options import (
    Earliest,
    Latest,
    OptionError,
    SourceOptions,
    parse_options,
)
from spark_connector.records import read_partition, source_schema
from spark_connector.sink import batch_writer, stream_writer

SOURCE_NAME = "redis-topics"


def _check_schema(opts: SourceOptions, schema: StructType) -> None:
    expected = source_schema(opts.binary)
    if schema != expected:
        raise OptionError(
            f"{SOURCE_NAME} has a fixed schema ({expected.simpleString()}); "
            f"got {schema.simpleString()} (use valueFormat=binary for binary key/value)"
        )


def _plan_splits(
    client: redis.Redis,
    opts: SourceOptions,
    info: TopicInfo,
    starts: Positions,
    ends: Positions,
) -> list[InputPartition]:
    """One task per partition with data, large ranges cut by maxRecordsPerPartition."""
    keys = Keys(opts.key_prefix)
    splits: list[InputPartition] = []
    for p in range(info.partitions):
        ranges = offsets.split_range(
            client,
            keys.partition(opts.topic, p).log,
            starts[p],
            ends[p],
            opts.max_records_per_partition,
            info.sequence_bits,
            opts.fetch_size,
        )
        splits.extend(RangePartition(p, s, e, info.sequence_bits) for s, e in ranges)
    return splits


class RedisTopicsDataSource(DataSource):
    """``spark.read[Stream].format("redis-topics").option("redis.url", ...)
    .option("topic", ...).load()``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        # load() calls this on the driver: check options, Redis and the topic right away.
        opts = parse_options(self.options)
        client = offsets.connect(opts)
        try:
            offsets.describe_topic(client, Keys(opts.key_prefix), opts.topic)
        finally:
            client.close()
        return source_schema(opts.binary)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RedisTopicsBatchReader(parse_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RedisTopicsStreamReader(parse_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return stream_writer(dict(self.options), schema, overwrite)


class RedisTopicsBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` (default: earliest to hw) once."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        # maxRecordsPerTrigger is ignored here, as Kafka's source does, so that batch and
        # streaming jobs can share one set of options.
        _check_schema(opts, schema)
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        keys = Keys(opts.key_prefix)
        client = offsets.connect(opts)
        try:
            info = offsets.describe_topic(client, keys, opts.topic)
            hw_ends = offsets.end_positions(
                client, keys, opts.topic, info.partitions, opts.durable_reads
            )
            firsts = offsets.log_starts(client, keys, opts.topic, info.partitions)
            starts = offsets.resolve_start(
                opts.starting or Earliest(),
                hw_ends,
                lambda group: offsets.group_positions(
                    client, keys, group, opts.topic, info.partitions
                ),
                firsts,
            )
            ends = offsets.resolve_end(opts.ending or Latest(), hw_ends)
            starts = offsets.check_data_loss(opts, starts, ends, firsts)
            return _plan_splits(client, opts, info, starts, ends)
        finally:
            client.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark substitutes a bare InputPartition(None) when there is nothing to read.
        if isinstance(partition, RangePartition):
            yield from read_partition(self.opts, self.schema, partition)


class RedisTopicsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over ``{"<partition>": <next offset>}`` offsets.

    An instance lives in a long-running driver-side Python worker, so it keeps one Redis
    client (created lazily, never pickled). Offsets are checkpointed by Spark; a restarted
    query resumes from them, so ``commit`` has nothing to do.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        _check_schema(opts, schema)
        if opts.ending is not None:
            raise OptionError("option endingOffsets applies to batch queries only")
        self.opts = opts
        self.schema = schema
        self.keys = Keys(opts.key_prefix)
        self._client: redis.Redis | None = None
        self._info: TopicInfo | None = None
        self._target: Positions | None = None  # Trigger.AvailableNow: where to stop

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = offsets.connect(self.opts)
        return self._client

    @property
    def info(self) -> TopicInfo:
        if self._info is None:
            # Partition counts never change, so one look-up serves the query's life.
            self._info = offsets.describe_topic(self.client, self.keys, self.opts.topic)
        return self._info

    def _hw_ends(self) -> Positions:
        return offsets.end_positions(
            self.client, self.keys, self.opts.topic, self.info.partitions, self.opts.durable_reads
        )

    def _log_starts(self) -> Positions:
        return offsets.log_starts(self.client, self.keys, self.opts.topic, self.info.partitions)

    def initialOffset(self) -> dict:
        info = self.info
        starts = offsets.resolve_start(
            self.opts.starting or Latest(),
            self._hw_ends(),
            lambda group: offsets.group_positions(
                self.client, self.keys, group, self.opts.topic, info.partitions
            ),
            self._log_starts(),
        )
        return offsets.to_json(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._hw_ends()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        info = self.info
        starts = offsets.from_json(start, info.partitions)
        available = self._target if self._target is not None else self._hw_ends()
        # Never move a partition backwards (a start past hw stays where it is).
        ends = {p: max(starts[p], available[p]) for p in starts}
        if isinstance(limit, ReadMaxRows):
            ends = offsets.limit_ends(
                self.client,
                self.keys,
                self.opts.topic,
                starts,
                ends,
                limit.max_rows,
                info.sequence_bits,
                self.opts.fetch_size,
            )
        return offsets.to_json(ends)

    def reportLatestOffset(self) -> dict | None:
        return offsets.to_json(self._hw_ends())

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        info = self.info
        starts = offsets.from_json(start, info.partitions)
        ends = offsets.from_json(end, info.partitions)
        # Retention may have removed records of [start, end) since the last micro-batch.
        starts = offsets.check_data_loss(self.opts, starts, ends, self._log_starts())
        return _plan_splits(self.client, self.opts, info, starts, ends)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            yield from read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint is the source of truth; group offsets are the sink's job."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
