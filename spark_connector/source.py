"""The "redis-topics" Python data source: batch and micro-batch streaming reads of topics.

Planning (topic lookup, high watermarks, start/end positions, splits) happens on the driver,
so a missing topic, a bad option or an unreachable Redis fails before any task runs. Tasks
get only the options and a `RangePartition` and open their own Redis connection.
"""

from __future__ import annotations

import logging
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

from mapping.core.keys import Keys
from spark_connector import offsets, planning
from spark_connector.errors import OptionError
from spark_connector.offset_specs import Earliest, Latest
from spark_connector.offsets import Positions, RangePartition
from spark_connector.options import SourceOptions, parse_options
from spark_connector.records import read_partition, source_schema
from spark_connector.resolve import Snapshot, resolve_end, resolve_start, take_snapshot
from spark_connector.sink import batch_writer, stream_writer

SOURCE_NAME = "redis-topics"
log = logging.getLogger(__name__)


def _check_schema(opts: SourceOptions, schema: StructType) -> None:
    expected = source_schema(opts.binary, opts.include_headers)
    if schema != expected:
        raise OptionError(
            f"{SOURCE_NAME} has a fixed schema ({expected.simpleString()}); "
            f"got {schema.simpleString()} (use valueFormat=binary for binary key/value, "
            "includeHeaders=true for the headers column)"
        )


def _plan(
    client: redis.Redis, opts: SourceOptions, starts: Positions, ends: Positions, bits: int
) -> list[InputPartition]:
    """The tasks of ``[starts, ends)``: one per partition with data, more where
    maxRecordsPerPartition or minPartitions ask (planning.py)."""
    return list(
        planning.plan_tasks(
            client,
            Keys(opts.key_prefix),
            starts,
            ends,
            bits,
            opts.fetch_size,
            opts.max_records_per_partition,
            opts.min_partitions,
        )
    )


class RedisTopicsDataSource(DataSource):
    """``spark.read[Stream].format("redis-topics").option("redis.url", ...)
    .option("topic", ...).load()`` (or ``subscribe`` / ``subscribePattern``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        # load() calls this on the driver: check options, Redis and named topics right away.
        opts = parse_options(self.options)
        client = offsets.connect(opts)
        try:
            with offsets.permission_checked(opts):  # a user of another deployment: NOPERM
                offsets.describe_topics(client, Keys(opts.key_prefix), opts.subscription)
        finally:
            client.close()
        return source_schema(opts.binary, opts.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return RedisTopicsBatchReader(parse_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RedisTopicsStreamReader(parse_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return batch_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return stream_writer(dict(self.options), schema, overwrite)


class RedisTopicsBatchReader(DataSourceReader):
    """Reads ``[starting, ending)`` (default: earliest to hw) once."""

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        _check_schema(opts, schema)
        if opts.max_records_per_trigger is not None:
            # ignored, as Spark's Kafka source does (so batch and streaming jobs can share
            # one set of options), and said, as it does
            log.warning("maxOffsetsPerTrigger option ignored in batch queries")
        self.opts = opts
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        keys = Keys(opts.key_prefix)
        client = offsets.connect(opts)
        try:
            snap = take_snapshot(client, keys, opts)
            starts = resolve_start(client, keys, opts, opts.starting or Earliest(), snap)
            ends = resolve_end(client, keys, opts, opts.ending or Latest(), snap)
            starts = offsets.check_data_loss(opts, starts, ends, snap.firsts)
            return _plan(client, opts, starts, ends, snap.sequence_bits)
        finally:
            client.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark substitutes a bare InputPartition(None) when there is nothing to read.
        if isinstance(partition, RangePartition):
            yield from read_partition(self.opts, self.schema, partition)


class RedisTopicsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over Spark's Kafka offsets, ``{"<topic>": {"<partition>": <next>}}``.

    An instance lives in a long-running driver-side Python worker, so it keeps one Redis
    client (created lazily, never pickled). The topics are looked up at every micro-batch: a
    topic a pattern matches from now on, or partitions a topic gained, are read from their
    first record; a topic deleted is data loss (failOnDataLoss), as in Spark. Offsets are
    checkpointed by Spark; a restarted query resumes from them, so ``commit`` has nothing
    to do.
    """

    def __init__(self, opts: SourceOptions, schema: StructType) -> None:
        _check_schema(opts, schema)
        if opts.batch_only:
            names = ", ".join(opts.batch_only)
            raise OptionError(f"option {names} applies to batch queries only")
        self.opts = opts
        self.schema = schema
        self.keys = Keys(opts.key_prefix)
        self._client: redis.Redis | None = None
        self._target: Positions | None = None  # Trigger.AvailableNow: where to stop
        self._bits: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None
        return state

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = offsets.connect(self.opts)
        return self._client

    def _snapshot(self, *, initial: bool = False) -> Snapshot:
        # A named topic must exist when the query starts; deleted later, it is left out.
        snap = take_snapshot(self.client, self.keys, self.opts, require_all=initial)
        if snap.topics:
            self._bits = snap.sequence_bits
        return snap

    @property
    def bits(self) -> int:
        if self._bits is None:
            # The deployment's one value (mapping/core/keys.py meta), the same for every topic.
            self._bits = offsets.sequence_bits(self.client, self.keys)
        return self._bits

    def initialOffset(self) -> dict:
        snap = self._snapshot(initial=True)
        spec = self.opts.starting or Latest()
        return offsets.to_json(resolve_start(self.client, self.keys, self.opts, spec, snap))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_records_per_trigger is not None:
            return ReadMaxRows(self.opts.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._snapshot().ends

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        starts = offsets.from_json(start, self.opts)
        available = self._target if self._target is not None else self._snapshot().ends
        # A partition new to the query starts at its first record (position 0); a position
        # never moves backwards (a start past hw stays where it is).
        begins = {tp: starts.get(tp, 0) for tp in available}
        ends = {tp: max(begins[tp], end) for tp, end in available.items()}
        if isinstance(limit, ReadMaxRows):
            ends = planning.limit_ends(
                self.client,
                self.keys,
                begins,
                ends,
                limit.max_rows,
                self.bits,
                self.opts.fetch_size,
            )
        return offsets.to_json(ends)

    def reportLatestOffset(self) -> dict | None:
        return offsets.to_json(self._snapshot().ends)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        starts = offsets.from_json(start, self.opts)
        ends = offsets.from_json(end, self.opts)
        for topic, p in sorted(set(starts) - set(ends)):
            offsets.report_data_loss(
                self.opts,
                f"topic {topic!r} partition {p} is gone (the topic was deleted) at offset "
                f"{starts[(topic, p)]}: records it had may not have been read",
                "going on without it",
            )
        begins = {tp: starts.get(tp, 0) for tp in ends}
        # Retention may have removed records of [start, end) since the last micro-batch,
        # or of a partition new to the query before it was seen.
        _, firsts = offsets.bounds(self.client, self.keys, ends)
        begins = offsets.check_data_loss(self.opts, begins, ends, firsts)
        return _plan(self.client, self.opts, begins, ends, self.bits)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            yield from read_partition(self.opts, self.schema, partition)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint is the source of truth; group offsets are the sink's job."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
