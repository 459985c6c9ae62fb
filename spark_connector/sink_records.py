"""The sink's input: which columns a DataFrame may have, and Arrow batches -> records.

Columns are those of Spark's Kafka sink: ``value`` (required), ``key``, ``topic``,
``partition``, ``headers``; any other column is ignored, as Kafka's sink does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from mapping.core.records import Header
from mapping.core.records import record_items as entry_items
from spark_connector.options import OptionError

_PAYLOAD = (StringType, BinaryType)
_INTEGER = (IntegerType, LongType, ShortType, ByteType)


@dataclass(frozen=True, slots=True)
class Record:
    topic: str | None  # None: the topic option
    partition: int | None  # None: by key (FNV-1a), as V1 PRODUCE
    key: bytes | None
    value: bytes | None  # None: a tombstone
    headers: list[Header] = field(default_factory=list)


def _is_headers_type(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in data_type.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], _PAYLOAD)
    )


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Fail on the driver, before any task, when the columns cannot be written."""
    columns = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in columns:
        raise OptionError(
            f"the redis-topics sink needs a 'value' column (string or binary); "
            f"got {schema.simpleString()}"
        )
    expected = {
        "value": ("string or binary", lambda t: isinstance(t, _PAYLOAD)),
        "key": ("string or binary", lambda t: isinstance(t, _PAYLOAD)),
        "topic": ("string", lambda t: isinstance(t, StringType)),
        "partition": ("int", lambda t: isinstance(t, _INTEGER)),
        "headers": ("array<struct<key:string,value:binary>>", _is_headers_type),
    }
    for name, (what, accepts) in expected.items():
        if name in columns and not accepts(columns[name]):
            raise OptionError(f"column {name!r} must be {what}, got {columns[name].simpleString()}")
    if topic_option is None and "topic" not in columns:
        raise OptionError(
            "the redis-topics sink needs a topic: set option 'topic' or add a 'topic' column"
        )


def record_items(record: Record) -> tuple[int, list[bytes | str | int]]:
    """(lead, items): the record's stream fields, laid out as the Kafka front door writes
    them (mapping.core.records.record_items), so V1, Spark and Kafka consumers all read it. Spark
    rows carry no timestamp of their own: no ``create_ts``."""
    return entry_items(record.key, record.value, None, record.headers)


def _headers(raw: list[dict] | None) -> list[Header]:
    if not raw:
        return []
    return [
        (h["key"], h["value"].encode() if isinstance(h["value"], str) else h["value"]) for h in raw
    ]


def _payload(column: pa.Array) -> list[bytes | None]:
    values = column.to_pylist()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if v is None else v.encode() for v in values]
    return values


def _column(batch: pa.RecordBatch, name: str, payload: bool = False) -> list:
    """A column's values by (case-insensitive) name; all null when it is absent."""
    for i, column_name in enumerate(batch.schema.names):
        if column_name.lower() == name:
            column = batch.column(i)
            return _payload(column) if payload else column.to_pylist()
    return [None] * batch.num_rows


def records_of(batches: Iterator[pa.RecordBatch]) -> Iterator[Record]:
    """The rows of Spark's Arrow batches as records, in order."""
    for batch in batches:
        values = _column(batch, "value", payload=True)
        keys = _column(batch, "key", payload=True)
        topics = _column(batch, "topic")
        partitions = _column(batch, "partition")
        headers = _column(batch, "headers")
        for i in range(batch.num_rows):
            yield Record(topics[i], partitions[i], keys[i], values[i], _headers(headers[i]))
