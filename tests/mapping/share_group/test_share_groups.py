"""Share groups' Redis state on a real redis-server: the acquire and acknowledge scripts on a
partition's log (one member at a time, release, reject, lock expiry, the delivery limit,
markers never handed out), membership and the pure parts (simple assignor, settings)."""

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
from mapping.share_group.assignor import assign
from mapping.share_group.share_groups import (
    ACCEPT,
    REJECT,
    RELEASE,
    AckBatch,
    ShareSettings,
    share_group_acknowledge_call,
    share_group_acquire_call,
    share_group_heartbeat_call,
)

BITS = 10
KEYS = Keys(f"sg-{uuid.uuid4().hex[:8]}")


def _log(client: redis.Redis, topic: str, values: list[bytes]) -> None:
    head = PartitionHead(KEYS.partition(topic, 0), BITS, 1, 10_000)
    records = [(None, v, 1, []) for v in values]
    scripts.call_sync(client, kafka_produce_call(head, records))


def _settings(lock_ms: int = 30_000, limit: int = 5) -> ShareSettings:
    return ShareSettings(lock_ms, limit, True, 45_000, 5000)


def _acquire(
    client: redis.Redis, topic: str, member: str, settings: ShareSettings | None = None
) -> list[tuple[bytes, int]]:
    """(value, delivery count) of what ``member`` acquires, in offset order."""
    reply = scripts.call_sync(
        client,
        share_group_acquire_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group("g"),
            member_id=member, settings=settings or _settings(), max_records=100,
            sequence_bits=BITS,
        ),
    )  # fmt: skip
    taken = sorted(reply, key=lambda e: entry_offset(e[0], BITS))
    return [(dict(zip(e[2][::2], e[2][1::2], strict=True))[b"value"], int(e[1])) for e in taken]


def _offsets(client: redis.Redis, topic: str) -> list[int]:
    return [entry_offset(i, BITS) for i, _ in client.xrange(KEYS.partition(topic, 0).log)]


def _ack(client: redis.Redis, topic: str, member: str, batches: list[AckBatch]) -> int:
    return scripts.call_sync(
        client,
        share_group_acknowledge_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group("g"),
            member_id=member, lock_ms=30_000, sequence_bits=BITS, batches=batches,
        ),
    )  # fmt: skip


def test_a_record_goes_to_one_member_and_released_ones_come_back(
    redis_client: redis.Redis, topic: str
) -> None:
    _log(redis_client, topic, [b"a", b"b", b"c"])
    assert _acquire(redis_client, topic, "m1") == [(b"a", 1), (b"b", 1), (b"c", 1)]
    assert _acquire(redis_client, topic, "m2") == []  # locked by m1
    a, b, c = _offsets(redis_client, topic)
    # m2 holds nothing: its acknowledgement is refused and changes nothing
    assert _ack(redis_client, topic, "m2", [AckBatch(a, c, [ACCEPT])]) == 1
    # one type per offset: accept a, release b (offsets between records are gaps), reject c
    types = [ACCEPT] + [0] * (b - a - 1) + [RELEASE] + [0] * (c - b - 1) + [REJECT]
    assert _ack(redis_client, topic, "m1", [AckBatch(a, c, types)]) == 0
    assert _acquire(redis_client, topic, "m2") == [(b"b", 2)]  # its delivery count kept
    assert _acquire(redis_client, topic, "m1") == []


def test_expired_locks_and_the_delivery_limit(redis_client: redis.Redis, topic: str) -> None:
    _log(redis_client, topic, [b"x"])
    short = _settings(lock_ms=20, limit=2)
    assert _acquire(redis_client, topic, "m1", short) == [(b"x", 1)]
    time.sleep(0.05)  # past the lock: the record is available again
    assert _acquire(redis_client, topic, "m2", short) == [(b"x", 2)]
    time.sleep(0.05)  # a third delivery would pass the limit: archived
    assert _acquire(redis_client, topic, "m1", short) == []
    pending = redis_client.xpending(KEYS.partition(topic, 0).log, KEYS.share_consumer_group("g"))
    assert pending["pending"] == 0


def test_transaction_markers_are_never_handed_out(redis_client: redis.Redis, topic: str) -> None:
    _log(redis_client, topic, [b"a"])
    log = KEYS.partition(topic, 0).log
    head = PartitionHead(KEYS.partition(topic, 0), BITS, 1, 10_000)
    scripts.call_sync(redis_client, txn_add_call(head, 7, 0))
    scripts.call_sync(redis_client, txn_marker_call(head, 7, 0, True))
    _log(redis_client, topic, [b"b"])
    assert any(fields.get(b"ctl") for _, fields in redis_client.xrange(log))
    assert _acquire(redis_client, topic, "m1") == [(b"a", 1), (b"b", 1)]
    assert redis_client.xpending(log, KEYS.share_consumer_group("g"))["pending"] == 2


def test_latest_starts_after_what_is_there(redis_client: redis.Redis, topic: str) -> None:
    _log(redis_client, topic, [b"old"])
    latest = ShareSettings(30_000, 5, False, 45_000, 5000)
    assert _acquire(redis_client, topic, "m1", latest) == []
    _log(redis_client, topic, [b"new"])
    assert _acquire(redis_client, topic, "m1", latest) == [(b"new", 1)]


def _heartbeat(client: redis.Redis, member: str, epoch: int, topics: list[str] | None) -> list:
    call = share_group_heartbeat_call(
        KEYS.share_group(f"hb-{id(client)}"), now_ms=int(time.time() * 1000),
        session_timeout_ms=45_000, member_id=member, member_epoch=epoch,
        subscribed_topics=topics,
    )  # fmt: skip
    return scripts.call_sync(client, call)


def test_membership_epochs(redis_client: redis.Redis) -> None:
    status, first, *_ = _heartbeat(redis_client, "a", 0, ["t"])
    assert status == 0
    status, second, members, _ = _heartbeat(redis_client, "b", 0, ["t", "u"])
    assert (status, second) == (0, first + 1)
    assert {k: sorted(v) for k, v in json.loads(members).items()} == {
        "a": ["t"], "b": ["t", "u"],
    }  # fmt: skip
    assert _heartbeat(redis_client, "a", first, None)[:2] == [0, second]  # its epoch moves on
    assert _heartbeat(redis_client, "zz", 3, None)[0] == 1  # unknown member
    assert _heartbeat(redis_client, "b", -1, None)[1] == second + 1  # left


def test_the_simple_assignor_spreads_and_shares_partitions() -> None:
    assert assign({"a": ["t"], "b": ["t"]}, {"t": 3}) == {"a": {"t": [0, 2]}, "b": {"t": [1]}}
    shared = assign({m: ["t"] for m in "abc"}, {"t": 2})
    assert shared == {"a": {"t": [0]}, "b": {"t": [1]}, "c": {"t": [0]}}
    assert assign({"a": ["t", "gone"]}, {"t": 1}) == {"a": {"t": [0]}}


def test_settings_default_to_kafkas() -> None:
    assert ShareSettings.of({}) == ShareSettings(30_000, 5, False, 45_000, 5000)
    stored = {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"}
    assert ShareSettings.of(stored) == ShareSettings(30_000, 3, True, 45_000, 5000)
