"""What a partition's state says about the sizes of its values, so a CONSUME can read with a
native XRANGE whose COUNT keeps within its byte limit (see partition/produce.lua's size marks in
lib/partition.lua, and ``Partitions.start_consume``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The value size marks partition/produce.lua keeps: 'size.<k>' for k in this range (see
# lib/partition.lua, which reads them as K.SIZE_MIN_BITS and K.SIZE_MAX_BITS).
SIZE_MIN_BITS, SIZE_MAX_BITS = 7, 24
# Partitions whose size marks one pod remembers (the oldest learnt are forgotten first).
MAX_REMEMBERED_MARKS = 10_000
# Fewer records than this per native read: partition/consume.lua may read instead (see SizeMarks).
NATIVE_MIN_COUNT = 32


@dataclass(frozen=True, slots=True)
class SizeMarks:
    """What a partition's state said about its values when a CONSUME last read it (offsets
    up to ``log_end`` are known, from ``marked_from`` on; -1: never marked), and the
    smallest value that CONSUME returned if it returned only a few (0: many, or none)."""

    log_end: int
    marked_from: int
    # From k = SIZE_MIN_BITS up: the last offset with a value over 2**k bytes (-1: none).
    last_over: tuple[int, ...]
    few_smallest: int = 0

    @classmethod
    def of(cls, marks: list[Any], few_smallest: int = 0) -> SizeMarks:
        """From partition/consume.lua's ``{log_end, size.from, size.<k>...}``."""
        return cls(int(marks[0]), int(marks[1]), tuple(int(m) for m in marks[2:]), few_smallest)

    def covers(self, start: int) -> bool:
        """Whether these marks bound the values from ``start`` up to ``log_end``."""
        return 0 <= self.marked_from <= start <= self.log_end

    def value_bound(self, start: int) -> int:
        """Bytes no value from ``start`` to ``log_end`` exceeds (0: the marks do not say);
        2**(SIZE_MAX_BITS + 1) stands for "any size"."""
        if not self.covers(start):
            return 0
        for bits, last in enumerate(self.last_over, SIZE_MIN_BITS):
            if last < start:  # every value from start to log_end is at most 2**bits bytes
                return 1 << bits
        return 1 << (SIZE_MAX_BITS + 1)

    def native_count(self, start: int, max_records: int, max_bytes: int) -> int:
        """How many records a native XRANGE from ``start`` to ``log_end`` may count with
        their values within ``max_bytes`` (at least 1: the first record always comes);
        0 when the marks do not say (past ``log_end``, or unmarked records)."""
        bound = self.value_bound(start)
        return max(1, min(max_records, max_bytes // bound)) if bound else 0

    def native_read(self, start: int, max_records: int, max_bytes: int) -> int:
        """The COUNT of a native XRANGE to read from ``start``, or 0 when partition/consume.lua
        should read. Fewer than ``NATIVE_MIN_COUNT`` records under the byte limit means large
        values in the range: if the last read returned values about that large (at least
        half the bound), they are all alike and the count is about exact; otherwise small
        values may come before a large one, and a native read would hold them to a page
        of a few, so partition/consume.lua reads exactly up to the limit (copying large values
        through Lua costs Redis about 30x XRANGE's own copy: it is not the default)."""
        count = self.native_count(start, max_records, max_bytes)
        if count >= min(NATIVE_MIN_COUNT, max_records):
            return count
        if count and self.few_smallest * 2 > self.value_bound(start):
            return count
        return 0
