"""A compacted topic through V1: PRODUCE with an empty key (V1's "no key") is refused with
BAD_REQUEST and the connection goes on; after compaction CONSUME from 0 returns exactly the
latest record of every key (a tombstone as an empty value), and CONSUME from a removed
offset starts at the next record kept; what only the active segment supersedes stays."""

from __future__ import annotations

import uuid

import pytest
import redis

from adapter.client import Client, RequestFailed
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.compaction import compact_now, compacted_topic, kafka_keeps, roll_segment
from tests.support.pods import Pod


def test_consume_reads_what_compaction_keeps(pod: Pod, redis_url: str) -> None:
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    target = CliTarget(redis_url, Keys(), client)
    try:
        compacted_topic(client, target.keys, topic, min_cleanable_dirty_ratio="0.1")
        records = [(f"k{i % 5}".encode(), f"v{i}".encode()) for i in range(40)]
        with Client("127.0.0.1", pod.port, timeout=10) as v1:
            with pytest.raises(RequestFailed) as refused:
                v1.produce(topic, "", "no key")
            assert refused.value.response.code == "BAD_REQUEST"
            assert refused.value.response.message == "compacted topic requires a non-empty key"
            offsets = [r.offset for r in v1.produce_many(topic, records)]
            written = list(zip(offsets, records, strict=True))
            written += roll_segment(
                lambda rolled: [r.offset for r in v1.produce_many(topic, rolled)]
            )
            compact_now(target, topic)  # (or the pod's retention task did it already)
            assert "dirty=0 compacted=35" in target.cli("inspect", "topic", topic)
            kept = [(o, v) for o, (_, v) in kafka_keeps(written)]
            assert v1.consume(topic, 0, 0).records == kept
            # from an offset compaction removed: the next record kept
            assert v1.consume(topic, 0, offsets[3]).records == kept
            assert v1.consume(topic, 0, offsets[36]).records == kept[1:]
    finally:
        client.close()


def test_consume_reads_the_active_segment_untouched(pod: Pod, redis_url: str) -> None:
    """Every key's second version is in the active segment: compaction removes nothing."""
    topic = f"compact-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    target = CliTarget(redis_url, Keys(), client)
    try:
        compacted_topic(client, target.keys, topic, min_cleanable_dirty_ratio="0.01")
        with Client("127.0.0.1", pod.port, timeout=10) as v1:

            def produce(records: list[tuple[bytes, bytes | None]]) -> list[int]:
                return [r.offset for r in v1.produce_many(topic, records)]  # type: ignore[arg-type]

            first = [(f"k{k}".encode(), b"first") for k in range(5)]
            written = list(zip(produce(first), first, strict=True))
            written += roll_segment(produce)
            second = [(k, b"second") for k, _ in first]
            written += list(zip(produce(second), second, strict=True))
            assert " removed=0 " in compact_now(target, topic)
            assert v1.consume(topic, 0, 0).records == [(o, v) for o, (_, v) in written]
    finally:
        client.close()
