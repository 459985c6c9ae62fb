"""The offset codec: offset = (ms << B) | seq."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mapping.core import codec

MS = st.integers(min_value=0, max_value=(1 << 42) - 1)


@given(MS, st.integers(min_value=0, max_value=1023))
def test_round_trip(ms: int, seq: int) -> None:
    offset = codec.encode(ms, seq)
    assert codec.decode(offset) == (ms, seq)
    assert codec.entry_id(offset) == f"{ms}-{seq}"
    assert codec.offset_of(f"{ms}-{seq}") == offset
    assert codec.offset_of(f"{ms}-{seq}".encode()) == offset


@given(st.integers(min_value=1, max_value=11), MS, st.integers(min_value=0, max_value=1 << 12))
def test_round_trip_any_bits(bits: int, ms: int, seq: int) -> None:
    seq %= 1 << bits
    assert codec.decode(codec.encode(ms, seq, bits), bits) == (ms, seq)


@pytest.mark.parametrize("bits", [1, 8, 10, 11])
def test_overflow_at_two_to_the_bits(bits: int) -> None:
    codec.encode(5, (1 << bits) - 1, bits)
    with pytest.raises(OverflowError):
        codec.encode(5, 1 << bits, bits)


@given(MS, st.integers(0, 1023), MS, st.integers(0, 1023))
def test_offsets_sort_like_entry_ids(ms1: int, seq1: int, ms2: int, seq2: int) -> None:
    a, b = codec.encode(ms1, seq1), codec.encode(ms2, seq2)
    assert (a < b) == ((ms1, seq1) < (ms2, seq2))
    assert (a == b) == ((ms1, seq1) == (ms2, seq2))


def test_next_position_rolls_into_next_millisecond() -> None:
    last = codec.encode(7, 1023)
    assert codec.decode(last + 1) == (8, 0)


def test_any_offset_is_a_position() -> None:
    assert codec.entry_id(0) == "0-0"
    assert codec.entry_id(5) == "0-5"
    assert codec.entry_id(1024) == "1-0"


def test_negative_parts_rejected() -> None:
    with pytest.raises(ValueError):
        codec.encode(-1, 0)
    with pytest.raises(ValueError):
        codec.encode(0, -1)
    with pytest.raises(ValueError):
        codec.decode(-1)


def test_check_sequence_bits() -> None:
    assert codec.check_sequence_bits(10) == 10
    for bad in (0, codec.MAX_SEQUENCE_BITS + 1):
        with pytest.raises(ValueError):
            codec.check_sequence_bits(bad)


def test_offsets_stay_exact_in_lua_doubles() -> None:
    # year ~2100 in ms with the largest B stays below 2**53
    assert codec.encode(4_102_444_800_000, 0, codec.MAX_SEQUENCE_BITS) < 1 << 53
