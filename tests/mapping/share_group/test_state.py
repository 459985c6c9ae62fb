"""Share-partition state for the admin APIs: the start offset, in-flight count and lag read
from a partition's Redis consumer group (pure parts, and the scripts on a real
redis-server), and the start offset reset and state deletion."""

from __future__ import annotations

import asyncio
import json
import uuid

import redis

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.core.codec import entry_offset
from mapping.core.keys import Keys
from mapping.partition.kafka import kafka_produce_call
from mapping.partition.partition_scripts import PartitionHead
from mapping.share_group.share_groups import (
    ACCEPT,
    AckBatch,
    ShareClient,
    ShareGroups,
    ShareSettings,
    share_group_acknowledge_call,
    share_group_acquire_call,
)
from mapping.share_group.state import (
    UNINITIALIZED,
    PartitionState,
    ShareGroupState,
    ShareMember,
    lag,
    last_id_before,
    live_members,
    parse_partition_state,
    share_group_offsets_alter_call,
    share_group_offsets_delete_call,
    share_group_offsets_describe_call,
    start_offset,
)

BITS = 10
KEYS = Keys(f"sgs-{uuid.uuid4().hex[:8]}")
GROUP = "g"


def test_no_state_is_uninitialised() -> None:
    assert parse_partition_state([]) is None
    assert start_offset(None, BITS) == UNINITIALIZED
    assert lag(None) == UNINITIALIZED


def test_start_offset_is_the_first_record_in_flight() -> None:
    state = parse_partition_state([b"5-3", 2, b"5-1", 4])
    assert state == PartitionState(b"5-3", 2, b"5-1", 4)
    assert start_offset(state, BITS) == (5 << BITS) | 1
    assert lag(state) == 6


def test_start_offset_after_the_last_delivered_when_nothing_is_in_flight() -> None:
    state = parse_partition_state([b"7-2", 0, b"", 0])
    assert start_offset(state, BITS) == ((7 << BITS) | 2) + 1
    assert lag(state) == 0
    assert start_offset(parse_partition_state([b"0-0", 0, b"", 3]), BITS) == 0


def test_lag_unknown_when_redis_cannot_tell() -> None:
    assert lag(parse_partition_state([b"7-2", 1, b"7-2", -1])) == UNINITIALIZED


def test_last_id_before_an_offset() -> None:
    assert last_id_before(0, BITS) == "0-0"
    assert last_id_before(-5, BITS) == "0-0"
    assert last_id_before((9 << BITS) | 4, BITS) == "9-3"
    assert last_id_before(9 << BITS, BITS) == f"8-{(1 << BITS) - 1}"


def test_live_members_leave_out_expired_sessions() -> None:
    stored = {
        "c": json.dumps({"topics": {}, "expiry": 1000}),  # cjson writes [] as {}
        "a": json.dumps({"topics": ["t2", "t1"], "expiry": 2000, "epoch": 3, "previous": 2}),
        "b": json.dumps({"topics": ["t1"], "expiry": 999}),
    }
    assert live_members(stored, 1000) == [
        ShareMember("a", ["t1", "t2"], 3),
        ShareMember("c", [], None),
    ]


def _log(client: redis.Redis, topic: str, count: int) -> list[int]:
    head = PartitionHead(KEYS.partition(topic, 0), BITS, 1, 10_000)
    scripts.call_sync(
        client, kafka_produce_call(head, [(None, f"v{i}".encode(), 1, []) for i in range(count)])
    )
    return [entry_offset(e[0], BITS) for e in client.xrange(KEYS.partition(topic, 0).log)]


def _acquire(client: redis.Redis, topic: str, max_records: int) -> list[int]:
    reply = scripts.call_sync(
        client,
        share_group_acquire_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group(GROUP),
            member_id="m", settings=ShareSettings(30_000, 5, True, 45_000, 5000),
            max_records=max_records, sequence_bits=BITS,
        ),
    )  # fmt: skip
    return sorted(entry_offset(e[0], BITS) for e in reply)


def _describe(client: redis.Redis, topic: str) -> PartitionState | None:
    return parse_partition_state(
        scripts.call_sync(client, share_group_offsets_describe_call(KEYS, GROUP, topic, 0))
    )


def test_describe_alter_delete_on_a_real_log(redis_client: redis.Redis) -> None:
    topic = f"t{uuid.uuid4().hex[:6]}"
    assert _describe(redis_client, topic) is None  # no log at all
    offsets = _log(redis_client, topic, 10)
    assert _describe(redis_client, topic) is None  # a log, no consumer group

    taken = _acquire(redis_client, topic, 4)
    assert taken == offsets[:4]
    state = _describe(redis_client, topic)
    assert start_offset(state, BITS) == offsets[0]
    assert lag(state) == 10  # 4 in flight, 6 not delivered

    accepted = [AckBatch(offsets[0], offsets[1], [ACCEPT])]
    scripts.call_sync(
        redis_client,
        share_group_acknowledge_call(
            KEYS.partition(topic, 0), consumer_group=KEYS.share_consumer_group(GROUP),
            member_id="m", lock_ms=30_000, sequence_bits=BITS, batches=accepted,
        ),
    )  # fmt: skip
    state = _describe(redis_client, topic)
    assert start_offset(state, BITS) == offsets[2]
    assert lag(state) == 8

    # back to the third record: nothing in flight, the rest not delivered
    scripts.call_sync(
        redis_client, share_group_offsets_alter_call(KEYS, GROUP, topic, 0, offsets[2], BITS)
    )
    state = _describe(redis_client, topic)
    assert state is not None and state.in_flight == 0
    assert start_offset(state, BITS) == offsets[2]
    assert lag(state) == 8
    assert _acquire(redis_client, topic, 100) == offsets[2:]

    # an offset between two records: the next record at or after it comes next
    scripts.call_sync(
        redis_client, share_group_offsets_alter_call(KEYS, GROUP, topic, 0, offsets[7] + 1, BITS)
    )
    assert lag(_describe(redis_client, topic)) == 2
    assert _acquire(redis_client, topic, 100) == offsets[8:]

    assert (
        scripts.call_sync(redis_client, share_group_offsets_delete_call(KEYS, GROUP, topic, 0)) == 1
    )
    assert _describe(redis_client, topic) is None
    assert (
        scripts.call_sync(redis_client, share_group_offsets_delete_call(KEYS, GROUP, topic, 0)) == 0
    )


def test_lag_is_counted_where_redis_does_not_know_it(redis_client: redis.Redis) -> None:
    topic = f"t{uuid.uuid4().hex[:6]}"
    offsets = _log(redis_client, topic, 5)
    log = KEYS.partition(topic, 0).log
    scripts.call_sync(
        redis_client, share_group_offsets_alter_call(KEYS, GROUP, topic, 0, offsets[1], BITS)
    )
    redis_client.xdel(log, redis_client.xrange(log)[3][0])  # a hole after the position
    state = _describe(redis_client, topic)
    assert state is not None and state.undelivered == 3
    assert lag(state) == 3


def test_alter_creates_the_group_on_an_empty_partition(redis_client: redis.Redis) -> None:
    topic = f"t{uuid.uuid4().hex[:6]}"
    scripts.call_sync(redis_client, share_group_offsets_alter_call(KEYS, GROUP, topic, 0, 0, BITS))
    state = _describe(redis_client, topic)
    assert start_offset(state, BITS) == 0
    assert lag(state) == 0


def test_groups_are_listed_from_their_set_and_deleted_with_their_topics(redis_url: str) -> None:
    """Joins register the group (ListGroups reads the set, never scans the keyspace) and
    record the topics subscribed (where the group may have state); deleting the group
    removes its state on their partitions, its keys and its name."""

    async def scenario() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"sgl-{uuid.uuid4().hex[:8]}")
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            await batcher.call("HSET", keys.topic("orders"), "partitions", 2)
            groups = ShareGroups(batcher, keys, BITS)
            state = ShareGroupState(batcher, keys, BITS)
            client_of = ShareClient("reader", "/127.0.0.1", "rack-a")
            await groups.heartbeat("billing", "m1", 0, ["orders", "gone"], client_of)
            await groups.heartbeat("audit", "m2", 0, ["orders"])
            assert await state.group_names() == ["audit", "billing"]
            assert await state.topics("billing") == ["gone", "orders"]
            assert await state.partitions("billing") == [("orders", 0), ("orders", 1)]
            membership = await state.membership("billing")
            assert membership is not None
            (member,) = membership.members
            assert (member.client_id, member.client_host, member.rack) == (
                "reader", "/127.0.0.1", "rack-a",
            )  # fmt: skip

            await groups.heartbeat("billing", "m1", -1, None)
            await state.delete_group("billing")
            assert await state.group_names() == ["audit"]
            assert await state.membership("billing") is None
            share = keys.share_group("billing")
            assert await batcher.call("EXISTS", share.meta, share.members, share.topics) == 0
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(scenario())
