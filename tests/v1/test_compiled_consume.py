"""V1 CONSUME's compiled reply text (adapter/v1/_consume.c) against the pure path
(mapping/core/records.entry_values, adapter/v1/escaping.escape joined as the handler joins
them): byte for byte the same text for any XRANGE page in its RESP bytes, of every record
layout and every byte a value may hold, at any high watermark and sequence bits; a page the
compiled walk does not take (a transactional record, a marker, a layout it does not read)
comes back None and goes the pure way. Then the same through Partitions.start_consume on a
real Redis, byte limits and record limits cutting the pages, both ways."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.v1.escaping import escape
from adapter.v1.handlers.core import _consume_payload
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.records import entry_values
from mapping.partition.formatted_records import FormattedRecords, formatted_or_values
from mapping.partition.partition_scripts import ConsumeResult
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics
from tests.support.raw_replies import as_reply

compiled = pytest.importorskip(
    "adapter.v1._consume",
    reason="the C extension is not built (setup.py builds it only where a C compiler is)",
)
format_values = compiled.format_values

FIRST_MS = 1_700_000_000_000
# Every byte escape() treats apart, and UTF-8 it keeps or escapes (C1 controls, Unicode
# whitespace, the last code points, cut and overlong sequences, encoded surrogates).
SPECIAL = [
    *(bytes([b]) for b in [*range(0x00, 0x22), 0x25, 0x2C, 0x7C, 0x7E, 0x7F, 0x80, 0xFF]),
    *(chr(c).encode() for c in [0x85, 0x9F, 0xA0, 0xA1, 0x1680, 0x2000, 0x200A, 0x200B]),
    *(chr(c).encode() for c in [0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF, 0x10FFFF]),
    "é".encode(), "€".encode(), "😀".encode(), "😀".encode()[:3], b"\xe2\x82", b"\xc0\xaf",
    b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80\x80", b"\xf0\x80\x80\x80", b"%41",
]  # fmt: skip


def pure_text(records: Sequence[tuple[int, bytes]]) -> str:
    return ",".join([f"{o}:{escape(v)}" for o, v in records])


def check(entries: list[Any], bits: int, high_watermark: int) -> bool:
    """The compiled text equals the pure one (True), or the compiled walk hands the page to
    the pure path (False) where the pure path notes something or meets a layout it does
    not read."""
    reply = as_reply(entries)
    noted: list[tuple[int, int]] = []
    records = entry_values(entries, 0, high_watermark, bits, noted)
    got = format_values(reply.data, reply.first, reply.count, bits, high_watermark)
    if got is None:
        return False
    assert not noted
    text, count, after_first, smallest = got
    assert text == pure_text(records)
    assert count == len(records)
    assert after_first == sum(len(v) for _, v in records[1:])
    assert smallest == min((len(v) for _, v in records), default=0)
    formatted = FormattedRecords(got, reply, high_watermark, bits)
    assert list(formatted) == records and formatted[1:] == records[1:]
    assert formatted == records and records == formatted
    page, plain = ConsumeResult(formatted, high_watermark), ConsumeResult(records, high_watermark)
    assert _consume_payload(page) == _consume_payload(plain)
    return True


values = st.one_of(
    st.binary(max_size=30),
    st.lists(st.sampled_from(SPECIAL), max_size=8).map(b"".join),
    st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
numbers = st.integers(0, 10**13).map(lambda n: b"%d" % n)


@st.composite
def fields_of(draw: st.DrawFn) -> tuple[list[bytes], bool]:
    """One entry's fields in one of the layouts the appends write (mapping/core/records.py),
    or an odd one; and whether the compiled walk must take it."""
    value, key, stamp, number = draw(values), draw(values), draw(numbers), draw(numbers)
    layout = draw(st.sampled_from(["v1", "null key", "kv", "tombstone", "headers", "odd",
                                   "odd value", "many", "txn", "marker"]))  # fmt: skip
    if layout == "v1":
        return [b"key", key, b"value", value, b"ts", stamp, b"n", number], True
    if layout == "null key":
        fields = [b"value", value, b"ts", stamp, b"create_ts", stamp, b"null", b"key"]
        return [*fields, b"n", number], True
    if layout == "kv":
        return [b"key", key, b"value", value, b"ts", stamp, b"create_ts", stamp, b"n", number], True
    if layout == "tombstone":
        fields = [b"key", key, b"ts", stamp, b"create_ts", stamp, b"null", b"value"]
        return [*fields, b"n", number], True
    if layout == "headers":
        headers = draw(st.lists(st.tuples(st.sampled_from([b"h:a", b"hn:b", b"h:value"]), values)))
        fields = [b"key", key, b"value", value, b"ts", stamp, b"create_ts", stamp]
        return [*fields, *(x for h in headers for x in h), b"n", number], len(headers) <= 26
    if layout in ("odd", "odd value"):
        names = [b"value", b"key", b"x", b"ctl", b"pid", b"n"]
        chosen = draw(st.lists(st.sampled_from(names), min_size=1, max_size=6))
        # (a producer id is a number wherever it stands: entry_values reads it)
        fields = [x for n in chosen for x in (n, draw(numbers if n == b"pid" else values))]
        if layout == "odd value":
            fields = [b"x", key, b"value", value, *fields]
        return fields, None  # type: ignore[return-value]  # either way
    if layout == "many":
        return [x for i in range(40) for x in (b"h:%d" % i, value)], False
    if layout == "txn":
        txn = [b"pid", number, b"pe", b"0"]
        return [b"key", key, b"value", value, b"ts", stamp, *txn, b"n", number], False
    marker = [b"ctl", draw(st.sampled_from([b"commit", b"abort"])), b"pid", number, b"pe", b"1"]
    return [*marker, b"ts", stamp, b"n", number], False


@st.composite
def pages(draw: st.DrawFn) -> tuple[list[Any], int, int, bool | None]:
    """(entries, bits, high watermark, whether the compiled walk must take the page: None
    either way)."""
    bits = draw(st.integers(codec.MIN_SEQUENCE_BITS, codec.MAX_SEQUENCE_BITS))
    steps = draw(st.lists(st.integers(1, 3000), max_size=12))
    offsets, at = [], codec.encode(FIRST_MS, draw(st.integers(0, (1 << bits) - 1)), bits)
    for step in steps:
        offsets.append(at)
        at += step
    entries, takes = [], True
    for offset in offsets:
        fields, taken = draw(fields_of())
        entries.append([codec.entry_id(offset, bits).encode(), fields])
        takes = None if taken is None or takes is None else takes and taken
    if entries and draw(st.integers(0, 9)) == 0:  # a sequence past the bits: the pure path's
        ms, _ = codec.decode(offsets[-1] + 1, bits)
        entries.append([b"%d-%d" % (ms + 1, (1 << bits) + 5), [b"value", b"v"]])
        takes = False
    end = offsets[-1] if offsets else FIRST_MS << bits
    high_watermark = draw(st.one_of(st.just(-1), st.integers(FIRST_MS << bits, end + 10)))
    return entries, bits, high_watermark, takes


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(pages())
def test_the_compiled_text_is_the_pure_text(page: tuple[list[Any], int, int, bool | None]) -> None:
    entries, bits, high_watermark, takes = page
    taken = check(entries, bits, high_watermark)
    # a page of the layouts it reads, wholly below the hw, is always taken; one holding a
    # transactional record or a marker below the hw never is
    if takes is True:
        assert taken
    noted: list[tuple[int, int]] = []
    entry_values(entries, 0, high_watermark, bits, noted)
    if noted:
        assert not taken


def test_every_code_point_and_byte_escapes_as_escape_does() -> None:
    """Each character as a value of its own (and each byte alone, and every two-byte
    prefix of a lead byte): the whole Unicode range, in pages of 4096 records."""
    bits = 10
    items = [chr(c).encode() for c in range(sys.maxunicode + 1) if not 0xD800 <= c < 0xE000]
    items += [bytes([b]) for b in range(256)]
    items += [bytes([lead, follow]) for lead in range(0xC0, 0x100) for follow in range(256)]
    for start in range(0, len(items), 4096):
        chunk = items[start : start + 4096]
        first = FIRST_MS + start
        entries = [
            [codec.entry_id(codec.encode(first + i, 0, bits)).encode(), [b"value", value]]
            for i, value in enumerate(chunk)
        ]
        assert check(entries, bits, codec.encode(first + len(chunk), 0, bits))


def test_each_byte_at_each_place_of_a_word() -> None:
    """The compiled walk checks eight bytes at a time for bytes that need no escaping: each
    byte value at each place of a 17-byte value (two words and a tail), after a few."""
    bits = 10
    items = [
        b"a" * at + bytes([byte]) + b"b" * (16 - at) for byte in range(256) for at in range(17)
    ]
    items += [b"x" * 8 + "\u3000".encode() + b"y" * 7, b"z" * 7 + "é".encode() + b"z" * 9]
    entries = [
        [codec.entry_id(codec.encode(FIRST_MS + i, 0, bits)).encode(), [b"value", value]]
        for i, value in enumerate(items)
    ]
    assert check(entries, bits, codec.encode(FIRST_MS + len(items), 0, bits))


def test_an_empty_page_and_one_past_the_hw() -> None:
    assert format_values(b"*0\r\n", 4, 0, 10, 5) == ("", 0, 0, 0)
    entries = [[b"%d-0" % FIRST_MS, [b"value", b"a b"]]]
    reply = as_reply(entries)
    assert format_values(reply.data, reply.first, 1, 10, -1) == ("", 0, 0, 0)
    assert format_values(reply.data, reply.first, 1, 10, FIRST_MS << 10) == (
        f"{FIRST_MS << 10}:a%20b",
        1,
        0,
        3,
    )


def test_bytes_that_are_not_an_xrange_reply_go_the_pure_way() -> None:
    reply = as_reply([[b"%d-0" % FIRST_MS, [b"value", b"abc"]]])
    for cut in range(reply.first, len(reply.data) - 1):
        assert format_values(reply.data[:cut], reply.first, 1, 10, 1 << 62) is None
    assert format_values(reply.data.replace(b"$3", b"+3"), reply.first, 1, 10, 1 << 62) is None


# --- through Partitions.start_consume on a real Redis --------------------------------------


def test_consume_pages_are_the_same_both_ways(redis_url: str) -> None:
    """Values of every special byte, read at every start offset with record and byte
    limits cutting the pages (the size marks' native reads, the Lua reads, the reads on past
    the known end): the formatted pages hold the records the parsed ones do."""
    bits = 10

    async def body() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"consume-raw-{uuid.uuid4().hex[:8]}")
        await pin_sequence_bits(client, keys, bits)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            topics = Topics(batcher, keys, topic_defaults=TopicDefaults(1, 1, 1))
            both = [Partitions(batcher, keys, topics, sequence_bits=bits) for _ in range(2)]
            config = await topics.topic("special")
            values = [v * (i % 7 + 1) for i, v in enumerate(SPECIAL * 3)]
            produced: list[int] = []
            formatted_pages = 0
            for round_ in range(2):  # the second round: the marks known, the log grown
                half = values[round_ * len(values) // 2 : (round_ + 1) * len(values) // 2]
                for value in half:
                    result = await both[0].produce(config, 0, [(b"k", value)])
                    produced += result.offsets
                for offset in produced[::5]:
                    for max_records, max_bytes in ((1000, 0), (7, 0), (1000, 20), (40, 300)):
                        pages = [
                            await partitions.start_consume(
                                config,
                                0,
                                offset,
                                max_records,
                                max_bytes,
                                format_values if raw else None,
                            )  # fmt: skip
                            for partitions, raw in zip(both, (True, False), strict=True)
                        ]
                        formatted, parsed = pages
                        assert formatted.high_watermark == parsed.high_watermark
                        assert list(formatted.records) == list(parsed.records)
                        assert _consume_payload(formatted) == _consume_payload(parsed)
                        formatted_pages += type(formatted.records) is FormattedRecords
            # where the batcher reads raw (the scanner built), most pages come formatted
            from mapping.connection import raw_replies

            if raw_replies.scan is not None:
                assert formatted_pages > 0
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(body())


def test_a_parsed_reply_goes_the_pure_way() -> None:
    """Where the batcher cannot read raw, the reply comes parsed: entry_values reads it."""
    entries = [[b"%d-0" % FIRST_MS, [b"value", b"x,y"]]]
    hw = FIRST_MS << 10
    noted: list[tuple[int, int]] = []
    records = formatted_or_values(entries, format_values, hw, 10, noted)
    assert records == [(hw, b"x,y")]
    formatted = formatted_or_values(as_reply(entries), format_values, hw, 10, noted)
    assert type(formatted) is FormattedRecords and formatted.text == f"{hw}:x%2Cy"
