"""Counting records without reading them, and the plans built on it: the micro-batch cap
(``maxOffsetsPerTrigger``) and the Spark tasks of a range (``maxRecordsPerPartition``,
``minPartitions``), as Spark's Kafka source plans them.

Offsets have gaps, so Kafka's ``until - from`` is no count here. Every append numbers its
entry (field ``n``: records ever appended to the partition, lib/append.lua), so the entries
in ``[start, end)`` are ``n(last) - n(first) + 1``: two entries read however long the range
(partition/lag.lua counts a group's lag alike), and the position after the k-th entry is
found by bisecting the offsets on ``n``. Like Kafka's offsets, the numbers count what
compaction removed since, and transaction markers and aborted records, which the reader
leaves out: a range holds at most the count, never more. Entries written before numbering
(no ``n``) are counted by reading them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import redis

from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.records import NUMBER_BYTES
from spark_connector.offset_specs import TopicPartition
from spark_connector.offsets import Positions, RangePartition

Entry = tuple[bytes, dict[bytes, bytes]]


def _number(entry: Entry) -> int | None:
    value = entry[1].get(NUMBER_BYTES)
    return int(value) if value is not None else None


def count_by_reading(
    client: redis.Redis, log: str, start: int, end: int, cap: int | None, bits: int, page: int
) -> tuple[int, int]:
    """(entries found, the position after the last one counted): at most ``cap`` of
    ``[start, end)`` read page by page; the position is ``end`` when fewer were found."""
    found = 0
    position = start
    while (cap is None or found < cap) and position < end:
        want = page if cap is None else min(page, cap - found)
        entries = client.xrange(
            log, codec.entry_id(position, bits), codec.entry_id(end - 1, bits), count=want
        )
        if not entries:
            break
        found += len(entries)
        position = codec.offset_of(entries[-1][0], bits) + 1
    return found, (position if found == cap else end)


def range_sizes(
    client: redis.Redis,
    keys: Keys,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    bits: int,
    page: int,
    cap: int | None = None,
) -> dict[TopicPartition, int]:
    """Entries in each ``[start, end)`` (0 when empty): by their numbers, two entries read per
    range in one pipeline; an unnumbered range is counted by reading, up to ``cap``."""
    wanted = [tp for tp, (start, end) in sorted(ranges.items()) if end > start]
    pipe = client.pipeline(transaction=False)
    for topic, p in wanted:
        start, end = ranges[(topic, p)]
        first, last = codec.entry_id(start, bits), codec.entry_id(end - 1, bits)
        pipe.xrange(keys.partition(topic, p).log, first, last, count=1)
        pipe.xrevrange(keys.partition(topic, p).log, last, first, count=1)
    replies = pipe.execute()
    sizes = {tp: 0 for tp in ranges}
    for i, tp in enumerate(wanted):
        lowest, highest = replies[2 * i], replies[2 * i + 1]
        if not lowest or not highest:
            continue
        low, high = _number(lowest[0]), _number(highest[0])
        if low is not None and high is not None:
            sizes[tp] = high - low + 1
        else:
            start, end = ranges[tp]
            log = keys.partition(*tp).log
            sizes[tp] = count_by_reading(client, log, start, end, cap, bits, page)[0]
    return sizes


def _first_at_or_after(client: redis.Redis, log: str, position: int, end: int, bits: int) -> Any:
    entries = client.xrange(
        log, codec.entry_id(position, bits), codec.entry_id(end - 1, bits), count=1
    )
    return entries[0] if entries else None


def cut_after(
    client: redis.Redis, log: str, start: int, end: int, count: int, bits: int, page: int
) -> int:
    """The position right after the ``count``-th entry of ``[start, end)``, or ``end`` when
    it holds no more than ``count``: bisection on the offsets for the first entry numbered
    ``n(first) + count`` (about two probes per halving of the offsets between)."""
    if count <= 0 or end <= start:
        return start
    first = _first_at_or_after(client, log, start, end, bits)
    if first is None:
        return end
    low_number = _number(first)
    if low_number is None:
        return count_by_reading(client, log, start, end, count, bits, page)[1]
    target = low_number + count
    # Entries below `low` are numbered below target, those at or after `high` (< end) not;
    # `low` moves only past an entry found below target, so it ends right after the last one.
    low, high = codec.offset_of(first[0], bits) + 1, end
    beyond = False  # an entry numbered target or more was found
    while low < high:
        middle = (low + high) // 2
        probe = _first_at_or_after(client, log, middle, high, bits)
        if probe is None:
            high = middle  # nothing in [middle, high)
            continue
        number = _number(probe)
        if number is None:
            return count_by_reading(client, log, start, end, count, bits, page)[1]
        offset = codec.offset_of(probe[0], bits)
        if number >= target:
            high, beyond = offset, True
        else:
            low = offset + 1
    return low if beyond else end


def proportional_quotas(
    budget: int, sizes: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """``budget`` records split across partitions in proportion to their sizes, as Spark's
    ``maxOffsetsPerTrigger`` splits it (each share rounded down); Spark rounds a share below
    one record up to one so no partition starves, which can pass the cap: here the records
    left by rounding go first to those partitions, then to the largest remainders, so the
    total is exactly ``min(budget, sum(sizes))``."""
    total = sum(sizes.values())
    if total <= budget:
        return dict(sizes)
    quotas = {tp: budget * size // total for tp, size in sizes.items()}
    left = budget - sum(quotas.values())  # fewer than len(sizes)
    order = sorted(
        (tp for tp, size in sizes.items() if size > 0),
        key=lambda tp: (quotas[tp] > 0, -(budget * sizes[tp] % total), tp),
    )
    for tp in order[:left]:
        quotas[tp] += 1
    return quotas


def limit_ends(
    client: redis.Redis,
    keys: Keys,
    starts: Positions,
    ends: Positions,
    budget: int,
    bits: int,
    page: int,
) -> Positions:
    """``ends`` cut so that ``[starts, ends)`` hold at most ``budget`` entries in total
    (``proportional_quotas``); ``starts`` has every partition of ``ends``."""
    ranges = {tp: (starts[tp], end) for tp, end in ends.items()}
    sizes = range_sizes(client, keys, ranges, bits, page, cap=budget)
    quotas = proportional_quotas(budget, {tp: n for tp, n in sizes.items() if n > 0})
    limited = dict(ends)
    for tp, quota in quotas.items():
        if quota < sizes[tp]:
            log = keys.partition(*tp).log
            limited[tp] = cut_after(client, log, starts[tp], ends[tp], quota, bits, page)
    return limited


def _part_count(size: float, total: int, min_parts: int) -> int:
    """Spark's getPartCount: ``round(size / total * min_parts)``, at least 1 (Scala's
    ``math.round`` rounds halves up, Python's ``round`` to even)."""
    return max(math.floor(size / total * min_parts + 0.5), 1)


def task_counts(
    sizes: Mapping[TopicPartition, int], max_records: int, min_partitions: int | None
) -> dict[TopicPartition, int]:
    """Spark tasks per range: ranges over ``max_records`` records are cut into
    ``ceil(size / max_records)``; then, when that gives fewer than ``min_partitions`` tasks,
    the large ranges are cut further in proportion to their size (Spark's
    KafkaOffsetRangeCalculator: ranges whose share is one task stay whole)."""
    counts = {tp: -(-size // max_records) for tp, size in sizes.items() if size > 0}
    pieces = sum(counts.values())
    if min_partitions is None or pieces >= min_partitions:
        return counts
    # Spark cuts the pieces of maxRecordsPerPartition; pieces of one range are equal, so
    # its share is computed once per range and multiplied.
    piece_sizes = {tp: sizes[tp] / counts[tp] for tp in counts}
    total = sum(sizes[tp] for tp in counts)
    whole = {tp for tp in counts if _part_count(piece_sizes[tp], total, min_partitions) == 1}
    whole_pieces = sum(counts[tp] for tp in whole)
    rest_total = total - sum(sizes[tp] for tp in whole)
    rest_parts = max(min_partitions - whole_pieces, 1)
    return {
        tp: count if tp in whole else count * _part_count(piece_sizes[tp], rest_total, rest_parts)
        for tp, count in counts.items()
    }


def plan_tasks(
    client: redis.Redis,
    keys: Keys,
    starts: Positions,
    ends: Positions,
    bits: int,
    page: int,
    max_records: int,
    min_partitions: int | None,
) -> list[RangePartition]:
    """The Spark tasks reading ``[starts, ends)``: one per partition with data, more where
    ``task_counts`` says, each part holding an equal share of the range's entries."""
    ranges = {tp: (starts[tp], end) for tp, end in ends.items() if end > starts[tp]}
    sizes = range_sizes(client, keys, ranges, bits, page)
    tasks: list[RangePartition] = []
    for tp, parts in sorted(task_counts(sizes, max_records, min_partitions).items()):
        topic, p = tp
        position, end = ranges[tp]
        remaining = sizes[tp]
        log = keys.partition(topic, p).log
        for part in range(parts):
            share = remaining // (parts - part)  # the last part takes the rounding
            remaining -= share
            after = (
                end
                if part == parts - 1
                else cut_after(client, log, position, end, share, bits, page)
            )
            if after > position:
                tasks.append(RangePartition(p, position, after, bits, topic))
            position = after
    return tasks
