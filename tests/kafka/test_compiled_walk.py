"""The Fetch's compiled batch encoding (adapter/kafka/_walk.c) against the pure-Python path
(mapping/partition/record_walk.walk_entries feeding aiokafka's builder): byte for byte the
same answers for any log of the common layouts, mixed with every other layout it must hand
back to the pure path, at any high watermark, budget and sequence bits; from the entries as
hiredis' lists and from the XRANGE reply's RESP bytes (a RawReply, as the batcher hands raw
replies over) alike."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kafka import records
from adapter.kafka.fetch_reads import encode_entries
from mapping.connection.raw_replies import RawReply
from mapping.core import codec
from mapping.topic.topic_config import TopicConfig
from tests.support.raw_replies import as_reply

walk = pytest.importorskip(
    "adapter.kafka._walk",
    reason="the C extension is not built (setup.py builds it only where a C compiler is)",
)

PLAIN = TopicConfig("t", 1, 1, 1)  # uncompressed CreateTime batches: the compiled path's
FIRST_MS = 1_700_000_000_000


@contextmanager
def walking(compiled: bool) -> Iterator[None]:
    """encode_entries on the compiled path or the pure one (what ADAPTER_PURE_PYTHON picks)."""
    kept = records.plain_batch, records.plain_batch_raw
    records.plain_batch = walk.plain_batch if compiled else None
    records.plain_batch_raw = walk.plain_batch_raw if compiled else None
    try:
        yield
    finally:
        records.plain_batch, records.plain_batch_raw = kept


class Epochs:
    """A leader epoch history's one call the Fetch makes: the epoch of an append time."""

    def epoch_at(self, append_ms: int) -> int:
        return append_ms % 5


def both(entries: list[Any], bits: int, *args: Any, epochs: Epochs | None = None) -> Any:
    """encode_entries' answer on each path, from lists and from RESP bytes; they must be
    equal."""
    answers = []
    for compiled in (True, False):
        for form in (entries, as_reply(entries)):
            with walking(compiled):
                answers.append(encode_entries(form, bits, *args, PLAIN, 2, epochs))
    assert all(answer == answers[0] for answer in answers[1:])
    return answers[0]


def decoded(batches: list[bytes]) -> list[tuple]:
    memory = MemoryRecords(b"".join(batches))
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return seen


# --- the layouts (mapping/core/records.py), as XRANGE replies carry their fields ----------


def created(stamp: bytes, delta: bool) -> list[bytes]:
    """The ts and CreateTime fields: create_ts as the scripts write it, or create_dt (its
    difference from ts) as the streamadapter module does."""
    if delta:
        return [b"ts", b"9", b"create_dt", b"%d" % (int(stamp) - 9)]
    return [b"ts", b"9", b"create_ts", stamp]


def null_key(value: bytes, stamp: bytes, number: bytes, delta: bool = False) -> list[bytes]:
    return [b"value", value, *created(stamp, delta), b"null", b"key", b"n", number]


def key_value(
    key: bytes, value: bytes, stamp: bytes, number: bytes, delta: bool = False
) -> list[bytes]:
    return [b"key", key, b"value", value, *created(stamp, delta), b"n", number]


def others(key: bytes, value: bytes, stamp: bytes, number: bytes) -> list[list[bytes]]:
    """Every layout the compiled path leaves to the pure one: some join a plain batch (the
    pure path then does all of it), a marker or a transactional record ends it."""
    return [
        [b"key", key, b"ts", b"9", b"create_ts", stamp, b"null", b"value", b"n", number],
        [b"key", key, *created(stamp, True), b"null", b"value", b"n", number],  # a tombstone
        [*key_value(key, value, stamp, number, True)[:8], b"h:a", value, b"n", number],
        [b"value", value, b"create_dt", b"-4", b"null", b"key", b"n", number],  # no ts
        [*key_value(key, value, stamp, number)[:8], b"h:a", value, b"hn:b", b"", b"n", number],
        [b"key", key, b"value", value, b"ts", b"9", b"n", number],  # V1's
        [b"key", key, b"value", value, b"ts", b"9", b"create_ts", stamp],  # no n
        [b"ts", b"9", b"create_ts", stamp, b"null", b"key value", b"n", number],
        [*null_key(value, stamp, number)[:8], b"pid", b"7", b"pe", b"0", b"n", number],
        [b"ctl", b"commit", b"pid", b"7", b"pe", b"0", b"ts", b"9", b"n", number],
        [b"ctl", b"abort", b"pid", b"7", b"pe", b"0", b"ts", b"9", b"n", number],
        [b"value", value, b"ts", b"9", b"h:x", b"1", b"null", b"key", b"n", number],
        null_key(value, b" %s" % stamp, number),  # int() reads it, the compiled path does not
    ]


OTHER_LAYOUTS = len(others(b"", b"", b"0", b"0"))

values = st.one_of(
    st.just(b""),
    st.binary(max_size=40),
    st.integers(100, 70_000).map(lambda size: b"v" * size),  # multi-byte varint lengths
)
# -1: no timestamp, which aiokafka's compiled builder does not take as a batch's first
stamps = st.one_of(st.integers(-1, 1 << 44), st.sampled_from([-1, 0, FIRST_MS])).map(
    lambda t: b"%d" % t
)
log_records = st.tuples(
    st.integers(0, 1 + OTHER_LAYOUTS),  # 0: a null key, 1: a key and a value, then the others
    st.one_of(st.none(), st.binary(max_size=20)),
    values,
    stamps,
    st.one_of(st.integers(1, 3000), st.just(1 << 31), st.just(1 << 32)),  # the offset gap
    st.booleans(),  # the CreateTime as create_dt
)


def log_of(picks: list[tuple], bits: int, common_only: bool = False) -> list[list[Any]]:
    entries, offset = [], (FIRST_MS << bits) + 3
    for number, (layout, key, value, stamp, gap, delta) in enumerate(picks, 1):
        offset += gap
        text = b"%d" % number
        if layout == 0 or (common_only and key is None):
            fields = null_key(value, stamp, text, delta)
        elif layout == 1 or common_only:
            fields = key_value(key or b"", value, stamp, text, delta)
        else:
            fields = others(key or b"", value, stamp, text)[layout - 2]
        mask = (1 << bits) - 1
        entries.append([b"%d-%d" % (offset >> bits, offset & mask), fields])
    return entries


def offsets_of(entries: list[list[Any]], bits: int) -> list[int]:
    return [codec.entry_offset(entry_id, bits) for entry_id, _ in entries]


@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(log_records, min_size=1, max_size=40),
    st.integers(1, 12),
    st.booleans(),
    st.data(),
)
def test_any_log_encodes_to_the_same_bytes_on_both_paths(
    picks: list[tuple], bits: int, common_only: bool, data: st.DataObject
) -> None:
    entries = log_of(picks, bits, common_only)
    offsets = offsets_of(entries, bits)
    high_watermark = data.draw(
        st.one_of(st.just(1 << 62), st.just(offsets[0] - 1), st.sampled_from(offsets))
    )
    budget = data.draw(st.one_of(st.just(1 << 40), st.integers(0, 200_000)))
    take_first = data.draw(st.booleans())
    epochs = data.draw(st.sampled_from([None, Epochs()]))
    batches, taken, _, _, _ = both(entries, bits, high_watermark, budget, take_first, epochs=epochs)
    assert len(decoded(batches)) == taken  # one record an entry, a marker's included


@settings(deadline=None, max_examples=100)
@given(
    # timestamps from 0: a -1 reads back as the next record's (aiokafka's builder, below)
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=8),
            values,
            st.integers(0, 1 << 44).map(b"%d".__mod__),
            st.booleans(),
        ),
        min_size=1,
    ),
    st.integers(1, 11),
)
def test_the_common_layouts_are_the_compiled_paths(picks: list[tuple], bits: int) -> None:
    entries = log_of([(0 if k is None else 1, k, v, t, 1, d) for k, v, t, d in picks], bits)
    built = walk.plain_batch(entries, 0, bits, 1 << 62, 1 << 40, True, None)
    assert built is not None  # not handed back to the pure path
    batch, end, used, done = built
    assert (end, done) == (len(entries), False)
    assert [batch] == both(entries, bits, 1 << 62, 1 << 40, True)[0]
    offsets = offsets_of(entries, bits)
    assert decoded([batch]) == [
        (offset, int(t), k, v, []) for offset, (k, v, t, _) in zip(offsets, picks, strict=True)
    ]
    assert used == sum(len(k or b"") + len(v) + 32 for k, v, _, _ in picks)


def test_a_batch_carries_its_last_records_leader_epoch_and_stops_where_the_walk_does() -> None:
    entries = log_of([(1, b"k", b"v" * 10, b"5", 1, False)] * 6, 10)
    offsets = offsets_of(entries, 10)
    batches, taken, used, done, _ = both(entries, 10, offsets[3], 1 << 20, True, epochs=Epochs())
    assert (len(batches), taken, used, done) == (1, 4, 4 * 43, True)
    assert int.from_bytes(batches[0][12:16], "big") == (offsets[3] >> 10) % 5
    # a budget for two records and a half; the first record whatever the budget when asked
    assert both(entries, 10, 1 << 62, 2 * 43 + 20, True)[1:4] == (2, 86, True)
    assert both(entries, 10, 1 << 62, 1, True)[1:3] == (1, 43)
    assert both(entries, 10, 1 << 62, 1, False)[:2] == ([], 0)


@pytest.mark.parametrize("stamps", [[-1, 0], [-1, -1, 5, -1, 2], [-1, -3, 5], [5, -1]])
def test_records_without_a_timestamp_are_batched_as_aiokafka_batches_them(
    stamps: list[int],
) -> None:
    entries = log_of([(0, None, b"v", b"%d" % t, 1, t % 2 == 0) for t in stamps], 10)
    batches = both(entries, 10, 1 << 62, 1 << 20, True)[0]
    assert walk.plain_batch(entries, 0, 10, 1 << 62, 1 << 20, True, None)[0] == batches[0]


@settings(deadline=None)
@given(st.binary(max_size=300))
def test_the_checksum_is_crc32c_by_the_instruction_and_by_the_tables(data: bytes) -> None:
    assert walk.crc32c(data) == walk.crc32c(data, True) == calc_crc32c(data)


def test_adapter_pure_python_turns_the_compiled_path_off(monkeypatch: pytest.MonkeyPatch) -> None:
    # this process (and the pods the other tests start) took the path its environment names
    assert (records.plain_batch is None) == bool(os.environ.get("ADAPTER_PURE_PYTHON"))
    monkeypatch.delenv("ADAPTER_PURE_PYTHON", raising=False)
    assert records.compiled_plain_batch() is walk.plain_batch
    monkeypatch.setenv("ADAPTER_PURE_PYTHON", "1")
    assert records.compiled_plain_batch() is None


@settings(deadline=None, max_examples=100)
@given(st.lists(st.tuples(st.none() | st.binary(max_size=8), values), min_size=1, max_size=30))
def test_the_common_layouts_are_read_from_the_reply_bytes_without_parsing_them(
    picks: list[tuple],
) -> None:
    entries = log_of([(0 if k is None else 1, k, v, b"7", 1, False) for k, v in picks], 10)
    reply = as_reply(entries)
    reply._parsed = None  # as the batcher hands it over: never parsed
    built = walk.plain_batch_raw(reply.data, reply.first, 0, len(reply), 10, 1 << 62, 1 << 40,
                                 True, None)  # fmt: skip
    assert built is not None
    batch, end, end_pos, _, done = built
    assert (end, end_pos, done) == (len(entries), len(reply.data), False)
    assert batch == walk.plain_batch(entries, 0, 10, 1 << 62, 1 << 40, True, None)[0]
    with walking(True):
        encode_entries(reply, 10, 1 << 62, 1 << 40, True, PLAIN)
    assert reply._parsed is None  # the common batches never made the entries' objects


def test_a_reply_the_raw_walk_does_not_read_goes_to_the_pure_path() -> None:
    entries = log_of([(1, b"k", b"v", b"5", 1, True)] * 3, 10)
    reply = as_reply(entries)
    broken = RawReply(reply.data.replace(b"*2\r\n", b"*3\r\n"), 3, reply.first, reply.last)
    args = (broken.data, broken.first, 0, 3, 10, 1 << 62, 1 << 40, True, None)
    assert walk.plain_batch_raw(*args) is None
    truncated = (reply.data[:-5], *args[1:])
    assert walk.plain_batch_raw(*truncated) is None


def test_adapter_pure_python_turns_the_raw_walk_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (records.plain_batch_raw is None) == bool(os.environ.get("ADAPTER_PURE_PYTHON"))
    monkeypatch.delenv("ADAPTER_PURE_PYTHON", raising=False)
    assert records.compiled_plain_batch_raw() is walk.plain_batch_raw
    monkeypatch.setenv("ADAPTER_PURE_PYTHON", "1")
    assert records.compiled_plain_batch_raw() is None
