"""The writers of the Kafka protocol's primitive types that the hand-written codecs share
(produce_codec.py, fetch_codec.py): unsigned varints, strings and the lengths of arrays and
bytes, in their classic (int16/int32) and compact (varint + 1, KIP-482) forms."""

from __future__ import annotations

import struct

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def uvarint(value: int) -> bytes:
    if value < 0x80:  # the common case: one byte
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str | None, compact: bool) -> bytes:
    """A (nullable) string."""
    if value is None:
        return b"\x00" if compact else b"\xff\xff"
    data = value.encode()
    return (uvarint(len(data) + 1) if compact else _INT16.pack(len(data))) + data


def count(length: int | None, compact: bool) -> bytes:
    """An array's (or bytes') length; None: null."""
    if length is None:
        return b"\x00" if compact else b"\xff\xff\xff\xff"
    return uvarint(length + 1) if compact else _INT32.pack(length)
