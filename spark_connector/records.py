"""The executor side: stream entries -> Arrow record batches.

Runs inside a Spark Python worker. It opens its own Redis connection from the serialized
options, reads ``[start, end)`` of one partition's log in pages of ``fetchSize`` entries and
yields one ``pyarrow.RecordBatch`` per page, so a task never holds its whole range in memory.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from mapping import codec
from mapping.keys import Keys
from spark_connector.offsets import RangePartition, client_for
from spark_connector.options import SourceOptions


def source_schema(binary: bool = False) -> StructType:
    payload = BinaryType() if binary else StringType()
    return StructType(
        [
            StructField("topic", StringType(), True),
            StructField("partition", IntegerType(), True),
            StructField("offset", LongType(), True),
            StructField("key", payload, True),
            StructField("value", payload, True),
            StructField("timestamp", TimestampType(), True),
        ]
    )


def arrow_schema(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks returned batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _text(data: bytes | None) -> str | None:
    # Values are arbitrary bytes; the string variant shows invalid UTF-8 as U+FFFD
    # (valueFormat=binary keeps every byte).
    return None if data is None else data.decode("utf-8", errors="replace")


def to_batch(
    entries: list[tuple[bytes, dict[bytes, bytes]]],
    topic: str,
    partition: int,
    bits: int,
    binary: bool,
    schema: pa.Schema,
) -> pa.RecordBatch:
    offsets = [codec.offset_of(entry_id, bits) for entry_id, _ in entries]
    keys = [fields.get(b"key") for _, fields in entries]
    values = [fields.get(b"value") for _, fields in entries]
    stamps = [fields.get(b"ts") for _, fields in entries]
    if not binary:
        keys = [_text(k) for k in keys]
        values = [_text(v) for v in values]
    n = len(entries)
    columns = [
        pa.array([topic] * n, type=schema.field("topic").type),
        pa.array([partition] * n, type=schema.field("partition").type),
        pa.array(offsets, type=schema.field("offset").type),
        pa.array(keys, type=schema.field("key").type),
        pa.array(values, type=schema.field("value").type),
        # ts is the produce time in ms; Spark timestamps are microseconds.
        pa.array(
            [int(ts) * 1000 if ts is not None else None for ts in stamps],
            type=schema.field("timestamp").type,
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def read_partition(
    opts: SourceOptions, schema: StructType, partition: RangePartition
) -> Iterator[pa.RecordBatch]:
    """Every record of ``partition``'s range, oldest first, as Arrow batches."""
    if partition.end <= partition.start:
        return
    target = arrow_schema(schema)
    bits = partition.sequence_bits
    log = Keys(opts.key_prefix).partition(opts.topic, partition.partition).log
    last_id = codec.entry_id(partition.end - 1, bits)
    client = client_for(opts)
    try:
        position = partition.start
        while position < partition.end:
            entries = client.xrange(
                log, codec.entry_id(position, bits), last_id, count=opts.fetch_size
            )
            if not entries:
                return
            yield to_batch(entries, opts.topic, partition.partition, bits, opts.binary, target)
            if len(entries) < opts.fetch_size:
                return
            position = codec.offset_of(entries[-1][0], bits) + 1
    finally:
        client.close()
