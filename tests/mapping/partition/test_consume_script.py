"""partition/consume.lua and the size marks partition/produce.lua keeps, against a real Redis;
and how a pod sizes a native XRANGE from the marks."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from mapping.connection import scripts
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.size_marks import SIZE_MAX_BITS, SIZE_MIN_BITS, SizeMarks
from mapping.partition.partition_scripts import (
    PartitionHead,
    partition_consume_call,
    partition_produce_call,
    partition_replica_fetch_call,
    partition_status_call,
    produced_offsets,
)

BITS = codec.DEFAULT_SEQUENCE_BITS
MARKS = SIZE_MAX_BITS - SIZE_MIN_BITS + 1


class Log:
    """One single-replica partition driven through partition/produce.lua and
    partition/consume.lua."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.keys = Keys(f"test-{uuid.uuid4().hex[:8]}").partition("t", 0)
        self.head = PartitionHead(self.keys, BITS, 1, 10_000)

    def run(self, command: tuple) -> list:
        return self.client.execute_command(*scripts.as_eval(command))

    def produce(self, *values: bytes) -> list[int]:
        items = [p for v in values for p in (b"k", v)]
        return produced_offsets(self.run(partition_produce_call(self.head, items)))

    def consume(self, start: int, max_records: int, max_bytes: int) -> tuple[list, list[bytes]]:
        """(hw and marks, values read)."""
        start_id = codec.entry_id(start, BITS)
        reply = self.run(partition_consume_call(self.head, start_id, max_records, max_bytes, False))
        return reply[:2], [dict(zip(f[::2], f[1::2], strict=True))[b"value"] for _, f in reply[2:]]


@pytest.fixture
def log(redis_client: redis.Redis) -> Log:
    return Log(redis_client)


def test_reading_stops_at_the_byte_limit(log: Log) -> None:
    values = [b"a" * 100, b"b" * 3000, b"c" * 100, b"d" * 5000]
    log.produce(*values)
    assert log.consume(0, 1000, 3100)[1] == values[:2]  # 3100 bytes exactly fit
    assert log.consume(0, 1000, 3099)[1] == values[:1]
    assert log.consume(0, 1000, 0)[1] == values  # no limit
    assert log.consume(0, 3, 1 << 20)[1] == values[:3]  # the record limit


def test_the_first_record_comes_however_large(log: Log) -> None:
    offsets = log.produce(b"x" * 10_000, b"y")
    assert log.consume(0, 1000, 10)[1] == [b"x" * 10_000]
    assert log.consume(offsets[1], 1000, 10)[1] == [b"y"]


def test_many_small_values_over_growing_pages(log: Log) -> None:
    values = [f"v{i}".encode() for i in range(700)]
    offsets = log.produce(*values)
    header, read = log.consume(offsets[1], 500, 1 << 20)
    assert read == values[1:501]
    assert header[0] == offsets[-1]  # hw: one replica
    # Pages are sized from the values already read: 30 bytes hold seven of four bytes.
    assert log.consume(offsets[100], 1000, 30)[1] == values[100:107]


def test_hw_and_marks_only(log: Log) -> None:
    assert log.consume(0, 1000, 1 << 20) == ([-1, [-1, -1, *[-1] * MARKS]], [])  # empty log
    first = log.produce(b"s" * 100, b"m" * 3000)
    second = log.produce(b"s" * 200, b"s" * 256)
    (hw, marks), read = log.consume(0, 0, 1 << 20)
    assert read == [] and hw == second[-1]
    log_end, marked_from, *over = marks
    assert (log_end, marked_from) == (second[-1], 0)  # a new log is marked from its start
    # 3000 bytes are over 2^11; 200 and 256 over 2^7 (the append's last offset); 256 is
    # not over 2^8.
    expected = {7: second[-1], 8: first[-1], 9: first[-1], 10: first[-1], 11: first[-1]}
    assert over == [expected.get(bits, -1) for bits in range(SIZE_MIN_BITS, SIZE_MAX_BITS + 1)]


def test_a_log_written_before_marks_is_marked_from_the_next_append(log: Log) -> None:
    log.client.xadd(log.keys.log, {"key": "k", "value": "old" * 10_000}, id="1-0")
    log.client.hset(log.keys.state, "log_end", codec.encode(1, 0, BITS))
    offsets = log.produce(b"new")
    log_end, marked_from, *_ = log.consume(0, 0, 1 << 20)[0][1]
    assert marked_from == offsets[0] and log_end == offsets[0]


def _marks(log_end: int, **over: int) -> SizeMarks:
    """Marks of a log marked from 0; ``over`` maps "b<k>" to the last offset > 2**k bytes."""
    marks = tuple(over.get(f"b{k}", -1) for k in range(SIZE_MIN_BITS, SIZE_MAX_BITS + 1))
    return SizeMarks(log_end, 0, marks)


def test_native_count_from_the_marks() -> None:
    small = _marks(5000)  # every value at most 128 bytes
    assert small.native_count(0, 1000, 1 << 20) == 1000
    assert small.native_count(0, 1000, 1280) == 10
    assert small.native_count(0, 1000, 10) == 1  # the first record always comes
    mixed = _marks(5000, b7=4000, b8=4000, b9=4000, b10=3000)
    assert mixed.native_count(4001, 1000, 1 << 20) == 1000  # past every large value
    assert mixed.native_count(3500, 5000, 1 << 20) == 1 << 10  # values of at most 1 KiB
    assert mixed.native_count(100, 5000, 1 << 20) == 1 << 9  # one of more than 1 KiB
    huge = _marks(5000, **{f"b{k}": 4000 for k in range(SIZE_MIN_BITS, SIZE_MAX_BITS + 1)})
    assert huge.native_count(0, 1000, 1 << 20) == 1  # any size: only one
    assert small.native_count(5001, 1000, 1 << 20) == 0  # past what the marks knew
    assert SizeMarks(5000, 3000, small.last_over).native_count(10, 1000, 1 << 20) == 0
    assert SizeMarks(-1, -1, small.last_over).native_count(0, 1000, 1 << 20) == 0


def test_few_large_values_are_read_natively_only_when_alike() -> None:
    # Values over 256 KiB (at most 512 KiB) from offset 100 on: two fit in 1 MiB.
    large = _marks(5000, **{f"b{k}": 4000 for k in range(SIZE_MIN_BITS, 18 + 1)})
    assert large.native_count(100, 1000, 1 << 20) == 2
    # Nothing read yet, or small values last time: partition/consume.lua reads exactly.
    assert large.native_read(100, 1000, 1 << 20) == 0
    assert SizeMarks(5000, 0, large.last_over, 100).native_read(100, 1000, 1 << 20) == 0
    # The last read returned a few values of 300 KiB: alike, a native read of two.
    assert SizeMarks(5000, 0, large.last_over, 300 << 10).native_read(100, 1000, 1 << 20) == 2
    # Many records fit: always native.
    assert _marks(5000).native_read(0, 1000, 1 << 20) == 1000
    assert _marks(5000).native_read(6000, 1000, 1 << 20) == 0  # not covered


def test_the_hw_readers_get_is_a_position_they_reach(redis_client: redis.Redis) -> None:
    """A follower acked an offset between two records (REPLICA_FETCH takes any offset): V1's
    hw there, Kafka's high watermark hw + 1 would lie past where a reader of every record
    up to it stands (its last record + 1), so its end would never come; readers get the
    last record at or below it instead (partition/status.lua, partition/consume.lua)."""
    keys = Keys(f"test-{uuid.uuid4().hex[:8]}").partition("t", 0)
    head = PartitionHead(keys, BITS, 2, 10_000)  # one follower, in sync for 10 s

    def run(command: tuple) -> list:
        return redis_client.execute_command(*scripts.as_eval(command))

    first, second = produced_offsets(run(partition_produce_call(head, [b"k", b"a", b"k", b"b"])))
    run(partition_replica_fetch_call(head, 1, first, 100))
    assert run(partition_status_call(head))[0] == first
    time.sleep(0.002)  # (c in a later millisecond: a gap of offsets between b and c)
    (third,) = produced_offsets(run(partition_produce_call(head, [b"k", b"c"])))
    gap = third - 1  # past b: the follower has a and b, not c
    assert gap > second
    run(partition_replica_fetch_call(head, 1, gap, 100))
    assert int(run(partition_status_call(head))[0]) == second
    reply = run(partition_consume_call(head, codec.entry_id(0, BITS), 10, 0, False))
    assert int(reply[0]) == second and len(reply[2:]) == 2
