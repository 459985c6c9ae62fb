"""The fetch's walk over raw stream entries (mapping/core/records.py's layout): which entries go
into one RecordBatch, fed to the batch builder without a record object each (the Kafka Fetch
hot loop, adapter/kafka/fetch.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from mapping.core.codec import MAX_SEQUENCE_BITS
from mapping.core.records import (
    APPEND_TIME_BYTES,
    CONTROL_BYTES,
    CONTROL_BYTES_ABORT,
    CONTROL_COMMIT_BYTES,
    CREATE_TIME_FIELDS,
    KEY_BYTES,
    NULLS_BYTES,
    NUMBER_BYTES,
    PRODUCER_EPOCH_BYTES,
    PRODUCER_ID_BYTES,
    VALUE_BYTES,
    Header,
    create_time,
    entry_record,
)

# Bytes a record costs in a RecordBatch beyond its key and value (roughly): what a fetch's
# byte budget counts per record.
RECORD_OVERHEAD = 32
MAX_OFFSET_DELTA = (1 << 31) - 1  # the most a RecordBatch's offset delta holds
_NO_HEADERS: list[Header] = []  # shared, never changed: the common records have none
# An entry id's sequence part as text -> its number: a lookup costs less than int() (the
# sequence never reaches 2**bits; a longer one, written by hand, is parsed)
_SEQUENCES = {b"%d" % number: number for number in range(1 << MAX_SEQUENCE_BITS)}


def _append_stamp(fields: list[bytes]) -> bytes | None:
    """An entry's append time (its ``ts`` field: after the key and the value, so among the
    first three fields), None for an entry without one."""
    for at in (0, 2, 4):
        if at + 1 < len(fields) and fields[at] == APPEND_TIME_BYTES:
            return fields[at + 1]
    return None


class Walked(NamedTuple):
    end: int  # index of the first entry not taken
    used: int  # bytes taken (RECORD_OVERHEAD included)
    base: int  # the first taken entry's offset (-1: none taken)
    done: bool  # stopped at the high watermark or the budget (False: a new batch must start)
    producer_id: int = -1  # a transactional batch's producer (-1: plain records)
    producer_epoch: int = -1
    control: int = -1  # a marker's batch: 0 abort, 1 commit (Kafka's ControlRecordType)


# A control record's key and value (Kafka's ControlRecordType and EndTransactionMarker, both
# version 0): key = version, type (0 abort, 1 commit); value = version, coordinator epoch.
_CONTROL_KEY = {CONTROL_BYTES_ABORT: b"\x00\x00\x00\x00", CONTROL_COMMIT_BYTES: b"\x00\x00\x00\x01"}
CONTROL_VALUE = b"\x00\x00\x00\x00\x00\x00"


def is_control(fields: list[bytes]) -> bool:
    """Whether a raw entry's fields are a transaction marker's."""
    return bool(fields) and fields[0] == CONTROL_BYTES


def walk_entries(
    entries: list[Any],
    start: int,
    bits: int,
    high_watermark: int,
    budget: int,
    take_first: bool,
    append: Callable[[int, int, bytes | None, bytes | None, list[Header]], Any],
    append_time: bool = False,
) -> Walked:
    """Feeds ``append(offset delta, timestamp, key, value, headers)`` the raw XRANGE entries
    from ``start`` on, in order, while their offsets are at or below ``high_watermark`` (V1's)
    and their sizes fit in ``budget`` (the first one whatever its size when ``take_first``),
    without a record object each: the fetch's hot loop. The deltas are from the first taken
    entry's offset and stay within one RecordBatch's range (past it: ``done`` False).
    ``append_time`` (a LogAppendTime topic): every record's timestamp is its append time,
    and one batch holds one append time (another: ``done`` False, a new batch starts).
    Transactions: one batch holds one producer's transactional records, or plain records
    only (another: ``done`` False); a marker is a batch of its own (``control``), its record
    Kafka's control key and value."""
    batch_stamp = b""
    batch_time = 0
    used = 0
    base = -1
    limit = 0
    last_ms = b""
    ms_delta = 0
    # the last CreateTime's fields (create_ts or create_dt, its value, ts) and the time they
    # give: a producer's batch shares them, parsed once
    last_stamp = last_created = last_append_text = b""
    timestamp = 0
    batch_producer: bytes | None = None
    producer_id = producer_epoch = -1
    sequences = _SEQUENCES
    for i in range(start, len(entries)):
        entry_id, fields = entries[i]
        ms, _, seq = entry_id.partition(b"-")
        if ms != last_ms:  # entries appended in the same millisecond share it: parse once
            ms_value = int(ms) << bits
            if base < 0:
                base = ms_value + int(seq)
                limit = min(high_watermark - base, MAX_OFFSET_DELTA)
            last_ms = ms
            ms_delta = ms_value - base
        number = sequences.get(seq)
        delta = ms_delta + (number if number is not None else int(seq))
        if delta > limit:
            return Walked(i, used, base, delta + base > high_watermark, producer_id, producer_epoch)
        if batch_producer is None and not append_time and len(fields) == 10:
            # the fast path: a plain Kafka record with a null key, or with a key and a value,
            # no headers (see entry_record); a batch of plain records only
            first = fields[0]
            if first == VALUE_BYTES:
                created = fields[4]
                fast = fields[6] == NULLS_BYTES
                key, value, append_text, stamp = None, fields[1], fields[3], fields[5]
                length = len(value) + RECORD_OVERHEAD
            else:
                created = fields[6]
                fast = first == KEY_BYTES and fields[2] == VALUE_BYTES
                key, value, append_text, stamp = fields[1], fields[3], fields[5], fields[7]
                length = len(key) + len(value) + RECORD_OVERHEAD
            if fast and created in CREATE_TIME_FIELDS and fields[8] == NUMBER_BYTES:
                if (
                    stamp != last_stamp
                    or created != last_created
                    or append_text != last_append_text
                ):
                    last_stamp, last_created, last_append_text = stamp, created, append_text
                    timestamp = create_time(created, stamp, append_text)
                if used + length > budget and (i > start or not take_first):
                    return Walked(i, used, base, True)
                used += length
                append(delta, timestamp, key, value, _NO_HEADERS)
                continue
        # the common layouts at fixed places (see entry_record), anything else field by field
        size = len(fields)
        if size >= 2 and fields[size - 2] == NUMBER_BYTES:
            size -= 2
        first = fields[0] if size else b""
        if first == CONTROL_BYTES:  # ctl, kind, pid, P, pe, E, ts, T: a batch of its own
            if i > start:
                return Walked(i, used, base, False, producer_id, producer_epoch)
            length = RECORD_OVERHEAD + 10
            if length > budget and not take_first:
                return Walked(i, used, base, True)
            named = dict(zip(fields[:size:2], fields[1:size:2], strict=False))
            kind = named.get(CONTROL_BYTES, b"")
            stamp = named.get(APPEND_TIME_BYTES)
            append(
                delta,
                int(stamp) if stamp is not None else int(ms),
                _CONTROL_KEY.get(kind, _CONTROL_KEY[CONTROL_BYTES_ABORT]),
                CONTROL_VALUE,
                _NO_HEADERS,
            )
            return Walked(
                i + 1,
                length,
                base,
                False,
                int(named.get(PRODUCER_ID_BYTES, -1)),
                int(named.get(PRODUCER_EPOCH_BYTES, -1)),
                1 if kind == CONTROL_COMMIT_BYTES else 0,
            )
        producer = None
        if size >= 4 and fields[size - 4] == PRODUCER_ID_BYTES:  # a transactional record
            producer = fields[size - 3]
            if i == start:
                producer_id, producer_epoch = int(producer), int(fields[size - 1])
            size -= 4
        if i == start:
            batch_producer = producer
        elif producer != batch_producer:
            return Walked(i, used, base, False, producer_id, producer_epoch)
        headers = _NO_HEADERS
        first = fields[0] if size else b""
        created = fields[4] if size == 8 else b""
        one_null = created in CREATE_TIME_FIELDS and fields[6] == NULLS_BYTES
        if one_null and first == VALUE_BYTES:
            key, value, append_text, stamp = None, fields[1], fields[3], fields[5]  # a null key
            length = len(value)
        elif one_null and first == KEY_BYTES:
            key, value, append_text, stamp = fields[1], None, fields[3], fields[5]  # a tombstone
            length = len(key)
        elif (
            size == 8
            and first == KEY_BYTES
            and fields[2] == VALUE_BYTES
            and fields[6] in CREATE_TIME_FIELDS
        ):
            created, append_text, stamp = fields[6], fields[5], fields[7]
            key, value = fields[1], fields[3]
            length = len(key) + len(value)
        elif (
            size == 6
            and first == KEY_BYTES
            and fields[2] == VALUE_BYTES
            and fields[4] == APPEND_TIME_BYTES
        ):
            created, append_text, stamp = APPEND_TIME_BYTES, fields[5], fields[5]  # a V1 record
            key, value = fields[1], fields[3]
            length = len(key) + len(value)
        else:
            record = entry_record(entry_id, fields, bits)
            key, value, headers = record.key, record.value, record.headers
            stamp = None
            timestamp = record.timestamp
            last_stamp = b""
            length = len(key or b"") + len(value or b"")
        if stamp is not None and (
            stamp != last_stamp or created != last_created or append_text != last_append_text
        ):
            last_stamp, last_created, last_append_text = stamp, created, append_text
            timestamp = create_time(created, stamp, append_text)
        if append_time:
            appended = _append_stamp(fields) or ms
            if i == start:
                batch_stamp, batch_time = appended, int(appended)
            elif appended != batch_stamp:
                return Walked(i, used, base, False, producer_id, producer_epoch)
            timestamp = batch_time
        length += RECORD_OVERHEAD
        if used + length > budget and (i > start or not take_first):
            return Walked(i, used, base, True, producer_id, producer_epoch)
        used += length
        append(delta, timestamp, key, value, headers)
    return Walked(len(entries), used, base, False, producer_id, producer_epoch)
