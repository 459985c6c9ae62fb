"""The streamadapter Redis module (mapping/connection/append_module.c) against the scripts' own
XADDs (kafka/produce.lua and partition/replica_fetch.lua with and without it): the same
entries, ids, numbers and state, on a real redis-server that loaded the module; what it
writes survives an AOF reload and reaches a Redis replica; bad arguments get an error and
write nothing."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster as SyncRedisCluster

from adapter.kafka.records import ProducedBatch, decode_batches
from mapping.connection.append_module import (
    APPEND_COMMAND,
    COPY_COMMAND,
    PRODUCE_COMMAND,
    PRODUCE_MANY_COMMAND,
    V1_PRODUCE_COMMAND,
    append_probe,
    copy_probe,
    has_command,
    has_command_sync,
    library,
    produce_probe,
)
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess
from mapping.connection.startup import pin_sequence_bits
from mapping.core.keys import Keys
from mapping.core.records import ProducedRecord, packed_pairs
from mapping.partition.kafka import COMBINED_BATCH_RECORDS, KafkaStore
from mapping.partition.partition_scripts import LATEST_OFFSET
from mapping.partition.partitions import Partitions, ReplicaFetchResult
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics
from tests.support.pods import RF1, Pod
from tests.support.redis import start_replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(library() is None, reason="the module was not built")

Batch = list[ProducedRecord]
PID = 7


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A redis-server of this module's own that loaded the module (the run's shared Redis
    may be a container's, without it)."""
    with RedisProcess(tmp_path_factory.mktemp("module-redis"), appendonly=False) as server:
        yield server.url


def _record(key: bytes | None, value: bytes | None, headers: int) -> ProducedRecord:
    return (key, value, 1_700_000_000_000 + headers, [(f"h{i}", b"x" * i) for i in range(headers)])


records = st.builds(
    _record,
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.sampled_from([0, 0, 0, 1, 3]),
)
stamped_records = st.builds(
    lambda key, value, timestamp, headers: (key, value, timestamp, headers),
    st.one_of(st.none(), st.binary(max_size=12)),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.integers(0, 1 << 42),
    st.sampled_from([[], [], [], [("h", b"x")], [("n", None)]]),
)
batches = st.lists(st.lists(records, min_size=1, max_size=30), min_size=1, max_size=4)


def _offset(entry_id: bytes, bits: int) -> int:
    ms, seq = (int(part) for part in entry_id.split(b"-"))
    return ms << bits | seq


def _check_log(
    entries: list[Any], written: list[Batch], bits: int, scripts_only: bool
) -> list[tuple[Any, ...]]:
    """Asserts the ids follow lib/append.lua's rule (ms = max(the batch's append time, the
    last ms), the next seq, the next ms once seq reaches 2^bits), each batch's records share
    its append time, the numbers count from 1 and, ``scripts_only``, a CreateTime is
    create_ts (the module writes create_dt); returns the entries' fields with the
    append time as the batch's index and the CreateTime as create_ts (what two logs written
    at other times share)."""
    fields_seen = []
    at, last_ms, last_seq = 0, -1, (1 << bits) - 1
    for index, batch in enumerate(written):
        part = entries[at : at + len(batch)]
        assert len(part) == len(batch)
        now = int(dict(part[0][1])[b"ts"])
        for entry_id, fields in part:
            ms, seq = (int(x) for x in entry_id.split(b"-"))
            last_seq += 1
            if now > last_ms:
                last_ms, last_seq = now, 0
            elif last_seq >= 1 << bits:
                last_ms, last_seq = last_ms + 1, 0
            assert (ms, seq) == (last_ms, last_seq)
            at += 1
            items = list(fields.items())
            assert items[-1] == (b"n", str(at).encode())
            assert dict(items)[b"ts"] == str(now).encode()
            assert not (scripts_only and b"create_dt" in dict(items))
            fields_seen.append(
                tuple(
                    (b"create_ts", b"%d" % (now + int(v)))
                    if n == b"create_dt"
                    else (n, index if n == b"ts" else v)
                    for n, v in items
                )
            )
    assert at == len(entries)
    return fields_seen


def _run(
    redis_url: str, bits: int, work: Callable[[KafkaStore, Topics, Keys], Any], rf: int = 1
) -> Any:
    async def scenario() -> Any:
        client = connect(redis_url, 10.0)
        keys = Keys(f"module-{uuid.uuid4().hex[:8]}")
        await pin_sequence_bits(client, keys, bits)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            topics = Topics(batcher, keys, topic_defaults=TopicDefaults(2, rf, 1))
            store = KafkaStore(Partitions(batcher, keys, topics, sequence_bits=bits))
            return await work(store, topics, keys)
        finally:
            runner.cancel()
            await client.aclose()

    return asyncio.run(scenario())


def _encoded(batch: Batch) -> ProducedBatch:
    """``batch`` as a producer sends it (aiokafka's builder), read back as the pod reads a
    Produce with the module at hand: plain records kept as sent."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for offset, (key, value, timestamp, headers) in enumerate(batch):
        builder.append(offset, timestamp, key, value, headers)
    (decoded,) = decode_batches(bytes(builder.build()), keep_plain=True)
    return decoded


def _write_both(
    redis_url: str, written: list[Batch], bits: int, idempotent: bool, raw: bool = False
) -> int:
    """``written`` appended to partition 0 through the module and to partition 1 through
    the scripts' XADDs; asserts both logs, replies and states are alike. ``raw``: partition
    0's batches as the pod reads a Produce (a batch of plain records sent as it came);
    returns how many were."""
    sent_raw = 0

    async def work(store: KafkaStore, topics: Topics, keys: Keys) -> None:
        nonlocal sent_raw
        config = await topics.topic("t")
        replies: dict[int, list[tuple[int, int, int]]] = {0: [], 1: []}
        for partition, module in ((0, True), (1, False)):
            store.partitions.append_module = module
            sequence = 0
            for batch in written:
                pid, seq = (PID, sequence) if idempotent else (-1, -1)
                if raw and module:
                    produced = _encoded(batch)
                    sent_raw += produced.raw is not None
                    result = await store.append_batch(
                        config, partition, produced.records, pid, 0, seq, raw=produced.raw
                    )
                else:
                    result = await store.append_batch(config, partition, batch, pid, 0, seq)
                sequence += len(batch)
                replies[partition].append((result.status, result.base_offset, result.last_offset))
        sync = redis.Redis.from_url(redis_url)
        try:
            logs = [sync.xrange(keys.partition("t", p).log) for p in (0, 1)]
            states = [sync.hgetall(keys.partition("t", p).state) for p in (0, 1)]
        finally:
            sync.close()
        seen = [
            _check_log(log, written, bits, scripts_only)
            for log, scripts_only in zip(logs, (False, True), strict=True)
        ]
        # the module's records keep their CreateTime as create_dt (a record too long for
        # one call's window is the script's XADD: create_ts)
        assert any(b"create_dt" in fields for _, fields in logs[0])
        assert seen[0] == seen[1]
        for log, state, partition in zip(logs, states, (0, 1), strict=True):
            offsets = [_offset(entry_id, bits) for entry_id, _ in log]
            assert int(state[b"log_end"]) == offsets[-1]
            assert int(state[b"appended"]) == len(log)
            ends = list(itertools.accumulate(len(batch) for batch in written))
            assert replies[partition] == [
                (0, offsets[end - len(batch)], offsets[end - 1])
                for batch, end in zip(written, ends, strict=True)
            ]
        assert {k for k in states[0] if k.startswith(b"size.")} == {
            k for k in states[1] if k.startswith(b"size.")
        }

    _run(redis_url, bits, work)
    return sent_raw


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(written=batches, idempotent=st.booleans())
def test_the_module_writes_the_entries_the_scripts_xadds_write(
    redis_url: str, written: list[Batch], idempotent: bool
) -> None:
    _write_both(redis_url, written, bits=10, idempotent=idempotent)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=st.lists(st.lists(stamped_records, min_size=1, max_size=30), min_size=1, max_size=4),
    idempotent=st.booleans(),
)
def test_a_batch_sent_as_it_came_is_stored_as_its_decoded_records(
    redis_url: str, written: list[Batch], idempotent: bool
) -> None:
    sent_raw = _write_both(redis_url, written, bits=10, idempotent=idempotent, raw=True)
    plain = [b for b in written if not any(headers for _, _, _, headers in b)]
    assert sent_raw == len(plain)


def test_long_raw_batches_and_their_create_times(redis_url: str) -> None:
    # every timestamp at its place, deltas below the first one included; 3000 records
    stamps = [1_700_000_000_000 + (i * 37) % 1000 - 500 for i in range(3000)]
    many = [(b"k%d" % i, b"v" * (i % 7), stamp, []) for i, stamp in enumerate(stamps)]
    produced = _encoded(many)
    assert produced.raw is not None and produced.raw.count == 3000
    produced.decode()
    assert produced.records == many
    assert _write_both(redis_url, [many, many[:5]], bits=2, idempotent=False, raw=True) == 2


def test_long_batches_few_sequence_bits_and_a_record_longer_than_a_window(redis_url: str) -> None:
    # 1500 keyed records: 6000 arguments, more than one window of 4000; with 2 sequence bits
    # every fifth record rolls to the next ms; a record of 2100 headers is longer than a window
    many = [(b"k%d" % i, b"v%d" % i, 5, []) for i in range(1500)]
    wide = [(b"wide", b"value", 5, [(f"h{i}", b"x") for i in range(2100)])]
    mixed = [(None, b"a", 5, []), *wide, (b"k", None, 5, []), (b"k", b"b", 5, [("h", None)])]
    _write_both(redis_url, [many, mixed, many[:3]], bits=2, idempotent=False)


def _produce_v1_both(
    redis_url: str, calls: list[list[tuple[bytes, bytes]]]
) -> list[tuple[Any, ...]]:
    """``calls`` of V1 records produced to partition 0 through the module (packed) and to
    partition 1 through the script's XADDs; asserts both logs and the offsets answered are
    alike; returns the entries' fields (_check_log)."""

    async def work(store: KafkaStore, topics: Topics, keys: Keys) -> list[tuple[Any, ...]]:
        config = await topics.topic("v")
        replies = []
        for partition, module in ((0, True), (1, False)):
            store.partitions.append_module = module
            store.partitions._drop_derived(None)  # the produce builders see the flag anew
            replies.append(
                [(await store.partitions.produce(config, partition, c)).offsets for c in calls]
            )
        sync = redis.Redis.from_url(redis_url)
        try:
            logs = [sync.xrange(keys.partition("v", p).log) for p in (0, 1)]
        finally:
            sync.close()
        written = [[(k, v, 0, []) for k, v in c] for c in calls]
        seen = [_check_log(log, written, 10, True) for log in logs]
        assert seen[0] == seen[1]
        for log, offsets in zip(logs, replies, strict=True):
            assert [o for reply in offsets for o in reply] == [_offset(i, 10) for i, _ in log]
        return seen[0]

    return _run(redis_url, 10, work)


def test_v1_produce_writes_the_same_through_the_module(redis_url: str) -> None:
    calls = [[(b"k%d" % i, b"v" * i) for i in range(n)] for n in (1, 3, 2500)]
    seen = _produce_v1_both(redis_url, calls)
    assert [b"key", b"value", b"ts", b"n"] == [name for name, _ in seen[0]]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    written=batches,
    max_copy=st.integers(1, 40),
    first_target=st.integers(0, 200),
)
def test_the_module_copies_to_a_replica_what_the_scripts_xadds_copy(
    redis_url: str, written: list[Batch], max_copy: int, first_target: int
) -> None:
    """REPLICA_FETCH into replica 1 through STREAMADAPTER.COPY and into replica 2 through
    the script's XRANGE and XADDs, a first target inside the log, then everything, in calls
    of at most ``max_copy`` entries: the same replies, and both replicas hold the log."""

    async def work(store: KafkaStore, topics: Topics, keys: Keys) -> None:
        partitions = store.partitions
        partitions.append_module = True
        config = await topics.topic("t")
        for batch in written:
            await store.append_batch(config, 0, batch)
        part = keys.partition("t", 0)
        sync = redis.Redis.from_url(redis_url)
        try:
            log = sync.xrange(part.log)
            target = _offset(log[min(first_target, len(log) - 1)][0], 10)
            replies: dict[int, list[ReplicaFetchResult]] = {1: [], 2: []}
            for replica, module in ((1, True), (2, False)):
                partitions.copy_module = module
                for offset in (target, LATEST_OFFSET):
                    while True:
                        result = await partitions.replica_fetch(
                            config, 0, replica, offset, max_copy
                        )
                        replies[replica].append(result)
                        if result.complete:
                            break
            assert sync.xrange(part.replica(1)) == sync.xrange(part.replica(2)) == log
        finally:
            sync.close()
        # alike but for the ISR and hw: replica 1 was caught up before replica 2 copied
        assert [(r.acked_offset, r.log_end, r.complete) for r in replies[1]] == [
            (r.acked_offset, r.log_end, r.complete) for r in replies[2]
        ]
        assert replies[1][-1].acked_offset == _offset(log[-1][0], 10)

    _run(redis_url, 10, work, rf=3)


def test_bad_copies_get_an_error_and_write_nothing(redis_client: redis.Redis) -> None:
    log, replica = (f"module-copy-{uuid.uuid4().hex[:8]}-{name}" for name in ("log", "replica"))
    for i in range(3):
        redis_client.xadd(log, {"value": b"v%d" % i, "n": i + 1}, id=f"5-{i}")
    for args, message in [
        ([COPY_COMMAND, log, replica], "wrong number of arguments"),
        ([COPY_COMMAND, log, replica, "-", "5", 10], "entry ids"),
        ([COPY_COMMAND, log, replica, "5-x", "5-2", 10], "entry ids"),
        ([COPY_COMMAND, log, replica, "-", "5-2", 0], "count"),
        ([COPY_COMMAND, log, log, "-", "5-2", 10], "one key"),
    ]:
        with pytest.raises(redis.ResponseError, match=message):
            redis_client.execute_command(*args)
        assert redis_client.exists(replica) == 0
    # a replica already past the first entry to copy: XADD's own error, nothing written
    redis_client.xadd(replica, {"value": b"later"}, id="6-0")
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        redis_client.execute_command(COPY_COMMAND, log, replica, "-", "5-2", 10)
    assert redis_client.xlen(replica) == 1
    redis_client.delete(replica)
    redis_client.set(replica, "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        redis_client.execute_command(COPY_COMMAND, log, replica, "-", "5-2", 10)
    # nothing to copy: an empty log, a range past the log, the last possible id
    assert redis_client.execute_command(COPY_COMMAND, f"{log}-none", f"{log}-r", "-", "5-2", 5) == [
        0,
        -1,
        -1,
    ]
    last = f"{2**64 - 1}-{2**64 - 1}"
    assert redis_client.execute_command(COPY_COMMAND, log, f"{log}-r", last, last, 5) == [0, -1, -1]
    assert redis_client.exists(f"{log}-r") == 0
    assert redis_client.ping()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    calls=st.lists(
        st.lists(
            st.tuples(st.binary(max_size=20), st.binary(max_size=300)), min_size=1, max_size=40
        ),
        min_size=1,
        max_size=4,
    )
)
def test_packed_v1_records_are_the_pairs_the_scripts_xadd(
    redis_url: str, calls: list[list[tuple[bytes, bytes]]]
) -> None:
    """partition/produce.lua's records packed for the module (any bytes, empty ones too)
    against the same pairs XADDed by the script: the same entries and replies."""
    _produce_v1_both(redis_url, calls)


def test_bad_arguments_get_an_error_and_write_nothing(redis_client: redis.Redis) -> None:
    log = f"module-bad-{uuid.uuid4().hex[:8]}"
    head = [APPEND_COMMAND, log, 1024, 5, -1, 1023, 0, "kafka"]
    for args, message in [
        ([APPEND_COMMAND, log], "wrong number of arguments"),
        ([APPEND_COMMAND, log, "x", 5, -1, 1023, 0, "kafka"], "whole numbers"),
        ([APPEND_COMMAND, log, 1024, 5, -1, 1023, 0, "v2", b"k", b"v"], "layout"),
        ([*head, -1, b"v", 5, -7, b"v"], "malformed record"),
        ([*head, -1, b"v", 5, 3, 0, b"a", b"b", b"c"], "malformed record"),
        ([*head, -1, b"v", 5, 2, 4, b"value", b"b"], "malformed record"),
        ([*head, -3, 5, 2, b"\x02\x00"], "malformed record"),  # not two plain records
        ([*head[:7], "packed", b""], "malformed record"),  # no record
        ([*head[:7], "packed", packed_pairs([b"k", b"v"])[:-1]], "malformed record"),
        ([*head[:7], "packed", packed_pairs([b"k"])], "malformed record"),  # a key alone
    ]:
        with pytest.raises(redis.ResponseError, match=message):
            redis_client.execute_command(*args)
        assert redis_client.exists(log) == 0
    redis_client.set(log, "a string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        redis_client.execute_command(*head, -1, b"v", 5)
    assert redis_client.ping()  # the connection and the server go on


def test_module_appends_survive_an_aof_reload_and_reach_a_replica(tmp_path: Path) -> None:
    primary = RedisProcess(tmp_path / "primary", appendonly=True).start()
    replica = start_replica(primary, tmp_path / "replica")
    try:
        written = [
            [(None, b"value %d" % i, 9, []) for i in range(200)],
            [(b"k", b"v", 9, [("h", b"1")]), (b"k", None, 9, [])],
        ]

        async def work(store: KafkaStore, topics: Topics, keys: Keys) -> tuple[str, str]:
            store.partitions.append_module = store.partitions.copy_module = True
            config = await topics.topic("t")
            for batch in written:
                await store.append_batch(config, 0, batch)
            # a follower's copy in two calls
            await store.partitions.replica_fetch(config, 0, 1, LATEST_OFFSET, 150)
            await store.partitions.replica_fetch(config, 0, 1, LATEST_OFFSET, 150)
            part = keys.partition("t", 0)
            return part.log, part.replica(1)

        log, follower = _run(primary.url, 10, work, rf=2)
        with redis.Redis(port=primary.port) as source, redis.Redis(port=replica.port) as copy:
            entries = source.xrange(log)
            assert len(entries) == 202
            assert source.xrange(follower) == entries
            wait_until(lambda: copy.xrange(log) == entries == copy.xrange(follower))
        primary.restart()
        with redis.Redis(port=primary.port) as reloaded:
            assert reloaded.xrange(log) == entries == reloaded.xrange(follower)
            assert reloaded.xinfo_stream(log)["entries-added"] == 202
    finally:
        replica.kill()
        primary.kill()


def _found(url: str, prefix: str = "rsa") -> tuple[bool, bool, bool]:
    """What a pod starting on ``url`` finds (has_command): APPEND, COPY, PRODUCE."""

    async def ask() -> tuple[bool, bool, bool]:
        client = connect(url, 5.0)
        keys = Keys(prefix)
        try:
            return (
                await has_command(client, append_probe(keys.module_probe)),
                await has_command(client, copy_probe(keys.module_probe, keys.module_probe_replica)),
                await has_command(client, produce_probe(keys.module_probe)),
            )
        finally:
            await client.aclose()

    return asyncio.run(ask())


def test_a_pod_finds_the_module_only_where_redis_loaded_it(tmp_path: Path, redis_url: str) -> None:
    assert _found(redis_url, "probe") == (True, True, True)
    with RedisProcess(tmp_path / "plain", appendonly=False, append_module=False) as plain:
        assert _found(plain.url, "probe") == (False, False, False)


def _module_calls(client: redis.Redis, command: str = APPEND_COMMAND) -> int:
    stats = client.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_pods_write_through_the_module_unless_told_not_to(tmp_path: Path) -> None:
    from confluent_kafka import Producer

    with (
        RedisProcess(tmp_path / "redis", appendonly=False) as server,
        redis.Redis(port=server.port) as admin,
    ):
        for args, used in (((), True), (("--no-append-module",), False)):
            commands = (PRODUCE_MANY_COMMAND, PRODUCE_COMMAND, V1_PRODUCE_COMMAND)
            before = [_module_calls(admin, command) for command in commands]
            pod = Pod(server.url, *RF1, *args).start()
            try:
                with pod.client() as client:
                    client.produce_many("m", [(b"k%d" % i, b"v%d" % i) for i in range(20)])
                # batches of at most 10 records, whatever the timing, so PRODUCEMANY takes
                # them (linger alone once let 50 records through as one batch of 50)
                producer = Producer(
                    {"bootstrap.servers": pod.bootstrap, "linger.ms": 5, "batch.num.messages": 10}
                )
                for i in range(50):
                    producer.produce("m", value=b"kafka %d" % i)
                assert producer.flush(30) == 0
                # a batch larger than the ones PRODUCEMANY takes
                many = Producer({"bootstrap.servers": pod.bootstrap, "linger.ms": 500})
                for i in range(COMBINED_BATCH_RECORDS + 8):
                    many.produce("m", value=b"large %d" % i, partition=0)
                assert many.flush(30) == 0
            finally:
                pod.stop()
            # Kafka's small batches through PRODUCEMANY, a larger one through PRODUCE, V1
            # PRODUCE through V1PRODUCE (a call each besides the pod's probe)
            for command, calls in zip(commands, before, strict=True):
                assert (_module_calls(admin, command) >= calls + 2) is used, command
        logs = [key for key in admin.scan_iter(match="*:part:{m:*}:log")]
        assert sum(admin.xlen(log) for log in logs) == 2 * (20 + 50 + COMBINED_BATCH_RECORDS + 8)
        # the probes wrote nothing
        assert admin.exists(Keys("rsa").module_probe, Keys("rsa").module_probe_replica) == 0


def test_kafka_consumers_read_the_create_times_the_module_keeps_as_differences(
    tmp_path: Path,
) -> None:
    """Through a pod with the module a record's CreateTime is stored as create_dt (its
    difference from ts), without it as create_ts; a Kafka consumer reads the producer's
    timestamps back either way, headers' records (the long form) included."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    stamps = [1_700_000_000_000 + 7 * i - (i % 4) * 1000 for i in range(12)]
    with (
        RedisProcess(tmp_path / "redis", appendonly=False) as server,
        redis.Redis(port=server.port) as admin,
    ):
        for topic, args, field in (
            ("dt", (), b"create_dt"),
            ("ts", ("--no-append-module",), b"create_ts"),
        ):
            pod = Pod(server.url, *RF1, *args).start()
            try:
                producer = Producer({"bootstrap.servers": pod.bootstrap, "linger.ms": 20})
                for i, stamp in enumerate(stamps):
                    producer.produce(
                        topic,
                        value=b"v%d" % i,
                        key=None if i % 2 else b"k%d" % i,
                        timestamp=stamp,
                        headers=[("h", b"x")] if i % 3 == 0 else None,
                        partition=0,
                    )
                assert producer.flush(30) == 0
                consumer = Consumer(
                    {
                        "bootstrap.servers": pod.bootstrap,
                        "group.id": "g",
                        "enable.auto.commit": False,
                    }
                )
                consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
                got: list[Any] = []
                deadline = time.monotonic() + 30
                while len(got) < len(stamps) and time.monotonic() < deadline:
                    got += [m for m in consumer.consume(12, 0.5) if not m.error()]
                consumer.close()
            finally:
                pod.stop()
            assert [m.timestamp()[1] for m in got] == stamps
            assert [m.value() for m in got] == [b"v%d" % i for i in range(12)]
            entries = admin.xrange(Keys("rsa").partition(topic, 0).log)
            assert [field in fields for _, fields in entries] == [True] * len(stamps)
            if field == b"create_dt":
                assert [int(f[b"ts"]) + int(f[b"create_dt"]) for _, f in entries] == stamps


def test_the_replicator_copies_through_the_module(tmp_path: Path) -> None:
    """A pod's replicator copies the followers' entries with STREAMADAPTER.COPY (RF 3), or
    with the script's XADDs under --no-append-module: the same replica streams."""
    with (
        RedisProcess(tmp_path / "redis", appendonly=False) as server,
        redis.Redis(port=server.port) as admin,
    ):
        for topic, args, used in (("c", (), True), ("x", ("--no-append-module",), False)):
            before = _module_calls(admin, COPY_COMMAND)
            pod = Pod(server.url, *args).start()
            try:
                with pod.client() as client:
                    client.produce_many(topic, [(b"k%d" % i, b"v%d" % i) for i in range(30)])
                logs = list(admin.scan_iter(match=f"*:part:{{{topic}:*}}:log"))
                assert sum(admin.xlen(log) for log in logs) == 30
                followers = [
                    (log, log.removesuffix(b":log") + b":replica:%d" % replica)
                    for log in logs
                    for replica in (1, 2)
                ]
                wait_until(
                    lambda pairs=followers: all(
                        admin.xrange(f) == admin.xrange(log) for log, f in pairs
                    )
                )
            finally:
                pod.stop()
            assert (_module_calls(admin, COPY_COMMAND) > before) is used


def test_every_node_of_a_cluster_is_asked(cluster_url: str) -> None:
    """On a cluster the pods (and Spark tasks) look for the command on every node, then probe
    the probe key's node; asked again on a client that served commands already."""
    key = Keys("rsa").module_probe

    async def found() -> list[bool]:
        client = connect(cluster_url, 5.0)
        try:
            first = await has_command(client, append_probe(key))
            await client.hset(Keys("rsa").meta, "probe", 1)
            copy = copy_probe(key, Keys("rsa").module_probe_replica)
            again = await has_command(client, append_probe(key))
            produce = await has_command(client, produce_probe(key))
            return [first, again, await has_command(client, copy), produce]
        finally:
            await client.aclose()

    assert asyncio.run(found()) == [True, True, True, True]
    host, port = cluster_url.removeprefix("redis+cluster://").split(":")
    with SyncRedisCluster(host=host, port=int(port)) as client:
        assert has_command_sync(client, append_probe(key))


def test_a_user_not_allowed_the_command_appends_without_it(tmp_path: Path) -> None:
    with (
        RedisProcess(tmp_path / "redis", appendonly=False) as server,
        redis.Redis(port=server.port) as admin,
    ):
        # the documented pod rule: the module's command is in none of its categories
        admin.execute_command(
            "ACL", "SETUSER", "pod", "on", ">pw", "~rsa:*", "&rsa:*",
            "+@read", "+@write", "+@stream", "+@hash", "+@scripting", "+@connection",
        )  # fmt: skip
        assert _found(f"redis://default@127.0.0.1:{server.port}/0") == (True, True, True)
        assert _found(f"redis://pod:pw@127.0.0.1:{server.port}/0") == (False, False, False)
        # one allowed, not the others
        admin.execute_command("ACL", "SETUSER", "pod", "+streamadapter.append")
        assert _found(f"redis://pod:pw@127.0.0.1:{server.port}/0") == (True, False, False)
