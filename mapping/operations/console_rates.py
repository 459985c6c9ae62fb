"""What the console samples every few seconds (its rate and lag charts): totals that are
cheap to read, never a scan of keys.

- records produced: per partition the number partition/produce.lua writes in each entry
  (records ever appended, mapping/core/records.py ``NUMBER``), read from the last entry
  (XREVRANGE COUNT 1); the log's length for a log written before entries were numbered;
- records stored: XLEN of every log;
- each group's lag in records per topic (partition/lag.lua, as ``adapter inspect`` reads
  it), for the groups the ``<prefix>:groups`` set lists. Records consumed are what the
  groups' commits moved past: the produced records minus the growth of their lag.

A sample reads every partition, so it is paced: ``CHUNK`` partitions at a time, the chunks
spread over ``spread_s`` seconds, so that the console's pages (answered between two chunks,
on a connection of their own) never wait behind a whole sample; and the records stored are
read only when asked (the sampler asks every few samples: they change slowly).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mapping.connection.batcher import RedisBatcher
from mapping.core import codec
from mapping.core.keys import Keys, parse_group_entry
from mapping.core.records import NUMBER_BYTES
from mapping.operations.group_overview import record_lag

# Group partitions whose lag one sample reads at most (the rest wait for later samples)
MAX_LAG_READS = 20_000
# Reads sent in one go: the console's pages are answered between two chunks
CHUNK = 200


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the epoch
    produced: dict[str, int]  # topic -> records ever appended to its partitions
    stored: int | None  # records in every log now (None: not read by this sample)
    lags: dict[tuple[str, str], int] = field(default_factory=dict)  # (group, topic) -> lag


async def paced(
    calls: list[Callable[[], Awaitable[Any]]], spread_s: float, share: float = 1.0
) -> list[Any]:
    """The replies of ``calls``, made ``CHUNK`` at a time (each chunk one pipeline of the
    batcher); between two chunks a pause, so that the chunks take ``share`` of ``spread_s``
    (at least a yield to the event loop)."""
    chunks = max(1, -(-len(calls) // CHUNK))
    pause = spread_s * share / chunks
    replies: list[Any] = []
    for start in range(0, len(calls), CHUNK):
        if start:
            await asyncio.sleep(pause)
        replies += await asyncio.gather(*(call() for call in calls[start : start + CHUNK]))
    return replies


def entry_number(entries: list) -> int | None:
    """The record number of XREVRANGE's one entry (None: none, or written unnumbered)."""
    if not entries:
        return 0
    fields = entries[0][1]
    if len(fields) >= 2 and fields[-2] == NUMBER_BYTES:
        return int(fields[-1])
    return None


async def partition_counts(batcher: RedisBatcher, keys: Keys) -> dict[str, int]:
    names = sorted(codec.to_str(n) for n in await batcher.call("SMEMBERS", keys.topics))
    counts = await asyncio.gather(
        *(batcher.call("HGET", keys.topic(n), "partitions") for n in names)
    )
    return {n: int(c) for n, c in zip(names, counts, strict=True) if c is not None}


async def read_sample(
    batcher: RedisBatcher, keys: Keys, bits: int, *, spread_s: float = 0.0, stored: bool = True
) -> Sample:
    """One sample, its reads spread over ``spread_s`` seconds (``stored``: the logs'
    lengths too)."""
    counts = await partition_counts(batcher, keys)
    logs = [(t, keys.partition(t, p).log) for t, c in counts.items() for p in range(c)]
    share = 0.5 if stored else 0.7  # the rest for the lengths and the groups' lags

    def last(log: bytes | str) -> Callable[[], Awaitable[Any]]:
        return lambda: batcher.call("XREVRANGE", log, "+", "-", "COUNT", 1)

    def length(log: bytes | str) -> Callable[[], Awaitable[Any]]:
        return lambda: batcher.call("XLEN", log)

    lasts = await paced([last(log) for _, log in logs], spread_s, share)
    produced: dict[str, int] = {}
    unnumbered: list[int] = []  # logs written before entries were numbered: their length
    for index, ((topic, _), entries) in enumerate(zip(logs, lasts, strict=True)):
        number = entry_number(entries)
        if number is None:
            unnumbered.append(index)
        else:
            produced[topic] = produced.get(topic, 0) + number
    lengths: dict[int, int] = {}
    if stored:
        found = await paced([length(log) for _, log in logs], spread_s, 0.3)
        lengths = {index: int(n) for index, n in enumerate(found)}
    elif unnumbered:
        found = await paced([length(logs[i][1]) for i in unnumbered], spread_s, 0.0)
        lengths = {i: int(n) for i, n in zip(unnumbered, found, strict=True)}
    for index in unnumbered:
        topic = logs[index][0]
        produced[topic] = produced.get(topic, 0) + lengths[index]
    lags = await group_lags(batcher, keys, counts, bits, spread_s * 0.2)
    total = sum(lengths.values()) if stored else None
    return Sample(time.time(), produced, total, lags)


async def group_lags(
    batcher: RedisBatcher, keys: Keys, counts: dict[str, int], bits: int, spread_s: float = 0.0
) -> dict[tuple[str, str], int]:
    """Every (group, topic)'s lag in records, summed over the topic's partitions."""
    pairs = [
        pair
        for pair in map(parse_group_entry, await batcher.call("SMEMBERS", keys.groups))
        if pair is not None and pair[1] in counts
    ]
    committed = await paced(
        [lambda g=g, t=t: batcher.call("HGETALL", keys.group(g, t).offsets) for g, t in pairs], 0.0
    )
    wanted = []
    for (group, topic), stored in zip(pairs, committed, strict=True):
        offsets = {int(p): int(o) for p, o in stored.items()}
        wanted += [(group, topic, p, offsets.get(p, 0)) for p in range(counts[topic])]
    wanted = wanted[:MAX_LAG_READS]
    lags = await paced(
        [lambda t=t, p=p, c=c: record_lag(batcher, keys, t, p, c, bits) for _, t, p, c in wanted],
        spread_s,
    )
    totals: dict[tuple[str, str], int] = {}
    for (group, topic, _, _), (_, lag, _) in zip(wanted, lags, strict=True):
        totals[(group, topic)] = totals.get((group, topic), 0) + lag
    return totals


def rates(before: Sample, after: Sample) -> tuple[float, float]:
    """(records produced per second, records consumed by the groups per second) between
    two samples."""
    seconds = max(after.at - before.at, 1e-3)
    produced = {t: n - before.produced.get(t, n) for t, n in after.produced.items()}
    consumed = 0
    for (group, topic), lag in after.lags.items():
        if (group, topic) in before.lags:
            consumed += max(0, produced.get(topic, 0) - (lag - before.lags[(group, topic)]))
    return sum(max(0, n) for n in produced.values()) / seconds, consumed / seconds
