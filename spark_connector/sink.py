"""The "redis-topics" sink: ``df.write`` (batch) and ``df.writeStream`` (micro-batch) to topics.

Planning happens on the driver: options, columns, Redis and the topic (created with the
``topic.*`` settings when missing) are checked when the writer is made, before any task runs.
Each task opens its own Redis connection and appends through ``appender.Appender``.

Replay protection (see appender.py and docs/guide.md's Spark section): a task's marker is
``<writer id>:<task partition>``. A streaming query's writer id is its query id (kept in the
checkpoint, so the same after a restart) and the epoch is the micro-batch id, which Spark's
MicroBatchExecution hands to every task as the local property ``streaming.sql.batchId``.
A batch write gets a fresh writer id per ``save()``, which makes task retries idempotent (its
markers are deleted when the job commits or aborts). Inside ``foreachBatch``, option
``writerId`` makes a replayed micro-batch idempotent: the writer id becomes
``<writerId>:<query id>`` and the epoch the micro-batch id, both from the tasks' local
properties. Elsewhere ``writerId`` + ``batchId`` set them by hand.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import redis
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from mapping.core.keys import Keys
from spark_connector import offsets
from spark_connector.appender import (
    Appender,
    PartitionWritten,
    ensure_topic,
    sequence_bits,
)
from spark_connector.errors import RedisPermissionDenied
from spark_connector.options import OptionError
from spark_connector.sink_options import SinkOptions, SinkWriteError, parse_sink_options
from spark_connector.sink_records import check_sink_schema, records_of

# What Spark's MicroBatchExecution / StreamExecution set on every task of a micro-batch.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def _micro_batch() -> tuple[str | None, int | None]:
    """(query id, micro-batch id) of the streaming query running this task, if any."""
    task = TaskContext.get()
    if task is None:
        return None, None
    query_id = task.getLocalProperty(QUERY_ID_PROPERTY) or None
    batch_id = task.getLocalProperty(BATCH_ID_PROPERTY)
    return query_id, int(batch_id) if batch_id is not None else None


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    marker: str
    written: list[PartitionWritten]


class _SinkWriter:
    """What the batch and the streaming writer share: driver checks, then the task's write."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise OptionError(
                "redis-topics topics are append-only logs: use mode('append') "
                "(streaming: outputMode append), not overwrite/complete"
            )
        opts = parse_sink_options(options)
        check_sink_schema(schema, opts.topic)
        client = offsets.connect(opts.connection)  # unreachable Redis: fails here
        try:
            keys = Keys(opts.key_prefix)
            with offsets.permission_checked(opts.connection):  # NOPERM: a clear error
                self.sequence_bits = sequence_bits(client, keys)
                if opts.topic is not None:
                    ensure_topic(client, keys, opts.topic, opts.new_topics)
        finally:
            client.close()
        self.opts = opts

    def _write(
        self, batches: Iterator[pa.RecordBatch], writer_id: str, epoch: int
    ) -> SinkCommitMessage:
        task = TaskContext.get()
        task_partition = task.partitionId() if task is not None else 0
        marker = f"{writer_id}:{task_partition}"
        client = offsets.client_for(self.opts.connection)
        try:
            appender = Appender(
                client,
                self.opts,
                self.sequence_bits,
                marker=marker,
                epoch=epoch,
                task_partition=task_partition,
            )
            for record in records_of(batches):
                appender.add(record)
            return SinkCommitMessage(marker, appender.finish())
        except redis.exceptions.NoPermissionError as exc:
            message = offsets.permission_message(self.opts.connection, exc)
            raise RedisPermissionDenied(message) from None
        except redis.RedisError as exc:
            raise SinkWriteError(f"redis-topics sink: {exc}") from exc
        finally:
            client.close()


class RedisTopicsBatchWriter(_SinkWriter, DataSourceArrowWriter):
    """``df.write.format("redis-topics")...save()``: each task appends its rows; a retried
    task does not append twice. Not transactional: rows of tasks that succeeded stay when the
    job fails (as with Spark's Kafka sink)."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        self.save_id = uuid.uuid4().hex  # one per save(): a retried task is idempotent

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        name, batch_id = self.opts.writer_id, self.opts.batch_id
        if name is None:
            return self._write(iterator, f"save-{self.save_id}", 0)
        if batch_id is not None:
            return self._write(iterator, f"writer-{name}", batch_id)
        # Inside foreachBatch the job runs in the query's thread: its tasks carry the query
        # id and micro-batch id. The query id scopes the markers, so a new checkpoint (new
        # query id, batch ids from 0 again) never meets an old run's markers.
        query_id, micro_batch = _micro_batch()
        if query_id is None or micro_batch is None:
            raise SinkWriteError(
                "option writerId without batchId works inside foreachBatch only (the task "
                "carries no streaming query id / batch id); set batchId for other batch writes"
            )
        return self._write(iterator, f"writer-{name}:{query_id}", micro_batch)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._forget_markers(messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._forget_markers(messages)

    def _forget_markers(self, messages: list[WriterCommitMessage | None]) -> None:
        """A one-off save() is over: no task of it runs again, so its markers have done their
        job. A stable writerId keeps them: the next batch id overwrites them in place."""
        if self.opts.writer_id is not None:
            return
        keys = Keys(self.opts.key_prefix)
        client = offsets.client_for(self.opts.connection)
        try:
            pipe = client.pipeline(transaction=False)
            for message in messages:
                if isinstance(message, SinkCommitMessage):
                    for w in message.written:
                        pipe.hdel(keys.sink_markers(w.topic, w.partition), message.marker)
            pipe.execute()
        finally:
            client.close()


class RedisTopicsStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("redis-topics")...start()``: exactly once per micro-batch,
    as long as a replayed batch gives each task the same rows in the same order (true for a
    replayable source, such as this connector's, and a deterministic query)."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        super().__init__(options, schema, overwrite)
        if self.opts.writer_id is not None:
            raise OptionError(
                "options writerId/batchId are for batch writes (df.write in foreachBatch); "
                "a streaming write is keyed by its query id and micro-batch id"
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        query_id, batch_id = _micro_batch()
        if query_id is None or batch_id is None:
            raise SinkWriteError(
                "redis-topics streaming sink: the task carries no streaming query id / batch "
                f"id ({QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY}); only micro-batch "
                "triggers are supported"
            )
        return self._write(iterator, f"query-{query_id}", batch_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Tasks' appends are already visible once the hw reaches them; nothing to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """The batch will be replayed; the markers make the replay skip what is stored."""


def batch_writer(
    options: dict[str, str], schema: StructType, overwrite: bool
) -> RedisTopicsBatchWriter:
    return RedisTopicsBatchWriter(options, schema, overwrite)


def stream_writer(
    options: dict[str, str], schema: StructType, overwrite: bool
) -> RedisTopicsStreamWriter:
    return RedisTopicsStreamWriter(options, schema, overwrite)


__all__ = [
    "RedisTopicsBatchWriter",
    "RedisTopicsStreamWriter",
    "SinkCommitMessage",
    "SinkOptions",
    "SinkWriteError",
]
