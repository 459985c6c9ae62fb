"""The baseline: one Python process talking straight to Redis with redis-py + hiredis.

It runs the adapter's own scripts (produce: one record per EVALSHA, as a naive client would;
the group scripts of the groups mix) and pages the log streams with XRANGE, so the ratios
show what the adapter adds on top of the cheapest way a Python program can do the same work.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis

from adapter.settings import Settings
from bench.stats import Histogram
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.group import groups
from mapping.group.groups import GroupHead, group_commit_call, group_heartbeat_call, group_join_call
from mapping.partition.partition_scripts import (
    PARTITION_PRODUCE,
    PartitionHead,
    partition_produce_call,
)
from mapping.topic.partitioner import partition_for

CALLS = 1024  # distinct commands, sent round and round
SCRIPTS = (PARTITION_PRODUCE, groups.GROUP_JOIN, groups.GROUP_HEARTBEAT, groups.GROUP_COMMIT)


@dataclass
class Measured:
    operations: int
    records: int
    seconds: float
    histogram: Histogram


def produce_calls(keys: Keys, topic: str, partitions: int, value_size: int) -> list[tuple]:
    """The adapter's produce script, one record per EVALSHA, keys spread as the load does."""
    value = b"v" * value_size
    calls = []
    for i in range(CALLS):
        key = f"k{i % 256}".encode()
        pk = keys.partition(topic, partition_for(key, partitions))
        head = PartitionHead(pk, codec.DEFAULT_SEQUENCE_BITS, 1, 10_000)
        calls.append(partition_produce_call(head, [key, value]))
    return calls


def groups_calls(url: str, keys: Keys, topic: str, partitions: int, group: str) -> list[tuple]:
    """The group scripts the adapter runs for the load's JOIN 1 : HEARTBEAT 4 : COMMIT 5 mix
    of one member (JOIN also lists the group, as the adapter does), after a first JOIN."""
    # the session timeout of a pod's default
    head = GroupHead(keys.group(group, topic), Settings.session_timeout_ms, partitions)
    member = "raw-c0"
    client = _client(url)
    reply = client.execute_command(*group_join_call(head, member, ""))
    client.close()
    generation, owned = int(reply[0]), [int(p) for p in reply[1].split()] or [0]
    calls: list[tuple] = []
    for i in range(CALLS):
        step = i % 10
        if step == 0:
            calls.append(group_join_call(head, member, ""))
            calls.append(("SADD", keys.groups, f"{group} {topic}"))
        elif step < 5:
            calls.append(group_heartbeat_call(head, member, generation))
        else:
            calls.append(group_commit_call(head, member, generation, owned[i % len(owned)], i))
    return calls


def _client(url: str) -> redis.Redis:
    client = redis.Redis.from_url(url)
    for script in SCRIPTS:
        client.script_load(script.source)
    return client


def pipelined(url: str, calls: list[tuple], seconds: float, depth: int) -> Measured:
    """``calls`` round and round, ``depth`` per pipeline round trip."""
    client = _client(url)
    histogram = Histogram()
    done = 0
    start = time.perf_counter()
    end = start + seconds
    while (now := time.perf_counter()) < end:
        pipe = client.pipeline(transaction=False)
        for i in range(done, done + depth):
            pipe.execute_command(*calls[i % len(calls)])
        pipe.execute()
        histogram.add(time.perf_counter() - now, depth)  # every call waited for the batch
        done += depth
    elapsed = time.perf_counter() - start
    client.close()
    return Measured(done, done, elapsed, histogram)


def round_trips(
    url: str, calls: list[tuple], seconds: float, rate: float | None = None
) -> Measured:
    """``calls`` one at a time: the raw round trip; with ``rate``, one call every 1/rate s
    (sleeping in between, as the paced adapter row does)."""
    client = _client(url)
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
