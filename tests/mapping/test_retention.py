"""Retention: trims by time and size what it should and nothing else: never a record above
the high watermark, never one a group has not committed (unless the topic says so), and a
replica stream keeps its last entry. State is written in the documented layout (a topic
hash, a log stream with fields key/value/ts, a state hash with log_end/hw, group offsets)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from mapping import codec
from mapping.keys import Keys
from tests.support.cli import CliTarget
from tests.support.waiting import wait_until

BITS = codec.DEFAULT_SEQUENCE_BITS


class Deployment(CliTarget):
    def create(self, topic: str, *options: str, replication_factor: int = 1) -> None:
        self.cli("topic", "create", topic, "--partitions", "1", "--replication-factor",
                 str(replication_factor), "--min-insync-replicas", "1", *options)  # fmt: skip

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
    old = [now - 600_000 + i for i in range(5)]  # ten minutes ago
    new = [now + i for i in range(5)]
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
