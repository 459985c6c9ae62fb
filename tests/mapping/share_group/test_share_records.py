"""Records in flight beyond the first slice, on a real redis-server: RENEW (the lock starts
again, the delivery count stays), an expired lock is no longer the member's, a departed
member's records released at once to another member, read_committed (open transactions
wait, aborted records are archived), member epoch fencing and the members a heartbeat
reports gone; and the pure checks of acknowledgement batches."""

from __future__ import annotations

import json
import time
import uuid

import redis

from mapping.connection import scripts
from mapping.core.codec import entry_offset
from mapping.core.keys import Keys
from mapping.partition.kafka import kafka_produce_call
from mapping.partition.partition_scripts import PartitionHead
from mapping.partition.partition_txns import txn_add_call, txn_marker_call
from mapping.share_group.share_groups import (
    ACCEPT,
    FENCED_MEMBER,
    HEARTBEAT_OK,
    REJECT,
    RELEASE,
    RENEW,
    UNKNOWN_MEMBER,
    AckBatch,
    ShareSettings,
    departed_members,
    invalid_acknowledgements,
    share_group_acknowledge_call,
    share_group_acquire_call,
    share_group_heartbeat_call,
    share_group_release_call,
)

BITS = 10
KEYS = Keys(f"sr-{uuid.uuid4().hex[:8]}")
GROUP = "g"
LOCK_MS = 400


def _head(topic: str) -> PartitionHead:
    return PartitionHead(KEYS.partition(topic, 0), BITS, 1, 10_000)


def _log(client: redis.Redis, topic: str, values: list[bytes]) -> None:
    records = [(None, v, 1, []) for v in values]
    scripts.call_sync(client, kafka_produce_call(_head(topic), records))


def _transaction(client: redis.Redis, topic: str, producer_id: int, values: list[bytes]) -> None:
    """``values`` appended in an open transaction of ``producer_id`` (epoch 0)."""
    head = _head(topic)
    scripts.call_sync(client, txn_add_call(head, producer_id, 0))
    records = [(None, v, 1, []) for v in values]
    call = kafka_produce_call(
        head, records, producer_id=producer_id, producer_epoch=0, base_sequence=0,
        transactional=True,
    )  # fmt: skip
    scripts.call_sync(client, call)


def _end(client: redis.Redis, topic: str, producer_id: int, commit: bool) -> None:
    scripts.call_sync(client, txn_marker_call(_head(topic), producer_id, 0, commit))


def _settings(read_committed: bool = False) -> ShareSettings:
    return ShareSettings(LOCK_MS, 5, True, 45_000, 5000, read_committed)


def _acquire(
    client: redis.Redis, topic: str, member: str, read_committed: bool = False
) -> list[tuple[bytes, int]]:
    """(value, delivery count) of what ``member`` acquires, in offset order."""
    reply = scripts.call_sync(
        client,
        share_group_acquire_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group(GROUP),
            member_id=member, settings=_settings(read_committed), max_records=100,
            sequence_bits=BITS,
        ),
    )  # fmt: skip
    taken = sorted(reply, key=lambda e: entry_offset(e[0], BITS))
    return [(dict(zip(e[2][::2], e[2][1::2], strict=True))[b"value"], int(e[1])) for e in taken]


def _offsets(client: redis.Redis, topic: str) -> list[int]:
    return [entry_offset(i, BITS) for i, _ in client.xrange(KEYS.partition(topic, 0).log)]


def _ack(client: redis.Redis, topic: str, member: str, offset: int, kind: int) -> int:
    return scripts.call_sync(
        client,
        share_group_acknowledge_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group(GROUP),
            member_id=member, lock_ms=LOCK_MS, sequence_bits=BITS,
            batches=[AckBatch(offset, offset, [kind])],
        ),
    )  # fmt: skip


def _pending(client: redis.Redis, topic: str) -> int:
    log = KEYS.partition(topic, 0).log
    return int(client.xpending(log, KEYS.share_consumer_group(GROUP))["pending"])


def test_renew_keeps_a_record_past_its_lock_with_its_delivery_count(
    redis_client: redis.Redis, topic: str
) -> None:
    _log(redis_client, topic, [b"a"])
    (a,) = _offsets(redis_client, topic)
    assert _acquire(redis_client, topic, "m1") == [(b"a", 1)]
    for _ in range(3):  # renewed within each lock: held well past the first lock
        time.sleep(LOCK_MS / 2000)
        assert _ack(redis_client, topic, "m1", a, RENEW) == 0
    assert _acquire(redis_client, topic, "m2") == []  # still m1's
    assert _ack(redis_client, topic, "m1", a, RELEASE) == 0
    assert _acquire(redis_client, topic, "m2") == [(b"a", 2)]  # renewals counted no delivery


def test_an_expired_lock_is_no_longer_the_members(redis_client: redis.Redis, topic: str) -> None:
    _log(redis_client, topic, [b"a"])
    (a,) = _offsets(redis_client, topic)
    assert _acquire(redis_client, topic, "m1") == [(b"a", 1)]
    time.sleep(LOCK_MS / 1000 + 0.1)
    assert _ack(redis_client, topic, "m1", a, ACCEPT) == 1  # refused: INVALID_RECORD_STATE
    assert _acquire(redis_client, topic, "m2") == [(b"a", 2)]


def test_a_departed_members_records_go_to_another_at_once(
    redis_client: redis.Redis, topic: str
) -> None:
    _log(redis_client, topic, [b"a", b"b"])
    assert _acquire(redis_client, topic, "m1") == [(b"a", 1), (b"b", 1)]
    log = KEYS.partition(topic, 0).log
    cgroup = KEYS.share_consumer_group(GROUP)
    release = share_group_release_call(
        KEYS.partition(topic, 0), consumer_group=cgroup, member_id="m1", lock_ms=LOCK_MS
    )
    assert scripts.call_sync(redis_client, release) == 2
    assert "m1" not in {c["name"].decode() for c in redis_client.xinfo_consumers(log, cgroup)}
    (a, _) = _offsets(redis_client, topic)
    assert _ack(redis_client, topic, "m1", a, ACCEPT) == 1  # no longer m1's
    # available at once (not after the lock), the next delivery counted on the first
    assert _acquire(redis_client, topic, "m2") == [(b"a", 2), (b"b", 2)]
    assert scripts.call_sync(redis_client, release) == 0  # nothing left to give back


def test_read_committed_waits_for_open_transactions_and_skips_aborted_ones(
    redis_client: redis.Redis, topic: str
) -> None:
    _log(redis_client, topic, [b"before"])
    _transaction(redis_client, topic, 7, [b"aborted-1", b"aborted-2"])
    _transaction(redis_client, topic, 8, [b"committed"])
    _log(redis_client, topic, [b"after"])
    # both transactions open: nothing at or past the first one's first record
    assert _acquire(redis_client, topic, "m1", read_committed=True) == [(b"before", 1)]
    _end(redis_client, topic, 7, commit=False)
    assert _acquire(redis_client, topic, "m1", read_committed=True) == []  # 8 still open
    _end(redis_client, topic, 8, commit=True)
    got = _acquire(redis_client, topic, "m1", read_committed=True)
    assert got == [(b"committed", 1), (b"after", 1)]
    assert _pending(redis_client, topic) == 3  # aborted records and markers archived


def test_read_uncommitted_delivers_open_and_aborted_records(
    redis_client: redis.Redis, topic: str
) -> None:
    _transaction(redis_client, topic, 9, [b"open"])
    assert _acquire(redis_client, topic, "m1") == [(b"open", 1)]
    _end(redis_client, topic, 9, commit=False)
    assert _acquire(redis_client, topic, "m1") == []  # the marker is never handed out


def _heartbeat(
    client: redis.Redis,
    group: str,
    member: str,
    epoch: int,
    timeout_ms: int = 45_000,
    topics: list[str] | None = None,
) -> tuple[int, int, dict[str, list[str]]]:
    call = share_group_heartbeat_call(
        KEYS.share_group(group), now_ms=int(time.time() * 1000), session_timeout_ms=timeout_ms,
        member_id=member, member_epoch=epoch, subscribed_topics=topics,
    )  # fmt: skip
    status, group_epoch, _, gone = scripts.call_sync(client, call)
    return int(status), int(group_epoch), departed_members(gone)


def test_member_epochs_are_fenced_as_kafka_does(redis_client: redis.Redis) -> None:
    group = f"fence-{uuid.uuid4().hex[:6]}"
    assert _heartbeat(redis_client, group, "a", 0, topics=["t"])[:2] == (HEARTBEAT_OK, 1)
    assert _heartbeat(redis_client, group, "b", 0, topics=["t"])[:2] == (HEARTBEAT_OK, 2)
    # a's epoch is 1 (its last answer's) until its next heartbeat; 2 is ahead of it
    assert _heartbeat(redis_client, group, "a", 2)[0] == FENCED_MEMBER
    assert _heartbeat(redis_client, group, "a", 1)[:2] == (HEARTBEAT_OK, 2)
    # the previous epoch still passes (the answer carrying 2 may have been lost)
    assert _heartbeat(redis_client, group, "a", 1)[0] == HEARTBEAT_OK
    assert _heartbeat(redis_client, group, "c", 0, topics=["t"])[:2] == (HEARTBEAT_OK, 3)
    assert _heartbeat(redis_client, group, "a", 2)[:2] == (HEARTBEAT_OK, 3)  # 2 -> 3
    assert _heartbeat(redis_client, group, "a", 1)[0] == FENCED_MEMBER  # stale now
    assert _heartbeat(redis_client, group, "a", 0)[0] == HEARTBEAT_OK  # a rejoin starts anew
    assert _heartbeat(redis_client, group, "nobody", 4)[0] == UNKNOWN_MEMBER


def test_heartbeats_report_members_that_left_or_expired(redis_client: redis.Redis) -> None:
    group = f"gone-{uuid.uuid4().hex[:6]}"
    _heartbeat(redis_client, group, "a", 0, topics=["t", "u"])
    _heartbeat(redis_client, group, "b", 0, timeout_ms=1, topics=["t"])
    time.sleep(0.01)
    status, _, gone = _heartbeat(redis_client, group, "a", -1)
    assert status == HEARTBEAT_OK
    assert {m: sorted(ts) for m, ts in gone.items()} == {"a": ["t", "u"], "b": ["t"]}
    assert _heartbeat(redis_client, group, "c", 0, topics=["t"])[2] == {}


def test_acknowledgement_batches_are_checked_as_kafka_does() -> None:
    ok = [AckBatch(1, 3, [ACCEPT]), AckBatch(5, 6, [REJECT, 0])]
    assert not invalid_acknowledgements(ok, renew_allowed=False)
    assert invalid_acknowledgements([AckBatch(3, 1, [ACCEPT])], False)  # backwards
    assert invalid_acknowledgements([AckBatch(1, 3, [])], False)  # no type
    assert invalid_acknowledgements([AckBatch(1, 3, [ACCEPT, ACCEPT])], False)  # 2 of 3
    assert invalid_acknowledgements([AckBatch(1, 3, [ACCEPT]), AckBatch(3, 4, [ACCEPT])], False)
    assert invalid_acknowledgements([AckBatch(1, 1, [5])], True)  # no such type
    assert invalid_acknowledgements([AckBatch(1, 1, [RENEW])], renew_allowed=False)
    assert not invalid_acknowledgements([AckBatch(1, 1, [RENEW])], renew_allowed=True)


def test_departed_members_reads_the_scripts_json() -> None:
    assert departed_members(b"{}") == {}
    assert departed_members(json.dumps({"a": ["t"], "b": {}})) == {"a": ["t"]}
