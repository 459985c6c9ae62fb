"""The executor side: stream entries -> Arrow record batches.

Runs inside a Spark Python worker. It opens its own Redis connection from the serialized
options, reads ``[start, end)`` of one partition's log in pages of ``fetchSize`` entries and
yields one ``pyarrow.RecordBatch`` per page, so a task never holds its whole range in memory.
Committed records only (docs/transactions.md): transaction markers are never
shown, nor the records of aborted transactions (the partition's aborted index is read only
for a page that holds transactional records); the driver's end positions stop below the last
stable offset. With ``includeHeaders`` a ``headers`` column as Spark's Kafka source has it
(``array<struct<key: string, value: binary>>``, null for a record without headers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import redis
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from redis.cluster import RedisCluster

from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.records import (
    APPEND_TIME_BYTES,
    CONTROL_BYTES,
    HEADER_PREFIX_BYTES,
    KEY_BYTES,
    NULL_HEADER_PREFIX_BYTES,
    PRODUCER_ID_BYTES,
    VALUE_BYTES,
)
from mapping.partition.partition_txns import AbortedRanges
from spark_connector.errors import DataLoss
from spark_connector.offsets import RangePartition, client_for, data_loss_message
from spark_connector.options import SourceOptions

log = logging.getLogger(__name__)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
    True,
)
# An entry as the reader uses it: (id, fields by name, the raw field list when the client
# gave one: the headers in order, a name given twice included).
Entry = tuple[bytes, dict[bytes, bytes], list[bytes] | None]


def source_schema(binary: bool = False, headers: bool = False) -> StructType:
    payload = BinaryType() if binary else StringType()
    fields = [
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("key", payload, True),
        StructField("value", payload, True),
        StructField("timestamp", TimestampType(), True),
    ]
    if headers:
        fields.append(StructField("headers", HEADERS_TYPE, True))
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    """Exactly the Arrow schema Spark checks returned batches against."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _raw(response: Any, **options: Any) -> Any:
    return response


def raw_stream_replies(client: redis.Redis) -> None:
    """XRANGE replies as Redis sends them (``[id, [field, value, ...]]``) rather than
    redis-py's dict per entry, which keeps one field of a name given twice (a record's
    headers may repeat a name). On a cluster each node's client parses its replies, so each
    gets the callback; a node found later (a failover) answers dicts, which
    ``entries_of`` reads too."""
    targets: list[Any] = [client]
    if isinstance(client, RedisCluster):
        targets += [client.get_redis_connection(node) for node in client.get_nodes()]
    for target in targets:
        target.set_response_callback("XRANGE", _raw)


def entries_of(reply: list[Any]) -> list[Entry]:
    """An XRANGE reply, raw or redis-py's, as ``Entry``s."""
    entries: list[Entry] = []
    for entry_id, fields in reply:
        if isinstance(fields, dict):
            entries.append((entry_id, fields, None))
        else:
            entries.append((entry_id, dict(zip(fields[::2], fields[1::2], strict=True)), fields))
    return entries


def _text(data: bytes | None) -> str | None:
    # Values are arbitrary bytes; the string variant shows invalid UTF-8 as U+FFFD
    # (valueFormat=binary keeps every byte).
    return None if data is None else data.decode("utf-8", errors="replace")


def headers_of(entry: Entry) -> list[dict[str, Any]] | None:
    """A record's headers in order (fields ``h:<name>``, ``hn:<name>`` for a null value:
    mapping/core/records.py); None when it has none, as Spark's Kafka source gives."""
    _, named, raw = entry
    pairs = zip(raw[::2], raw[1::2], strict=True) if raw is not None else named.items()
    headers = []
    for name, value in pairs:
        if name.startswith(HEADER_PREFIX_BYTES):
            key = name[len(HEADER_PREFIX_BYTES) :].decode("utf-8", "replace")
            headers.append({"key": key, "value": value})
        elif name.startswith(NULL_HEADER_PREFIX_BYTES):
            key = name[len(NULL_HEADER_PREFIX_BYTES) :].decode("utf-8", "replace")
            headers.append({"key": key, "value": None})
    return headers or None


def to_batch(
    entries: list[Any],
    topic: str,
    partition: int,
    bits: int,
    binary: bool,
    schema: pa.Schema,
) -> pa.RecordBatch:
    """Arrow rows of ``entries``: ``Entry``s, or an XRANGE reply (raw or redis-py's)."""
    if entries and len(entries[0]) == 2:
        entries = entries_of(entries)
    offsets = [codec.offset_of(entry_id, bits) for entry_id, _, _ in entries]
    keys = [fields.get(KEY_BYTES) for _, fields, _ in entries]
    values = [fields.get(VALUE_BYTES) for _, fields, _ in entries]
    stamps = [fields.get(APPEND_TIME_BYTES) for _, fields, _ in entries]
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
    if schema.get_field_index("headers") >= 0:
        headers = [headers_of(entry) for entry in entries]
        columns.append(pa.array(headers, type=schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _check_page(
    opts: SourceOptions,
    topic: str,
    partition: int,
    position: int,
    entries: list[Entry],
    log_start: int,
    bits: int,
) -> None:
    """A page read from ``position`` lost records when retention removed some at or after
    ``position``, unless the removal came after the read: then the page holds records below
    the log start (the last removed one among them)."""
    if log_start <= position:
        return
    if entries and codec.offset_of(entries[0][0], bits) < log_start:
        return  # read before the trim: nothing missed
    message = data_loss_message(topic, partition, position, log_start)
    if opts.fail_on_data_loss:
        raise DataLoss(message)
    log.warning("%s; going on from offset %d (failOnDataLoss=false)", message, log_start)


def _committed(
    client: redis.Redis, aborted_key: str, entries: list[Entry], bits: int
) -> list[Entry]:
    """The page without transaction markers and without aborted transactions' records."""
    kept = [entry for entry in entries if CONTROL_BYTES not in entry[1]]
    transactional = [entry for entry in kept if PRODUCER_ID_BYTES in entry[1]]
    if not transactional:
        return kept
    first = codec.offset_of(transactional[0][0], bits)
    aborted = AbortedRanges(client.zrangebyscore(aborted_key, first, "+inf", withscores=True))
    return [
        entry
        for entry in kept
        if PRODUCER_ID_BYTES not in entry[1]
        or not aborted.aborted(int(entry[1][PRODUCER_ID_BYTES]), codec.offset_of(entry[0], bits))
    ]


def read_partition(
    opts: SourceOptions, schema: StructType, partition: RangePartition
) -> Iterator[pa.RecordBatch]:
    """Every record of ``partition``'s range, oldest first, as Arrow batches."""
    if partition.end <= partition.start:
        return
    target = arrow_schema(schema)
    bits = partition.sequence_bits
    topic = partition.topic or opts.topic
    partition_keys = Keys(opts.key_prefix).partition(topic, partition.partition)
    last_id = codec.entry_id(partition.end - 1, bits)
    client = client_for(opts)
    try:
        raw_stream_replies(client)
        position = partition.start
        while position < partition.end:
            # The log start read after the page (same connection, in order) tells whether
            # retention removed records of it since the driver planned this range.
            pipe = client.pipeline(transaction=False)
            pipe.xrange(
                partition_keys.log, codec.entry_id(position, bits), last_id, count=opts.fetch_size
            )
            pipe.hget(partition_keys.state, "log_start")
            reply, log_start = pipe.execute()
            entries = entries_of(reply)
            _check_page(
                opts, topic, partition.partition, position, entries, int(log_start or 0), bits
            )
            if not entries:
                return
            committed = _committed(client, partition_keys.txn_aborted, entries, bits)
            if committed:
                yield to_batch(committed, topic, partition.partition, bits, opts.binary, target)
            if len(entries) < opts.fetch_size:
                return
            position = codec.offset_of(entries[-1][0], bits) + 1
    finally:
        client.close()
