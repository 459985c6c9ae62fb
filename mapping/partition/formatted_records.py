"""A CONSUME page whose records stayed in the XRANGE reply's RESP bytes: the reader's own
text of them, made by a formatter walking those bytes (V1's, adapter/v1/raw_consume.py),
and what the partitions need of the records without their objects (how many, their sizes).

``Partitions.start_consume`` reads its XRANGE pages raw when given a formatter
(``FormatValues``); a page the formatter takes comes back with a ``FormattedRecords`` as its
``records``. It is a sequence like the list it stands for: anything that walks it (a page
joined with the next, a test) has the reply parsed then, as ``entry_values`` reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from mapping.connection.raw_replies import RawReply
from mapping.core.records import entry_values

# format(data, first, count, bits, high_watermark) -> (text, records, value bytes after the
# first record, smallest value) of a raw XRANGE reply's entries (``count`` of them, the first
# at byte ``first`` of ``data``) up to the high watermark, or None: a page the formatter
# leaves to the parsed path (a transactional record, a marker, a layout it does not read).
FormatValues = Callable[[bytes, int, int, int, int], tuple[Any, int, int, int] | None]


class FormattedRecords(Sequence[tuple[int, bytes]]):
    """(offset, value) of a page as ``entry_values`` gives them, kept as ``text``: the
    formatter's rendering of them."""

    __slots__ = ("text", "count", "after_first", "smallest", "_reply", "_bound", "_records")

    def __init__(
        self, formatted: tuple[Any, int, int, int], reply: RawReply, high_watermark: int, bits: int
    ) -> None:
        self.text, self.count, self.after_first, self.smallest = formatted
        self._reply = reply
        self._bound = (high_watermark, bits)
        self._records: list[tuple[int, bytes]] | None = None

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> tuple[int, bytes]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[int, bytes]]: ...

    def __getitem__(self, index: int | slice) -> Any:
        return self.records()[index]

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:  # as the list it stands for
        if isinstance(other, FormattedRecords):
            return self.records() == other.records()
        return self.records() == other

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def records(self) -> list[tuple[int, bytes]]:
        """The records as objects (parsed once, kept): for readers that walk them."""
        if self._records is None:
            high_watermark, bits = self._bound
            self._records = entry_values(self._reply.parsed(), 0, high_watermark, bits)
        return self._records


def formatted_or_values(
    reply: Any,
    format_values: FormatValues | None,
    high_watermark: int,
    bits: int,
    transactional: list[tuple[int, int]],
) -> Sequence[tuple[int, bytes]]:
    """An XRANGE page's records up to the high watermark: formatted from the raw reply where
    the formatter takes it, else ``entry_values`` of the parsed reply (noting markers and
    transactional records in ``transactional``)."""
    if isinstance(reply, RawReply):
        if format_values is not None:
            formatted = format_values(reply.data, reply.first, reply.count, bits, high_watermark)
            if formatted is not None:
                return FormattedRecords(formatted, reply, high_watermark, bits)
        reply = reply.parsed()
    return entry_values(reply, 0, high_watermark, bits, transactional)


def value_bytes_after_first(records: Sequence[tuple[int, bytes]]) -> int:
    """The bytes of the values of all but the first record (what CONSUME's byte limit
    counts), without parsing a formatted page."""
    if isinstance(records, FormattedRecords):
        return records.after_first
    return sum(len(value) for _, value in records[1:])


def smallest_value(records: Sequence[tuple[int, bytes]]) -> int:
    """The size of the smallest value (0: no records), without parsing a formatted page."""
    if isinstance(records, FormattedRecords):
        return records.smallest
    return min((len(value) for _, value in records), default=0)
