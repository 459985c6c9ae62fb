"""STREAMADAPTER.PRODUCE and V1PRODUCE (mapping/connection/produce_commands.h) against
kafka/produce.lua and partition/produce.lua, the scripts they stand in for: the same calls,
each made on two copies of a partition on one real redis-server that loaded the module, give
the same replies, errors, log entries, state hash, producers' state and wake-up messages,
whatever the producers do (retries, gaps, stale and new epochs, an open transaction, expired
producers), whatever the state says (followers caught up or behind, a deleted topic, a
partition that became a follower)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mapping.connection.append_module import (
    CLOCK,
    PRODUCE_COMMAND,
    V1_PRODUCE_COMMAND,
    has_command_sync,
    library,
    produce_command,
    produce_probe,
)
from mapping.connection.embedded import RedisProcess
from mapping.core import errors, kafka_errors, size_marks
from mapping.core.records import ProducedRecord, append_args, packed_pairs, raw_batch_args
from mapping.partition.kafka import KAFKA_PRODUCE
from mapping.partition.partition_scripts import PARTITION_PRODUCE
from mapping.topic.topic_config import MAX_REPLICATION_FACTOR
from tests.mapping.connection.test_append_module import _encoded
from tests.support import ROOT
from tests.support.redis import start_replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(library() is None, reason="the module was not built")

SIDES = ("script", "module")
KEY_NAMES = ("log", "state", "hw", "appended", "producers", "times", "open")
EXPIRATION_MS = 60_000
LAG_MAX_MS = 10**9  # a follower caught up once stays in the ISR: the outcome keeps to the clock


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProcess]:
    with (
        RedisProcess(tmp_path_factory.mktemp("produce-redis"), appendonly=False) as process,
        redis.Redis(port=process.port) as client,
    ):
        client.script_load(KAFKA_PRODUCE.source)
        client.script_load(PARTITION_PRODUCE.source)
        yield process


def _keys(run: str, side: str) -> list[str]:
    return [f"{run}:{side}:{name}" for name in KEY_NAMES]


def _record(key: bytes | None, value: bytes | None, headers: int, delta: int) -> ProducedRecord:
    return (key, value, 1_764_000_000_000 + delta, [(f"h{i}", b"x" * i) for i in range(headers)])


records = st.lists(
    st.builds(
        _record,
        st.one_of(st.none(), st.binary(max_size=8)),
        st.one_of(st.none(), st.binary(max_size=30), st.just(b"v" * 200)),
        st.sampled_from([0, 0, 0, 1]),
        st.integers(-5, 5),
    ),
    min_size=1,
    max_size=5,
)

produce_steps = st.tuples(
    st.just("produce"),
    st.sampled_from([-1, 5, 6]),  # producer id (-1: not idempotent)
    st.sampled_from(
        ["next", "next", "next", "retry", "gap", "old", "bump", "bump past 0", "stale"]
    ),
    records,
    st.booleans(),  # the records as sent (a RecordBatch's plain records), where they are plain
    st.sampled_from([False, False, False, True]),  # lost_gap
)
state_steps = st.one_of(
    st.tuples(
        st.just("follower acked"),
        st.sampled_from([1, 2]),
        st.sampled_from(["end", "behind", "none"]),
    ),
    st.tuples(st.just("follower caught up"), st.sampled_from([1, 2]), st.booleans()),
    st.tuples(st.just("refuse"), st.sampled_from(["deleted", "role"]), st.booleans()),
    st.tuples(st.just("transaction"), st.sampled_from([5, 6]), st.booleans()),
    st.tuples(st.just("expire"), st.sampled_from([5, 6])),
)
steps = st.lists(st.one_of(produce_steps, produce_steps, state_steps), min_size=1, max_size=14)


class Producer:
    """An idempotent producer's view: its epoch, its next sequence, the batches it sent."""

    def __init__(self) -> None:
        self.epoch = 0
        self.next_sequence = 0
        self.sent: list[tuple[int, int, Any]] = []  # (epoch, base sequence, records)


def _move(
    producers: dict[int, Producer], pid: int, mode: str, records: Any
) -> tuple[int, int, Any]:
    """(epoch, base sequence, records) of the batch producer ``pid`` sends making ``mode``'s
    move with ``records`` (a retry: its last batch sent again); pid -1: not idempotent."""
    if pid < 0:
        return -1, -1, records
    producer = producers[pid]
    epoch, base_sequence = producer.epoch, producer.next_sequence
    if mode == "retry" and producer.sent:
        return producer.sent[-1]
    if mode == "gap":
        base_sequence += 3
    elif mode == "old":
        base_sequence = max(0, base_sequence - 1)
    elif mode in ("bump", "bump past 0"):
        producer.epoch = epoch = epoch + 1
        base_sequence = 0 if mode == "bump" else 4
    elif mode == "stale":
        epoch -= 1
    return epoch, base_sequence, records


def _dump(client: redis.Redis, keys: list[str]) -> list[Any]:
    """Every key's content, by its type."""
    dumped: list[Any] = []
    for key in keys:
        kind = client.type(key)
        if kind == b"stream":
            dumped.append(client.xrange(key))
        elif kind == b"hash":
            dumped.append(client.hgetall(key))
        elif kind == b"zset":
            dumped.append(client.zrange(key, 0, -1, withscores=True))
        else:
            dumped.append(kind)
    return dumped


def _call(client: redis.Redis, command: tuple) -> Any:
    try:
        return client.execute_command(*command)
    except redis.ResponseError as exc:
        return ("error", str(exc))


def _messages(pubsub: Any, run: str) -> dict[str, list[tuple[str, bytes]]]:
    """The wake-ups each side PUBLISHed, by channel name less the side."""
    seen: dict[str, list[tuple[str, bytes]]] = {side: [] for side in SIDES}
    while (message := pubsub.get_message(timeout=0.05)) is not None:
        if message["type"] != "pmessage":
            continue
        _, side, name = message["channel"].decode().split(":")
        seen[side].append((name, message["data"]))
    return seen


def _play(client: redis.Redis, walk: list[tuple], bits: int, rf: int) -> None:
    run = f"p{uuid.uuid4().hex[:8]}"
    keys = {side: _keys(run, side) for side in SIDES}
    pubsub = client.pubsub()
    pubsub.psubscribe(f"{run}:*:hw", f"{run}:*:appended")
    producers = {5: Producer(), 6: Producer()}
    try:
        for step in walk:
            kind = step[0]
            if kind != "produce":
                for side in SIDES:
                    _change_state(client, keys[side], step)
                continue
            _, pid, mode, batch, as_sent, lost_gap = step
            epoch, base_sequence, record_args = _move(
                producers, pid, mode, _record_args(batch, as_sent)
            )
            count = _record_count(record_args)
            argv = [bits, rf, LAG_MAX_MS, pid, epoch, base_sequence, count, EXPIRATION_MS, 0,
                    int(lost_gap), 1, *record_args]  # fmt: skip
            script_reply = _call(client, KAFKA_PRODUCE.command(keys["script"], argv))
            appended = isinstance(script_reply, list) and script_reply[0] == 0
            # the append time the script read, so that both write the same ids
            now = script_reply[5] if appended else int(client.time()[0]) * 1000
            module_call = produce_command(KAFKA_PRODUCE.command(keys["module"], argv))
            assert module_call[8] == CLOCK
            module_reply = _call(client, (*module_call[:8], now, *module_call[9:]))
            assert module_reply == script_reply, step
            dumps = [_dump(client, keys[side]) for side in SIDES]
            assert dumps[0] == dumps[1], step
            if pid >= 0 and appended:
                producers[pid].next_sequence = base_sequence + count
                producers[pid].sent.append((epoch, base_sequence, record_args))
        seen = _messages(pubsub, run)
        assert seen["module"] == seen["script"]
    finally:
        pubsub.close()
        client.delete(*keys["script"], *keys["module"])


def _record_args(batch: list[ProducedRecord], as_sent: bool) -> list[Any]:
    if as_sent:
        produced = _encoded(batch)
        if produced.raw is not None:
            return raw_batch_args(produced.raw)
    return append_args(batch)


def _record_count(record_args: list[Any]) -> int:
    """How many records kafka/produce.lua's record arguments hold."""
    count, at = 0, 0
    while at < len(record_args):
        form = int(record_args[at])
        if form == -3:
            return int(record_args[at + 2])
        count += 1
        at += {-1: 3, -2: 4}.get(form, 2 + form)
    return count


def _change_state(client: redis.Redis, keys: list[str], step: tuple) -> None:
    state, producers, times, txn_open = keys[1], keys[4], keys[5], keys[6]
    kind = step[0]
    if kind == "follower acked":
        _, replica, where = step
        log_end = int(client.hget(state, "log_end") or -1)
        acked = {"end": log_end, "behind": log_end - 1, "none": -1}[where]
        client.hset(state, f"replica.{replica}.acked_offset", acked)
    elif kind == "follower caught up":
        _, replica, present = step
        field = f"replica.{replica}.caught_up_ms"
        client.hset(state, field, 1) if present else client.hdel(state, field)
    elif kind == "refuse":
        _, field, present = step
        if present:
            client.hset(state, field, "1" if field == "deleted" else "follower")
        else:
            client.hdel(state, field)
    elif kind == "transaction":
        _, pid, present = step
        client.hset(txn_open, pid, "0 -1 -1") if present else client.hdel(txn_open, pid)
    elif kind == "expire":  # idle since long before the expiration: dropped by the next call
        client.zadd(times, {str(step[1]): 1}, xx=True)
    assert producers  # (the producers hash changes only through the calls)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(walk=steps, bits=st.sampled_from([1, 3, 10]), rf=st.sampled_from([1, 2, 3]))
def test_the_command_does_what_the_script_does(
    server: RedisProcess, walk: list[tuple], bits: int, rf: int
) -> None:
    with redis.Redis(port=server.port) as client:
        _play(client, walk, bits, rf)


v1_steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("produce"),
            st.lists(
                st.tuples(st.binary(max_size=6), st.binary(max_size=300)), min_size=1, max_size=6
            ),
        ),
        state_steps,
    ),
    min_size=1,
    max_size=10,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(walk=v1_steps, bits=st.sampled_from([1, 10]), rf=st.sampled_from([1, 3]))
def test_v1_produce_does_what_its_script_does(
    server: RedisProcess, walk: list[tuple], bits: int, rf: int
) -> None:
    run = f"v{uuid.uuid4().hex[:8]}"
    keys = {side: _keys(run, side) for side in SIDES}
    with redis.Redis(port=server.port) as client:
        pubsub = client.pubsub()
        pubsub.psubscribe(f"{run}:*:hw", f"{run}:*:appended")
        try:
            for step in walk:
                if step[0] != "produce":
                    for side in SIDES:
                        _change_state(client, keys[side], step)
                    continue
                argv = [
                    bits,
                    rf,
                    LAG_MAX_MS,
                    "1",
                    packed_pairs([x for pair in step[1] for x in pair]),
                ]
                script_call = PARTITION_PRODUCE.command(keys["script"][:4], argv)
                script_reply = _call(client, script_call)
                # the append time the script read: its last entry's ts
                last = client.xrevrange(keys["script"][0], count=1)
                now = int(last[0][1][b"ts"]) if last else int(client.time()[0]) * 1000
                module_call = produce_command(
                    PARTITION_PRODUCE.command(keys["module"][:4], argv), V1_PRODUCE_COMMAND
                )
                assert module_call[5] == CLOCK
                module_reply = _call(client, (*module_call[:5], now, *module_call[6:]))
                assert module_reply == script_reply, step
                assert _dump(client, keys["module"]) == _dump(client, keys["script"]), step
            seen = _messages(pubsub, run)
            assert seen["module"] == seen["script"]
        finally:
            pubsub.close()
            client.delete(*keys["script"], *keys["module"])


def test_a_long_idempotent_run_keeps_the_last_five_batches(server: RedisProcess) -> None:
    """Twelve batches of one producer, each retried once (the retry of one of the last five
    answers its offsets), then one of the first retried: OUT_OF_ORDER_SEQUENCE_NUMBER."""
    batch = [(None, b"value", 1_764_000_000_000, [])]
    walk: list[tuple] = []
    for _ in range(12):
        walk += [
            ("produce", 5, "next", batch, False, False),
            ("produce", 5, "retry", batch, True, False),
        ]
    walk.append(("produce", 5, "old", batch, False, False))
    with redis.Redis(port=server.port) as client:
        _play(client, walk, 10, 2)


def test_a_gap_is_appended_after_only_where_the_pod_lost_the_batch_before(
    server: RedisProcess,
) -> None:
    batch = [(b"k", b"value", 1_764_000_000_000, [])]
    walk = [
        ("produce", 6, mode, batch, False, lost_gap)
        for mode, lost_gap in [
            ("next", False), ("gap", False), ("gap", True), ("bump past 0", False),
            ("bump past 0", True), ("next", False),
        ]
    ]  # fmt: skip
    with redis.Redis(port=server.port) as client:
        _play(client, walk, 10, 1)


def test_the_command_answers_the_codes_the_python_side_defines() -> None:
    source = (ROOT / "mapping" / "connection" / "produce_commands.h").read_text()
    defined = dict(re.findall(r"#define (\w+) (\S+)", source))
    for name in ("OUT_OF_ORDER_SEQUENCE_NUMBER", "INVALID_PRODUCER_EPOCH", "INVALID_TXN_STATE",
                 "UNKNOWN_PRODUCER_ID"):  # fmt: skip
        assert int(defined[name]) == getattr(kafka_errors, name)
    assert (int(defined["SIZE_MIN_BITS"]), int(defined["SIZE_MAX_BITS"])) == (
        size_marks.SIZE_MIN_BITS,
        size_marks.SIZE_MAX_BITS,
    )
    assert int(defined["MOST_REPLICAS"]) > MAX_REPLICATION_FACTOR
    for code in (errors.UNKNOWN_TOPIC, errors.NOT_LEADER):
        assert f'"{code} ' in source


def test_bad_calls_get_an_error_and_write_nothing(server: RedisProcess) -> None:
    keys = _keys(f"bad{uuid.uuid4().hex[:6]}", "module")
    good = [10, 1, 0, -1, -1, -1, 1, EXPIRATION_MS, 0, 0, 1, -1, b"v", 5]
    with redis.Redis(port=server.port) as client:
        for args, message in [
            ([PRODUCE_COMMAND, keys[0]], "wrong number of arguments"),
            ([PRODUCE_COMMAND, *keys, CLOCK, *good[:11]], "wrong number of arguments"),
            ([PRODUCE_COMMAND, *keys, "soon", *good], "now is"),
            ([PRODUCE_COMMAND, *keys, CLOCK, "x", *good[1:]], "whole numbers"),
            ([PRODUCE_COMMAND, *keys, CLOCK, *good[:8], 1, *good[9:]], "transactional"),
            ([PRODUCE_COMMAND, *keys, CLOCK, *good, -1, b"v"], "malformed record"),
            ([PRODUCE_COMMAND, *keys, CLOCK, *good[:11], -7, b"v"], "malformed record"),
            ([V1_PRODUCE_COMMAND, *keys[:4], CLOCK, 10, 1, 0, "1"], "wrong number of arguments"),
            ([V1_PRODUCE_COMMAND, *keys[:4], CLOCK, 10, 1, 0, "0", b"k", b"v"], "as pairs"),
            ([V1_PRODUCE_COMMAND, *keys[:4], CLOCK, 10, 1, 0, "1", b"\0\0"], "malformed record"),
            (
                [V1_PRODUCE_COMMAND, *keys[:4], -5, 10, 1, 0, "1", packed_pairs([b"k", b"v"])],
                "now is",
            ),
        ]:
            with pytest.raises(redis.ResponseError, match=message):
                client.execute_command(*args)
            assert client.exists(*keys) == 0
        client.set(keys[4], "a string")
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            client.execute_command(PRODUCE_COMMAND, *keys, CLOCK, *good)
        assert client.exists(*keys) == 1
        assert client.ping()  # the connection and the server go on


def test_the_probe_finds_the_command_and_writes_nothing(
    server: RedisProcess, tmp_path: Path
) -> None:
    with redis.Redis(port=server.port) as client:
        assert has_command_sync(client, produce_probe("probe-key"))
        assert has_command_sync(client, produce_probe("probe-key", V1_PRODUCE_COMMAND))
        assert client.exists("probe-key") == 0
    with (
        RedisProcess(tmp_path / "plain", appendonly=False, append_module=False) as plain,
        redis.Redis(port=plain.port) as client,
    ):
        assert not has_command_sync(client, produce_probe("probe-key"))


def test_calls_replicate_and_reload_with_their_append_time(tmp_path: Path) -> None:
    """A replica and an AOF reload write the same entries and state: the command goes to
    both with the append time it read filled in (no PUBLISH there)."""
    primary = RedisProcess(tmp_path / "primary", appendonly=True).start()
    replica = start_replica(primary, tmp_path / "replica")
    keys = _keys("replicated", "module")
    try:
        with redis.Redis(port=primary.port) as client:
            for sequence in range(0, 40, 4):
                time.sleep(0.002)  # calls on other ms
                batch = [(None, b"v%d" % (sequence + i), 1_764_000_000_000, []) for i in range(4)]
                argv = [10, 2, LAG_MAX_MS, 9, 0, sequence, 4, EXPIRATION_MS, 0, 0, 1,
                        *append_args(batch)]  # fmt: skip
                reply = client.execute_command(*produce_command(KAFKA_PRODUCE.command(keys, argv)))
                assert reply[0] == 0
            # a retry (it writes the hw) and a refusal
            reply = client.execute_command(*produce_command(KAFKA_PRODUCE.command(keys, argv)))
            assert reply[0] == 1
            expected = _dump(client, keys)
            assert len(expected[0]) == 40
        with redis.Redis(port=replica.port) as copy:
            wait_until(lambda: _dump(copy, keys) == expected)
        primary.restart()
        with redis.Redis(port=primary.port) as reloaded:
            assert _dump(reloaded, keys) == expected
    finally:
        replica.kill()
        primary.kill()
