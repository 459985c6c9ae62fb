"""STREAMADAPTER.PRODUCEMANY (mapping/connection/produce_commands.h) against the same batches
as STREAMADAPTER.PRODUCE calls one after another with the same append time (PRODUCE itself
is held to kafka/produce.lua in test_produce_command.py): each call's batches, made on two
copies of a partition on one real redis-server, give the same replies, log entries, state
hash and producers' state, and each channel gets the last wake-up the single calls sent,
whatever the producers and the state do between and within the calls."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapping.connection.append_module import (
    CLOCK,
    PRODUCE_MANY_COMMAND,
    has_command_sync,
    library,
    produce_command,
    produce_probe,
)
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from mapping.core.records import ProducedRecord, RawRecords, raw_batch_args, sent_batch
from mapping.partition.kafka import KAFKA_PRODUCE, kafka_produce_call, kafka_produce_many_call
from mapping.partition.partition_scripts import PartitionHead
from tests.mapping.connection.test_append_module import _encoded
from tests.mapping.connection.test_produce_command import (
    EXPIRATION_MS,
    LAG_MAX_MS,
    Producer,
    _call,
    _change_state,
    _dump,
    _keys,
    _move,
    server,
    state_steps,
)
from tests.support.redis import start_replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(library() is None, reason="the module was not built")

__all__ = ["server"]  # the fixture, shared with test_produce_command.py

SIDES = ("single", "many")
DONE = b"done"  # published on the run's marker channel after each call: all before it came


def _plain(key: bytes | None, value: bytes | None, delta: int) -> ProducedRecord:
    return (key, value, 1_764_000_000_000 + delta, [])


batches = st.lists(
    st.tuples(
        st.sampled_from([-1, 5, 6]),  # producer id (-1: not idempotent)
        st.sampled_from(
            ["next", "next", "next", "retry", "gap", "old", "bump", "bump past 0", "stale"]
        ),
        st.lists(
            st.builds(
                _plain,
                st.one_of(st.none(), st.binary(max_size=8)),
                st.one_of(st.none(), st.binary(max_size=30), st.just(b"v" * 200)),
                st.integers(-5, 5),
            ),
            min_size=1,
            max_size=4,
        ),
        st.sampled_from([False, False, False, True]),  # lost_gap
    ),
    min_size=1,
    max_size=6,
)
walks = st.lists(
    st.one_of(st.tuples(st.just("call"), batches), state_steps), min_size=1, max_size=8
)


def _raw(records: list[ProducedRecord]) -> RawRecords:
    raw = _encoded(records).raw
    assert raw is not None  # plain records: kept as sent
    return raw


def _wakeups(pubsub: Any, run: str, marker: str) -> dict[str, dict[str, bytes]]:
    """Each side's last message on each channel since the last marker."""
    last: dict[str, dict[str, bytes]] = {side: {} for side in SIDES}
    while True:
        message = pubsub.get_message(timeout=5)
        assert message is not None, "the marker did not come"
        if message["type"] != "pmessage":
            continue
        channel = message["channel"].decode()
        if channel == marker:
            return last
        _, side, name = channel.split(":")
        last[side][name] = message["data"]


def _play(client: redis.Redis, walk: list[tuple], bits: int, rf: int) -> None:
    run = f"m{uuid.uuid4().hex[:8]}"
    keys = {side: _keys(run, side) for side in SIDES}
    marker = f"{run}:marker"
    pubsub = client.pubsub()
    pubsub.psubscribe(f"{run}:*:hw", f"{run}:*:appended", marker)
    producers = {5: Producer(), 6: Producer()}
    try:
        for step in walk:
            if step[0] != "call":
                for side in SIDES:
                    _change_state(client, keys[side], step)
                continue
            now = int(client.time()[0]) * 1000
            sent: list[bytes] = []
            singles: list[Any] = []
            for pid, mode, records, lost_gap, *rest in step[1]:
                expiration_ms = rest[0] if rest else EXPIRATION_MS
                epoch, base_sequence, raw = _move(producers, pid, mode, _raw(records))
                argv = [bits, rf, LAG_MAX_MS, pid, epoch, base_sequence, raw.count,
                        expiration_ms, 0, int(lost_gap), 1, *raw_batch_args(raw)]  # fmt: skip
                single = produce_command(KAFKA_PRODUCE.command(keys["single"], argv))
                singles.append(_call(client, (*single[:8], now, *single[9:])))
                sent.append(sent_batch(raw, pid, epoch, base_sequence, expiration_ms, lost_gap))
                reply = singles[-1]
                if pid >= 0 and isinstance(reply, list) and reply[0] == 0:
                    producers[pid].next_sequence = base_sequence + raw.count
                    producers[pid].sent.append((epoch, base_sequence, raw))
            many = _call(
                client,
                (PRODUCE_MANY_COMMAND, *keys["many"], now, bits, rf, LAG_MAX_MS, *sent),
            )
            if isinstance(many, tuple):  # the partition refused the call: each batch
                assert all(_comparable(reply) == many for reply in singles), step
            else:
                assert _comparable(many) == [_comparable(reply) for reply in singles], step
            assert _dump(client, keys["many"]) == _dump(client, keys["single"]), step
            client.publish(marker, DONE)
            seen = _wakeups(pubsub, run, marker)
            assert seen["many"] == seen["single"], step
    finally:
        pubsub.close()
        client.delete(*keys["single"], *keys["many"])


def _comparable(reply: Any) -> Any:
    """A reply with its error replies as their text (in a list, hiredis gives exceptions)."""
    if isinstance(reply, list):
        return [_comparable(item) for item in reply]
    if isinstance(reply, Exception):
        return ("error", str(reply))
    return reply


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(walk=walks, bits=st.sampled_from([1, 3, 10]), rf=st.sampled_from([1, 2, 3]))
def test_one_call_does_what_its_batches_one_by_one_do(
    server: Any, walk: list[tuple], bits: int, rf: int
) -> None:
    with redis.Redis(port=server.port) as client:
        _play(client, walk, bits, rf)


def test_a_producer_retrying_within_one_call_gets_its_first_offsets(server: Any) -> None:
    """Two producers' batches interleaved in one call, a retry of each, an old one, a gap
    (lost and not): each batch sees the ones before it in the same call."""
    records = [_plain(None, b"value", 0), _plain(b"k", None, 1)]
    call = [
        (5, "next", records, False), (6, "next", records, False), (5, "retry", records, False),
        (5, "next", records, False), (6, "retry", records, False), (5, "old", records, False),
        (6, "gap", records, False), (6, "gap", records, True), (-1, "next", records, False),
    ]  # fmt: skip
    with redis.Redis(port=server.port) as client:
        _play(client, [("call", call), ("call", call)], 10, 2)


def test_a_producer_expired_within_a_call_starts_anew(server: Any) -> None:
    """A batch whose producer id expiration is 0 drops every producer idle since now, those
    appended earlier in the same call too: the producer's next batch finds no entry."""
    records = [_plain(None, b"value", 0)]
    call = [
        (5, "next", records, False), (5, "next", records, False),
        (6, "next", records, False, 0),  # drops 5 (and itself: then writes its own entry)
        (5, "gap", records, False), (5, "next", records, False), (6, "next", records, False),
    ]  # fmt: skip
    with redis.Redis(port=server.port) as client:
        _play(client, [("call", call), ("call", call)], 10, 1)


def test_a_bad_batch_gets_its_error_and_the_others_are_appended(server: Any) -> None:
    keys = _keys(f"bad{uuid.uuid4().hex[:6]}", "many")
    good = sent_batch(_raw([_plain(None, b"v", 0)]), -1, -1, -1, EXPIRATION_MS, False)
    head = (PRODUCE_MANY_COMMAND, *keys, CLOCK)
    with redis.Redis(port=server.port) as client:
        for args, message in [
            ((PRODUCE_MANY_COMMAND, keys[0]), "wrong number of arguments"),
            ((*head, 10, 1, 0), "wrong number of arguments"),
            ((*head, "x", 1, 0, good), "whole numbers"),
            ((PRODUCE_MANY_COMMAND, *keys, "soon", 10, 1, 0, good), "now is"),
        ]:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command(*args)
            assert client.exists(*keys) == 0
        short = good[:20]  # a head cut short
        wrong_count = good[:16] + b"\0\0\0\2" + good[20:]  # two records said, one sent
        reply = client.execute_command(*head, 10, 1, 0, good, short, wrong_count, good)
        assert [type(r) for r in reply] == [list, redis.ResponseError, redis.ResponseError, list]
        assert "malformed" in str(reply[1]) and "malformed" in str(reply[2])
        assert reply[0][0] == reply[3][0] == 0  # appended
        assert reply[3][3] == reply[0][4] + 1  # the next offset: the bad ones wrote nothing
        assert client.xlen(keys[0]) == 2
        client.delete(*keys)
        client.set(keys[4], "a string")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command(*head, 10, 1, 0, good)
        assert client.exists(*keys) == 1
        client.delete(*keys)
        assert client.ping()  # the connection and the server go on


def test_the_probe_finds_the_command(server: Any) -> None:
    with redis.Redis(port=server.port) as client:
        assert has_command_sync(client, produce_probe("probe-key", PRODUCE_MANY_COMMAND))
        assert client.exists("probe-key") == 0


def test_the_call_is_the_partitions_keys_and_head() -> None:
    """kafka_produce_many_call names PRODUCE's keys in PRODUCE's order, then the head."""
    head = PartitionHead(Keys("k").partition("t", 3), 10, 2, 500)
    raw = _raw([_plain(None, b"v", 0)])
    batch = sent_batch(raw, 7, 1, 40, EXPIRATION_MS, True)
    many = kafka_produce_many_call(head, [batch, batch])
    single = kafka_produce_call(head, [], append_module=True, raw=raw, produce_module=True)
    assert many[1:9] == single[1:9]  # the keys, then the clock
    assert many[9:] == (10, 2, 500, batch, batch)


def test_calls_replicate_and_reload_with_their_append_time(tmp_path: Path) -> None:
    """A replica and an AOF reload write the same entries and state: the call goes to both
    with the append time it read filled in."""
    primary = RedisProcess(tmp_path / "primary", appendonly=True).start()
    replica = start_replica(primary, tmp_path / "replica")
    keys = _keys("replicated", "many")
    try:
        with redis.Redis(port=primary.port) as client:
            for sequence in range(0, 48, 12):
                time.sleep(0.002)  # calls on other ms
                batches = [
                    sent_batch(
                        _raw([_plain(None, b"v%d" % (sequence + i + j), 0) for j in range(4)]),
                        9, 0, sequence + i, EXPIRATION_MS, False,
                    )
                    for i in range(0, 12, 4)
                ]  # fmt: skip
                # the last batch again: a retry within the call
                reply = client.execute_command(
                    PRODUCE_MANY_COMMAND, *keys, CLOCK, 10, 2, LAG_MAX_MS, *batches, batches[-1]
                )
                assert [r[0] for r in reply] == [0, 0, 0, 1]
            expected = _dump(client, keys)
            assert len(expected[0]) == 48
        with redis.Redis(port=replica.port) as copy:
            wait_until(lambda: _dump(copy, keys) == expected)
        primary.restart()
        with redis.Redis(port=primary.port) as reloaded:
            assert _dump(reloaded, keys) == expected
    finally:
        replica.kill()
        primary.kill()
