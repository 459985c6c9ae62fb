"""Replies handed over as their RESP bytes instead of Python objects: a reader that walks
them itself in compiled code (the Fetch's XRANGE pages, adapter/kafka/_walk.c) saves the
pod building and freeing an object per field.

A raw call is a ``RawCommand`` (the batcher's ``submit_raw``). On a connection of its own
the batcher reads the socket into its buffer, finds where each reply ends with ``scan``
(the compiled ``_resp_scan`` where the install built it, else ``scan_pure``), and hands a
raw call's array reply over as a ``RawReply``; every other reply, and a raw call's error or
non-array reply, goes through the connection's hiredis reader as before. Where the batcher
cannot read raw (another client, no hiredis parser) a raw call's reply comes parsed, so a
reader of raw replies takes both forms (``RawReply.parsed`` makes the one from the other).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hiredis

from mapping.core.compiled import compiled

# scan(buffer, pos, pending, last) -> (pos, pending, last)
Scan = Callable[[Any, int, tuple[int, ...], int], tuple[int, tuple[int, ...], int]]
START = (1,)  # ``pending`` for a reply not scanned yet: one element to go


class RawCommand(tuple):
    """A command whose reply is wanted as its RESP bytes (a ``RawReply``) where the
    connection allows."""

    __slots__ = ()


class RawReply:
    """An array reply's RESP bytes: ``count`` elements, the first at byte ``first`` of
    ``data``, the last at ``last`` (-1: none); the reply itself is ``data[start:end]``.

    ``data`` is bytes, or the batcher's read buffer (a bytearray) handed over as it is: the
    reply is not copied out of it, and the batcher never changes the bytes it lent (it
    starts a new buffer instead), so byte offsets into it stay valid."""

    __slots__ = ("data", "count", "first", "last", "start", "end", "_parsed")

    def __init__(
        self,
        data: bytes | bytearray,
        count: int,
        first: int,
        last: int,
        start: int = 0,
        end: int | None = None,
    ) -> None:
        self.data = data
        self.count = count
        self.first = first
        self.last = last
        self.start = start
        self.end = len(data) if end is None else end
        self._parsed: list[Any] | None = None

    def __len__(self) -> int:
        return self.count

    def parsed(self) -> list[Any]:
        """The reply as hiredis gives it (made once, kept): for readers that need objects."""
        if self._parsed is None:
            reader = hiredis.Reader()
            reader.feed(self.data, self.start, self.end - self.start)
            self._parsed = reader.gets()
        return self._parsed


def listed(reply: Any) -> list[Any]:
    """A raw call's reply as a list, whichever form it came in."""
    return reply.parsed() if isinstance(reply, RawReply) else reply


def raw_reply(buffer: bytearray, start: int, end: int, last: int) -> RawReply | None:
    """The array reply at ``buffer[start:end]`` (``last``: where scan saw its last element)
    as a ``RawReply`` over ``buffer`` itself (the caller no longer changes its bytes); None
    for any other reply (an error, a null array)."""
    if buffer[start] != 0x2A:  # "*"
        return None
    header_end = buffer.index(b"\r\n", start)
    count = int(buffer[start + 1 : header_end])
    if count < 0:
        return None
    return RawReply(buffer, count, header_end + 2, last, start, end)


_LINE_ONLY = frozenset(b"+-:_,#(")
_BULK = frozenset(b"$!=")
_AGGREGATE = frozenset(b"*~>%")
_MAX_DEPTH = 32


def scan_pure(
    buffer: Any, pos: int, pending: tuple[int, ...], last: int
) -> tuple[int, tuple[int, ...], int]:
    """Skips the RESP elements in ``buffer`` from ``pos``: ``pending`` counts the elements
    still to come at each depth (``START`` for a new reply). Returns where it stopped, what
    is still pending there (``()``: the reply is complete and ends at ``pos``) and ``last``,
    where the latest element of the reply's own aggregate starts. Scanning on from what it
    returns, once more bytes came, goes on where it stopped. ValueError: not RESP."""
    stack = list(pending)
    size = len(buffer)
    while stack:
        if stack[-1] == 0:
            stack.pop()
            continue
        if pos >= size:
            break
        line_end = buffer.find(b"\n", pos)
        if line_end < 0:
            break
        if line_end - pos < 2 or buffer[line_end - 1] != 0x0D:
            raise ValueError(f"RESP protocol error: a line without CRLF at byte {pos}")
        kind = buffer[pos]
        following = line_end + 1
        children = 0
        if kind in _BULK:
            length = _length(buffer, pos, line_end)
            if length >= 0:
                if length + 2 > size - following:
                    break
                if buffer[following + length : following + length + 2] != b"\r\n":
                    raise ValueError(f"RESP protocol error: a bulk without CRLF at byte {pos}")
                following += length + 2
        elif kind in _AGGREGATE:
            children = max(0, _length(buffer, pos, line_end)) * (2 if kind == 0x25 else 1)
        elif kind not in _LINE_ONLY:
            raise ValueError(f"RESP protocol error: an unknown reply type at byte {pos}")
        if len(stack) == 2:
            last = pos
        stack[-1] -= 1
        pos = following
        if children:
            if len(stack) == _MAX_DEPTH:
                raise ValueError(f"RESP protocol error: nested too deep at byte {pos}")
            stack.append(children)
    return pos, tuple(stack), last


def _length(buffer: Any, pos: int, line_end: int) -> int:
    text = bytes(buffer[pos + 1 : line_end - 1])
    digits = text[1:] if text.startswith(b"-") else text
    if not digits.isdigit() or len(digits) > 18 or int(text) < -1:
        raise ValueError(f"RESP protocol error: a bad length at byte {pos}")
    return int(text)


# the compiled scanner (mapping/core/compiled.py); None: raw calls come parsed (read per
# pipeline)
scan: Scan | None = compiled("mapping.connection._resp_scan", "scan")
