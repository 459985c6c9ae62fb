"""The offset codec: a Kafka-style integer offset <-> a Redis stream entry id; and
``to_str``, the one way a value Redis replied with becomes text.

``offset = (ms << B) | seq`` where ``ms-seq`` is the entry id and ``B`` the deployment's
sequence bits. The produce script keeps ``seq < 2**B`` (it rolls over to the next
millisecond), so the mapping is a bijection and offsets sort like entry ids.
"""

from __future__ import annotations

from typing import Any

DEFAULT_SEQUENCE_BITS = 10
# Lua numbers are doubles: offsets must stay below 2**53 to be exact inside scripts.
# With B <= 11 that holds for every millisecond up to the year 2109.
MAX_SEQUENCE_BITS = 11
MIN_SEQUENCE_BITS = 1
# The largest offset a request may name: Redis stream ids are two unsigned 64-bit parts, and
# offsets are signed 64-bit numbers in both protocols.
MAX_OFFSET = (1 << 63) - 1


def check_sequence_bits(bits: int) -> int:
    if not MIN_SEQUENCE_BITS <= bits <= MAX_SEQUENCE_BITS:
        raise ValueError(
            f"sequence bits must be in {MIN_SEQUENCE_BITS}..{MAX_SEQUENCE_BITS}, got {bits}"
        )
    return bits


def encode(ms: int, seq: int, bits: int = DEFAULT_SEQUENCE_BITS) -> int:
    """Offset of entry ``ms-seq``; ``seq`` must fit in ``bits``."""
    if ms < 0 or seq < 0:
        raise ValueError(f"entry id parts must be non-negative, got {ms}-{seq}")
    if seq >= 1 << bits:
        raise OverflowError(f"sequence {seq} does not fit in {bits} bits")
    return (ms << bits) | seq


def decode(offset: int, bits: int = DEFAULT_SEQUENCE_BITS) -> tuple[int, int]:
    """``(ms, seq)`` of an offset; any non-negative offset is a valid stream position."""
    if offset < 0:
        raise ValueError(f"offset must be non-negative, got {offset}")
    return offset >> bits, offset & ((1 << bits) - 1)


def entry_id(offset: int, bits: int = DEFAULT_SEQUENCE_BITS) -> str:
    """The stream id ``ms-seq`` for an offset (an XRANGE bound: the first entry at or after it)."""
    ms, seq = decode(offset, bits)
    return f"{ms}-{seq}"


def entry_offset(stream_id: bytes, bits: int = DEFAULT_SEQUENCE_BITS) -> int:
    """``offset_of`` for the bytes ids of a raw XRANGE reply, without decoding (hot path)."""
    ms, _, seq = stream_id.partition(b"-")
    return (int(ms) << bits) | int(seq)


def offset_of(stream_id: str | bytes, bits: int = DEFAULT_SEQUENCE_BITS) -> int:
    """The offset of a stream entry id such as ``b"1700000000000-3"``."""
    if isinstance(stream_id, bytes):
        stream_id = stream_id.decode("ascii")
    ms, _, seq = stream_id.partition("-")
    return encode(int(ms), int(seq), bits)


def reply_pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A HGETALL or WITHSCORES reply as (field, value) pairs, however the client shaped it:
    a dict, a list of pairs, or a flat list."""
    if isinstance(reply, dict):
        return list(reply.items())
    if reply and isinstance(reply[0], list | tuple):
        return [(first, second) for first, second in reply]
    return list(zip(reply[::2], reply[1::2], strict=False))


def to_str(value: object) -> str:
    """A value from a Redis reply as text: bytes decoded as UTF-8 (replies are bytes unless
    the client decodes them), anything else (a str, or a number such as INFO's) as
    ``str`` writes it."""
    return value.decode() if isinstance(value, bytes) else str(value)
