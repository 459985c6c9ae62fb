"""The replication scripts against a real Redis: copying, ISR, high watermark, notifications."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis

from mapping.connection import scripts
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.partition.partition_scripts import (
    LATEST_OFFSET,
    PartitionHead,
    partition_consume_call,
    partition_produce_call,
    partition_replica_fetch_call,
    partition_set_role_call,
    partition_status_call,
    produced_offsets,
)
from tests.support.waiting import wait_until

BITS = codec.DEFAULT_SEQUENCE_BITS


class Partition:
    """One partition driven through the scripts with EVAL (as a pod would by EVALSHA)."""

    def __init__(self, client: redis.Redis, rf: int = 3, lag_ms: int = 10_000) -> None:
        self.client = client
        self.rf = rf
        self.lag_ms = lag_ms
        self.keys = Keys(f"test-{uuid.uuid4().hex[:8]}").partition("t", 0)

    def head(self) -> PartitionHead:
        return PartitionHead(self.keys, BITS, self.rf, self.lag_ms)

    def run(self, command: tuple) -> Any:
        return self.client.execute_command(*scripts.as_eval(command))

    def produce(self, *values: str) -> list[int]:
        flat = [part for v in values for part in ("k", v)]
        return produced_offsets(self.run(partition_produce_call(self.head(), flat)))

    def fetch(self, replica: int, offset: int, max_copy: int = 1000) -> dict:
        acked, hw, isr, log_end, complete = self.run(
            partition_replica_fetch_call(self.head(), replica, offset, max_copy)
        )
        isr_list = [int(r) for r in isr.split()]
        return {
            "acked": acked,
            "hw": hw,
            "isr": isr_list,
            "log_end": log_end,
            "complete": bool(complete),
            "under_replicated": len(isr_list) < self.rf,
        }

    def status(self) -> dict:
        hw, _isr_size, next_change, _log_end, isr, _role, *_ = self.run(
            partition_status_call(self.head())
        )
        return {"hw": hw, "isr": [int(r) for r in isr.split()], "next_change": next_change}

    def consume(self, start: int = 0) -> list[int]:
        reply = self.run(
            partition_consume_call(self.head(), codec.entry_id(start, BITS), 1000, 0, False)
        )
        return [codec.offset_of(entry_id, BITS) for entry_id, _ in reply[2:]]

    def state(self, field: str) -> str | None:
        value = self.client.hget(self.keys.state, field)
        return value.decode() if value is not None else None


@pytest.fixture
def part(redis_client: redis.Redis) -> Partition:
    return Partition(redis_client)


def test_fetch_copies_entries_and_hw_is_min_over_isr(part: Partition) -> None:
    offsets = part.produce("a", "b", "c")
    assert part.consume() == []  # both followers are in the ISR and have nothing yet
    r1 = part.fetch(1, offsets[1])
    assert r1["acked"] == offsets[1] and r1["hw"] == -1 and r1["isr"] == [0, 1, 2]
    r2 = part.fetch(2, offsets[2])
    assert r2["hw"] == offsets[1]  # min(leader end, r1 = offsets[1], r2 = offsets[2])
    assert not r2["under_replicated"]
    assert part.consume() == offsets[:2]
    r1 = part.fetch(1, offsets[2])
    assert r1["hw"] == offsets[2]
    assert part.consume() == offsets
    # The replica streams are copies of the leader log, ids and fields alike.
    log = part.client.xrange(part.keys.log)
    assert part.client.xrange(part.keys.replica(1)) == log
    assert part.client.xrange(part.keys.replica(2)) == log


def test_offset_past_log_end_is_clamped(part: Partition) -> None:
    offsets = part.produce("a")
    result = part.fetch(1, offsets[0] + 10_000_000)
    assert result["acked"] == offsets[0]
    assert part.state("replica.1.acked_offset") == str(offsets[0])
    result = part.fetch(2, LATEST_OFFSET)
    assert result["hw"] == offsets[0]


def test_isr_shrinks_after_lag_and_expands_on_catch_up(redis_client: redis.Redis) -> None:
    part = Partition(redis_client, lag_ms=200)
    offsets = part.produce("a", "b")
    part.fetch(1, offsets[1])
    status = part.status()
    assert status["isr"] == [0, 1, 2] and status["hw"] == -1
    assert 0 < status["next_change"] <= 201  # replica 2 is due to leave the ISR then
    status = wait_until(lambda: (now := part.status())["isr"] == [0, 1] and now, timeout=5)
    assert status["hw"] == offsets[1]
    assert status["next_change"] == -1
    behind = part.fetch(2, offsets[0])  # acked, but not caught up: stays out
    assert behind["isr"] == [0, 1] and behind["under_replicated"]
    caught_up = part.fetch(2, offsets[1])
    assert caught_up["isr"] == [0, 1, 2] and not caught_up["under_replicated"]
    assert caught_up["hw"] == offsets[1]


def test_hw_never_moves_back_when_a_lagging_follower_rejoins(redis_client: redis.Redis) -> None:
    part = Partition(redis_client, lag_ms=100)
    offsets = part.produce("a")
    part.fetch(1, offsets[0])
    wait_until(lambda: part.status()["isr"] == [0, 1], timeout=5)  # replica 2 dropped out
    assert part.status()["hw"] == offsets[0]
    more = part.produce("b")
    assert part.status()["hw"] == offsets[0]  # replica 1 is in ISR, lagging within the limit
    # Replica 2 reports less than hw: it is not caught up so it does not rejoin, hw stays.
    result = part.fetch(2, -1)
    assert result["hw"] == offsets[0] and result["isr"] == [0, 1]
    part.fetch(1, more[0])
    assert part.status()["hw"] == more[0]


def test_copy_is_bounded_per_call(part: Partition) -> None:
    offsets = part.produce(*(f"v{i}" for i in range(25)))
    first = part.fetch(1, LATEST_OFFSET, max_copy=10)
    assert not first["complete"] and first["acked"] == offsets[9]
    second = part.fetch(1, LATEST_OFFSET, max_copy=10)
    assert not second["complete"] and second["acked"] == offsets[19]
    third = part.fetch(1, LATEST_OFFSET, max_copy=10)
    assert third["complete"] and third["acked"] == offsets[24]
    assert part.client.xlen(part.keys.replica(1)) == 25


def test_fetch_on_a_follower_partition_is_refused(part: Partition) -> None:
    part.produce("a")
    part.run(partition_set_role_call(part.head(), "follower"))
    with pytest.raises(redis.ResponseError, match="BAD_REQUEST partition is not leader"):
        part.fetch(1, 0)
    with pytest.raises(redis.ResponseError, match="NOT_LEADER"):
        part.produce("b")


def test_notifications(part: Partition) -> None:
    pubsub = part.client.pubsub()
    appended = part.keys.appended_channel
    pubsub.subscribe(part.keys.hw_channel, appended)
    for _ in range(2):
        assert pubsub.get_message(timeout=1)["type"] == "subscribe"

    def messages() -> list[tuple[str, str]]:
        out = []
        while (m := pubsub.get_message(timeout=0.1)) is not None:
            out.append((m["channel"].decode(), m["data"].decode()))
        return out

    offsets = part.produce("a")
    assert messages() == [(appended, str(offsets[0]))]  # idle followers: wake the replicator
    more = part.produce("b")
    assert messages() == []  # followers already behind: their replicator is busy, no wake-up
    part.fetch(1, more[0])
    part.fetch(2, offsets[0])
    got = messages()
    assert len(got) == 1 and got[0][0] == part.keys.hw_channel
    hw, isr_size, next_change = got[0][1].split()
    assert (int(hw), int(isr_size)) == (offsets[0], 3) and int(next_change) > 0
    part.fetch(2, more[0])
    hw, isr_size, next_change = messages()[0][1].split()
    assert (int(hw), int(isr_size), int(next_change)) == (more[0], 3, -1)
    pubsub.close()


def test_rf1_hw_follows_the_log(redis_client: redis.Redis) -> None:
    part = Partition(redis_client, rf=1)
    offsets = part.produce("a", "b")
    assert part.consume() == offsets
    assert part.status()["isr"] == [0]
