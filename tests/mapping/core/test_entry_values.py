"""``mapping.core.records.entry_values``, the V1 CONSUME hot loop: every entry layout the writers
make reads as its value, markers and transactional records are noted for the caller, and the
raw reply and redis-py's dict shape agree."""

from __future__ import annotations

from mapping.core import codec
from mapping.core.records import entry_values

BITS = 10
MS = 1_700_000_000_000

# (fields, value read, noted producer id: None plain, -1 marker)
LAYOUTS: list[tuple[list[bytes], bytes | None, int | None]] = [
    ([b"key", b"k", b"value", b"v1", b"ts", b"1", b"n", b"1"], b"v1", None),  # V1
    ([b"key", b"k", b"value", b"v2", b"ts", b"1", b"create_ts", b"5", b"n", b"2"], b"v2", None),
    ([b"value", b"v3", b"ts", b"1", b"create_ts", b"5", b"null", b"key", b"n", b"3"], b"v3", None),
    ([b"key", b"k", b"ts", b"1", b"create_ts", b"5", b"null", b"value", b"n", b"4"], b"", None),
    ([b"key", b"k", b"value", b"v5", b"ts", b"1", b"h:pid", b"x", b"n", b"5"], b"v5", None),
    (
        [
            b"key",
            b"k",
            b"value",
            b"v6",
            b"ts",
            b"1",
            b"create_ts",
            b"5",
            b"pid",
            b"7",
            b"pe",
            b"0",
            b"n",
            b"6",
        ],
        b"v6",
        7,
    ),  # fmt: skip
    ([b"ctl", b"commit", b"pid", b"7", b"pe", b"0", b"ts", b"1", b"n", b"7"], None, -1),
    (
        [
            b"value",
            b"v8",
            b"ts",
            b"1",
            b"create_ts",
            b"5",
            b"null",
            b"key",
            b"pid",
            b"9",
            b"pe",
            b"0",
            b"n",
            b"8",
        ],
        b"v8",
        9,
    ),  # fmt: skip
]


def _entries(dict_shape: bool) -> list:
    entries = []
    for i, (fields, _, _) in enumerate(LAYOUTS):
        entry_id = f"{MS + i // 3}-{i % 3}".encode()  # some entries share a millisecond
        shaped = dict(zip(fields[::2], fields[1::2], strict=True)) if dict_shape else fields
        entries.append((entry_id, shaped))
    return entries


def _expected(up_to: int) -> tuple[list[tuple[int, bytes]], list[tuple[int, int]]]:
    values, noted = [], []
    for i, (_, value, producer) in enumerate(LAYOUTS[: up_to + 1]):
        offset = codec.entry_offset(f"{MS + i // 3}-{i % 3}".encode(), BITS)
        if producer is not None:
            noted.append((offset, producer))
        if value is not None:
            values.append((offset, value))
    return values, noted


def test_every_layout_reads_as_its_value_in_both_shapes() -> None:
    for dict_shape in (False, True):
        noted: list[tuple[int, int]] = []
        values = entry_values(_entries(dict_shape), 0, 1 << 62, BITS, noted)
        assert (values, noted) == _expected(len(LAYOUTS) - 1), dict_shape


def test_reading_stops_at_the_high_watermark_and_skips_leading_items() -> None:
    entries = _entries(False)
    high_watermark = codec.entry_offset(entries[4][0], BITS)
    noted: list[tuple[int, int]] = []
    values = entry_values(["hw", "marks", *entries], 2, high_watermark, BITS, noted)
    assert (values, noted) == _expected(4)
    assert entry_values([], 0, high_watermark, BITS) == []
    assert entry_values(entries, 0, high_watermark, BITS) == _expected(4)[0]  # nothing noted
