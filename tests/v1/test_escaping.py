"""Percent-escaping: any byte string survives escape -> unescape."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.v1.escaping import escape, unescape
from adapter.v1.protocol import ENCODING, ERRORS

FORBIDDEN = set(",|%")


def _safe_token(text: str) -> None:
    """Text that can sit in a reply token: no whitespace, separators or raw bytes."""
    for char in text.replace("%", ""):
        assert not char.isspace(), repr(text)
        assert char not in FORBIDDEN, repr(text)
        assert not (ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0), repr(text)  # controls
    text.encode(ENCODING)  # no surrogate escapes left: valid UTF-8


@given(st.binary(max_size=200))
def test_any_bytes_round_trip(data: bytes) -> None:
    text = escape(data)
    assert unescape(text) == data
    _safe_token(text)
    # a % only ever starts an escape
    assert all(text[i + 1 : i + 3].isalnum() for i, c in enumerate(text) if c == "%")


@given(st.text(max_size=100))
def test_any_text_round_trips(text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    assert unescape(escape(data)) == data
    _safe_token(escape(data))


@given(st.binary(max_size=100))
def test_key_escaping_with_colon(data: bytes) -> None:
    text = escape(data, also=":")
    assert ":" not in text
    assert unescape(text) == data


@given(st.binary(max_size=100))
def test_round_trip_through_a_request_line(data: bytes) -> None:
    """What the server does: the line is decoded with surrogateescape, then unescaped."""
    line = f"V1|1|PRODUCE|t {escape(b'k', also=':')}:{escape(data)}".encode(ENCODING, ERRORS)
    args = line.decode(ENCODING, ERRORS).split("|", 3)[3].split()
    assert len(args) == 2
    assert unescape(args[1].partition(":")[2]) == data


@pytest.mark.parametrize("plain", [b"created", b'{"a":1}', b"paid", b"a:b", b"caf\xc3\xa9"])
def test_plain_values_pass_unchanged(plain: bytes) -> None:
    assert escape(plain) == plain.decode()
    assert unescape(plain.decode()) == plain


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"a b", "a%20b"),
        (b"a,b", "a%2Cb"),
        (b"a|b", "a%7Cb"),
        (b"100%", "100%25"),
        (b"\n\r\t", "%0A%0D%09"),
        (b"\x00\x7f", "%00%7F"),
        (b"\xff", "%FF"),
        ("a\u00a0b".encode(), "a%C2%A0b"),  # unicode whitespace
        ("x\u2028".encode(), "x%E2%80%A8"),
        ("\x85".encode(), "%C2%85"),  # C1 control
    ],
)
def test_escapes(data: bytes, text: str) -> None:
    assert escape(data) == text
    assert unescape(text) == data


def test_unescape_keeps_stray_percent() -> None:
    assert unescape("100%") == b"100%"
    assert unescape("%zz%4") == b"%zz%4"
    assert unescape("%41%4a%4A") == b"AJJ"
    assert unescape("%3A") == b":"


def test_unescape_carries_raw_bytes() -> None:
    raw = b"\xff\xfe%41"
    assert unescape(raw.decode(ENCODING, ERRORS)) == b"\xff\xfeA"
