"""The baseline: one Python process talking straight to Redis with redis-py + hiredis.

It runs the adapter's own produce script (one record per EVALSHA, as a naive client would)
and pages the log streams with XRANGE, so the ratios show what the adapter adds on top of
the cheapest way a Python program can do the same work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from bench.stats import Histogram
from mapping import codec, scripts
from mapping.keys import Keys
from mapping.partitioner import partition_for


@dataclass
class Measured:
    operations: int
    records: int
    seconds: float
    histogram: Histogram


def _produce_calls(keys: Keys, topic: str, partitions: int, value: bytes, count: int) -> list:
    script = scripts.load("produce")
    calls = []
    for i in range(count):
        key = f"k{i % 256}".encode()
        pk = keys.partition(topic, partition_for(key, partitions))
        calls.append(
            script.command(
                [pk.log, pk.state, pk.hw_channel, pk.appended_channel],
                [codec.DEFAULT_SEQUENCE_BITS, 1, 10_000, key, value],
            )
        )
    return calls


def _client(url: str) -> redis.Redis:
    client = redis.Redis.from_url(url)
    client.script_load(scripts.load("produce").source)
    return client


def produce_pipelined(
    url: str, keys: Keys, topic: str, partitions: int, value_size: int, seconds: float, depth: int
) -> Measured:
    """EVALSHA produce, one record each, ``depth`` per pipeline round trip."""
    client = _client(url)
    calls = _produce_calls(keys, topic, partitions, b"v" * value_size, depth)
    histogram = Histogram()
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call)
        pipe.execute()
        histogram.add(time.perf_counter() - now, depth)  # every call waited for the batch
        done += depth
    elapsed = time.perf_counter() - start
    client.close()
    return Measured(done, done, elapsed, histogram)


def produce_round_trips(
    url: str,
    keys: Keys,
    topic: str,
    partitions: int,
    value_size: int,
    seconds: float,
    rate: float | None = None,
) -> Measured:
    """EVALSHA produce one at a time: the raw round trip; with ``rate``, one call every
    1/rate s (sleeping in between, as the paced adapter row does)."""
    client = _client(url)
    calls = _produce_calls(keys, topic, partitions, b"v" * value_size, 256)
    histogram = Histogram()
    done = 0
    start = time.perf_counter()
    end = start + seconds
    due = start
    while (now := time.perf_counter()) < end:
        if rate:
            due += 1 / rate
            if due > now:
                time.sleep(due - now)
            now = time.perf_counter()
        client.execute_command(*calls[done % len(calls)])
        histogram.add(time.perf_counter() - now)
        done += 1
    elapsed = time.perf_counter() - start
    client.close()
    return Measured(done, done, elapsed, histogram)


def xrange_pages(
    url: str, keys: Keys, topic: str, pages: list[tuple[int, int]], seconds: float, depth: int
) -> Measured:
    """XRANGE ... COUNT 1000 from the same page starts the adapter's CONSUME rows use,
    ``depth`` pages per pipeline round trip; records/s counts entries returned."""
    client = redis.Redis.from_url(url)
    histogram = Histogram()
    operations = records = 0
    position = 0
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        pipe = client.pipeline(transaction=False)
        for i in range(depth):
            partition, offset = pages[(position + i) % len(pages)]
            log = keys.partition(topic, partition).log
            pipe.xrange(log, codec.entry_id(offset, codec.DEFAULT_SEQUENCE_BITS), "+", count=1000)
        position += depth
        replies = pipe.execute()
        histogram.add(time.perf_counter() - now, depth)
        operations += depth
        records += sum(len(reply) for reply in replies)
    elapsed = time.perf_counter() - start
    client.close()
    return Measured(operations, records, elapsed, histogram)
