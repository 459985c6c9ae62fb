"""Retention: trims by time and size what it should and nothing else: never a record above
the high watermark, never one a group has not committed (unless the topic says so), and a
replica stream keeps its last entry. State is written in the documented layout (a topic
hash, a log stream with fields key/value/ts, a state hash with log_end/hw, group offsets).
Retention by time deletes whole closed segments (docs/compaction.md, "Segments"): most
topics here roll a segment per record (``segment.ms`` 1, records 2 ms apart), so it trims
record by record; the last tests have segments of many records."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from mapping.core import codec
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.waiting import wait_until

BITS = codec.DEFAULT_SEQUENCE_BITS
KAFKA_SEGMENT_MS = "segment.ms=604800000"  # Kafka's default, a week


class Deployment(CliTarget):
    def create(self, topic: str, *options: str, replication_factor: int = 1) -> None:
        self.cli("topic", "create", topic, "--partitions", "1", "--replication-factor",
                 str(replication_factor), "--min-insync-replicas", "1",
                 "--config", "segment.ms=1", *options)  # fmt: skip

    def write(self, topic: str, stamps: list[int], hw_index: int = -1) -> list[int]:
        """Records at the given milliseconds (one per stamp); hw at ``stamps[hw_index]``."""
        pk = self.keys.partition(topic, 0)
        offsets = []
        for i, ms in enumerate(stamps):
            seq = sum(1 for s in stamps[:i] if s == ms)
            self.client.xadd(pk.log, {"key": "k", "value": f"v{i}", "ts": ms}, id=f"{ms}-{seq}")
            offsets.append(codec.encode(ms, seq, BITS))
        self.client.hset(pk.state, mapping={"log_end": offsets[-1], "hw": offsets[hw_index]})
        return offsets

    def offsets(self, topic: str, stream: str | None = None) -> list[int]:
        key = stream or self.keys.partition(topic, 0).log
        return [codec.offset_of(i, BITS) for i, _ in self.client.xrange(key)]

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return seconds * 1000 + micros // 1000


@pytest.fixture
def deployment(redis_url: str) -> Iterator[Deployment]:
    client = redis.Redis.from_url(redis_url)
    keys = Keys(f"ret{uuid.uuid4().hex[:8]}")
    client.hset(keys.meta, "sequence_bits", BITS)
    yield Deployment(redis_url, keys, client)
    client.close()


def _old_and_new(d: Deployment) -> tuple[list[int], list[int]]:
    now = d.now_ms()
    old = [now - 600_000 + 2 * i for i in range(5)]  # ten minutes ago
    new = [now - 20 + 2 * i for i in range(5)]  # just now
    return old, new


def test_time_retention_trims_only_old_records(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic, "--retention-ms", "300000")
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new)
    out = d.cli("topic", "trim", topic)
    assert out == f"topic={topic} partition=0 trimmed=5 first_offset={offsets[5]}\n"
    assert d.offsets(topic) == offsets[5:]
    # Nothing more to do: a second run trims nothing.
    assert "trimmed=0" in d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[5:]


def test_never_above_the_high_watermark(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic, "--retention-ms", "0")
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new, hw_index=2)  # records 3.. are not committed yet
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[3:]


def test_never_above_the_slowest_group(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic, "--retention-ms", "0")
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new)
    # Two groups: "fast" read everything, "slow" has read up to (not including) record 3.
    d.client.sadd(d.keys.groups, f"fast {topic}", f"slow {topic}", f"other {topic}x")
    d.client.hset(d.keys.group("fast", topic).offsets, "0", offsets[-1] + 1)
    d.client.hset(d.keys.group("slow", topic).offsets, "0", offsets[3])
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[3:]
    # The slow group moves on: the next run trims up to it.
    d.client.hset(d.keys.group("slow", topic).offsets, "0", offsets[7])
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[7:]


def test_a_group_holds_only_partitions_it_committed(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic, "--retention-ms", "0")
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new)
    # "new-group" joined but never committed: it holds nothing (as in Kafka, a consumer
    # starting there may find the oldest records gone); "slow" holds from its commit.
    d.client.sadd(d.keys.groups, f"new-group {topic}", f"slow {topic}")
    d.client.hset(d.keys.group("new-group", topic).members, "c1", d.now_ms())
    d.client.hset(d.keys.group("slow", topic).offsets, "0", offsets[3])
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[3:]
    # Unless the topic is configured to trim regardless of groups.
    out = d.cli("topic", "alter", topic, "--retention-ignore-groups")
    assert out == (
        f"altered topic={topic} retention_ms=0 retention_bytes=-1 retention_ignore_groups=true\n"
    )
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == []


def test_size_retention_keeps_the_newest(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic)
    now = d.now_ms()
    pk = d.keys.partition(topic, 0)
    offsets = []
    for i in range(400):
        d.client.xadd(pk.log, {"key": "k", "value": "x" * 200, "ts": now}, id=f"{now}-{i}")
        offsets.append(codec.encode(now, i, BITS))
    d.client.hset(pk.state, mapping={"log_end": offsets[-1], "hw": offsets[-1]})
    used = d.client.memory_usage(pk.log)
    d.cli("topic", "alter", topic, "--retention-bytes", str(used // 2))
    d.cli("topic", "trim", topic)
    kept = d.offsets(topic)
    assert 0 < len(kept) < 400
    assert kept == offsets[-len(kept) :]  # the newest records, in order
    assert d.client.memory_usage(pk.log) <= used  # smaller than before


def test_replica_streams_are_trimmed_but_keep_their_last_entry(
    deployment: Deployment, topic: str
) -> None:
    d = deployment
    d.create(topic, "--retention-ms", "0", replication_factor=2)
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new, hw_index=4)
    replica = d.keys.partition(topic, 0).replica(1)
    for ms, offset in zip(old, offsets[:3], strict=False):  # the follower copied 3 records
        d.client.xadd(replica, {"key": "k", "value": "v", "ts": ms}, id=codec.entry_id(offset))
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[5:]
    assert d.offsets(topic, replica) == offsets[2:3]


def test_topics_without_retention_are_untouched(deployment: Deployment, topic: str) -> None:
    d = deployment
    d.create(topic)
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new)
    assert d.cli("topic", "trim", topic) == ""
    assert d.offsets(topic) == offsets


def test_pods_enforce_retention_periodically(deployment: Deployment, topic: str, start_pod):
    d = deployment
    d.create(topic, "--retention-ms", "300000")
    old, new = _old_and_new(d)
    offsets = d.write(topic, old + new)
    args = ("--key-prefix", d.keys.prefix, "--retention-interval-ms", "200", "--no-replicator")
    start_pod(d.url, *args)
    start_pod(d.url, *args)
    wait_until(lambda: d.offsets(topic) == offsets[5:], timeout=30)
    # One pod holds the retention lease.
    owner = d.client.get(d.keys.retention_lease[1])
    assert owner is not None


def test_time_retention_deletes_whole_closed_segments(deployment: Deployment, topic: str) -> None:
    """A segment goes only when its newest record is older than retention.ms (Kafka's
    deleteRetentionMsBreachedSegments): an old record in a segment with a newer one stays."""
    d = deployment
    # a jitter of up to 15 s: each segment rolls 45 to 60 s after its first record
    d.create(topic, "--retention-ms", "300000", "--config", "segment.ms=60000",
             "--config", "segment.jitter.ms=15000")  # fmt: skip
    now = d.now_ms()
    # segments: [10 min ago, +1 s], [330 s ago, 290 s ago], [10 s ago] (the active one)
    stamps = [now - 600_000, now - 599_000, now - 330_000, now - 290_000, now - 10_000]
    offsets = d.write(topic, stamps)
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets[2:]  # the 330 s old record stays with its segment


def test_one_segment_goes_only_when_all_of_it_expired(deployment: Deployment, topic: str) -> None:
    """With Kafka's segment.ms (a week) the log is one segment: nothing goes while its newest
    record is younger than retention.ms; once it is older, Kafka rolls the active segment
    and deletes it, so everything goes."""
    d = deployment
    d.create(topic, "--retention-ms", "300000", "--config", KAFKA_SEGMENT_MS)
    now = d.now_ms()
    offsets = d.write(topic, [now - 600_000, now - 500_000, now - 1_000])
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == offsets
    d.cli("topic", "alter", topic, "--retention-ms", "500")
    d.cli("topic", "trim", topic)
    assert d.offsets(topic) == []


def test_segments_roll_by_segment_bytes(deployment: Deployment, topic: str) -> None:
    """segment.bytes rolls a segment before a record would take it past the limit (a
    record's bytes: its entry's field names and values)."""
    d = deployment
    d.create(topic, "--retention-ms", "300000", "--config", KAFKA_SEGMENT_MS)
    now = d.now_ms()
    value = "x" * 100
    stamps = [now - 600_000 + 2 * i for i in range(5)] + [now - 1000]
    # every entry has the same size: key k, a 100-byte value, a 13-digit ts
    record_bytes = len("key") + 1 + len("value") + len(value) + len("ts") + len(str(now))
    d.cli("topic", "alter", topic, "--config", f"segment.bytes={2 * record_bytes + 10}")
    pk = d.keys.partition(topic, 0)
    offsets = []
    for ms in stamps:
        d.client.xadd(pk.log, {"key": "k", "value": value, "ts": ms}, id=f"{ms}-0")
        offsets.append(codec.encode(ms, 0, BITS))
    d.client.hset(pk.state, mapping={"log_end": offsets[-1], "hw": offsets[-1]})
    d.cli("topic", "trim", topic)
    # segments of two records: [0, 1], [2, 3], [4, 5]; the last holds a young record
    assert d.offsets(topic) == offsets[4:]


@pytest.mark.parametrize("segment_bytes", [1024**3, 10**8])
def test_time_rolls_read_no_record(deployment: Deployment, topic: str, segment_bytes: int) -> None:
    """With Kafka's segment.bytes a log rolls by time alone and segment_roll.lua reads one
    entry per roll point, never each record (reading them all would cost Redis about twice
    the XADDs); a topic that lowered segment.bytes reads each record once. Both find the same
    time roll points."""
    from mapping.connection import scripts
    from mapping.partition.partition_scripts import PartitionHead
    from mapping.partition.segments import partition_segment_roll_call
    from mapping.topic.topic_rules import Segments

    d = deployment
    d.create(topic)
    now = d.now_ms()
    # 50 records 1 s apart, then 50 more 1 ms apart: segments of 10 s roll every 10 records
    stamps = [now - 200_000 + 1000 * i for i in range(50)] + [now - 1000 + i for i in range(50)]
    offsets = d.write(topic, stamps)
    head = PartitionHead(d.keys.partition(topic, 0), BITS, 1, 0)
    segments = Segments(segment_ms=10_000, segment_bytes=segment_bytes, roll_ms=10_000)
    reply = scripts.call_sync(d.client, partition_segment_roll_call(head, segments, True))
    first_offset, read, done = (int(part) for part in reply)
    assert (read, done) == (0 if segment_bytes == 1024**3 else 100, 1)
    roll_points = [int(p) for p in d.client.zrange(d.keys.partition(topic, 0).segments, 0, -1)]
    # the first record 10 s (plus 1 ms) after each segment's first: records 11, 22, 33, 44,
    # then the first of the young ones
    assert roll_points == [offsets[i] for i in (11, 22, 33, 44, 50)]
    assert first_offset == offsets[50]
