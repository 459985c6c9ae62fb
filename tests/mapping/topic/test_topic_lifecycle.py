"""A topic's whole life with real pods: deleted with everything it had (`adapter topic
delete`), forgotten by every pod (none serves it from a stale cache, none writes into a
half-deleted topic), made anew with the pod's defaults; auto-creation off
(UNKNOWN_TOPIC), --max-topics (TOPIC_LIMIT), and the pods' bounded topic caches. What a
deletion leaves (only expiring tombstones), also when a creation, a growth or a stale pod's
DeleteRecords meets it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from adapter.client import RequestFailed
from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core.keys import Keys
from mapping.operations.topic_lifecycle import TOMBSTONE_MS, partition_delete_call
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics
from tests.support.cli import CliTarget
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    """A key prefix of the test's own: topic counts and sets are the test's alone."""
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"life{uuid.uuid4().hex[:8]}"), client)
    client.close()


def _pod(start_pod, target: CliTarget, *args: str) -> Pod:
    return start_pod(target.url, "--key-prefix", target.keys.prefix, *RF1, *args)


def _keys_of(target: CliTarget, topic: str) -> dict[str, str]:
    """Every key naming ``topic`` (partitions, topic hash, groups), with its type."""
    found = {}
    for key in target.client.scan_iter(match=f"{target.keys.prefix}:*{topic}*"):
        found[key.decode()] = target.client.type(key).decode()
    return found


def _assert_only_tombstones(
    target: CliTarget, topic: str, partitions: int, topic_id: bytes
) -> None:
    """What a deleted topic leaves: its partitions' tombstones {deleted: 1, topic_id},
    expiring, and nothing else: no other key, no entry in the topics set or the id index."""
    left = _keys_of(target, topic)
    tombstones = {target.keys.partition(topic, p).state for p in range(partitions)}
    assert set(left) == tombstones
    for key in tombstones:
        assert target.client.hgetall(key) == {b"deleted": b"1", b"topic_id": topic_id}
        assert 0 < target.client.pttl(key) <= TOMBSTONE_MS
    assert not target.client.sismember(target.keys.topics, topic)
    assert not target.client.hexists(target.keys.topic_ids, topic_id)
    groups = {m.decode() for m in target.client.smembers(target.keys.groups)}
    assert not any(entry.endswith(f" {topic}") for entry in groups)


def _error(call) -> tuple[str, str]:  # noqa: ANN001
    with pytest.raises(RequestFailed) as failure:
        call()
    response = failure.value.response
    return response.code, response.message


def test_delete_removes_everything_and_every_pod_forgets_it(
    target: CliTarget, topic: str, start_pod
) -> None:
    first = _pod(start_pod, target, "--default-partitions", "2")
    second = _pod(start_pod, target, "--default-partitions", "5")
    with first.client() as a, second.client() as b:
        # Made by the first pod (2 partitions); both pods cache it.
        assert a.produce(topic, "k", "v1").partition in (0, 1)
        b.produce(topic, "k", "v2")
        assert b.consume(topic, 1, 0).high_watermark >= -1
        generation = a.join("g1", topic, "c1").generation
        a.commit("g1", topic, "c1", generation, 0, 1)
        target.client.sadd(target.keys.groups, f"g2 {topic}")  # a listed group, no keys
        # A Spark sink's progress markers (written by spark/sink_append.lua beside the log).
        target.client.hset(target.keys.sink_markers(topic, 0), "query:0", "0 1 1")
        before = _keys_of(target, topic)
        assert f"{target.keys.topic(topic)}" in before
        assert target.keys.group("g1", topic).offsets in before
        topic_id = target.client.hget(target.keys.topic(topic), "topic_id")

        out = target.cli("topic", "delete", topic)
        assert out == f"deleted topic={topic} partitions=2 groups=[g1 g2]\n"

        # Left: only the partitions' tombstones {deleted: 1, topic_id}, expiring.
        _assert_only_tombstones(target, topic, 2, topic_id)

        # Every pod heard of it and dropped its cache.
        for pod in (first, second):
            wait_until(lambda pod=pod: f"topic {topic} was deleted" in pod.log())
        # The second pod makes it anew with its own defaults, fresh: no old record, no
        # old group offsets, no tombstone left on the new partitions.
        reply = b.produce(topic, "other", "fresh")
        assert target.client.hget(target.keys.topic(topic), "partitions") == b"5"
        assert target.client.hget(target.keys.topic(topic), "topic_id") != topic_id
        assert b.consume(topic, reply.partition, 0).records == [(reply.offset, b"fresh")]
        assert b.committed("g1", topic, 0) == 0
        assert a.consume(topic, 4, 0).records == []  # the first pod sees 5 partitions too
        for p in range(5):
            state = target.keys.partition(topic, p).state
            assert not target.client.hexists(state, "deleted")
            assert target.client.pttl(state) < 0  # no TTL: the old tombstone's went with it
        assert target.client.sismember(target.keys.topics, topic)


def test_a_pod_that_missed_the_notice_does_not_write_into_a_deleted_topic(
    target: CliTarget, topic: str, start_pod
) -> None:
    """The deletion's pub/sub notice is lost (simulated: the partition is deleted as
    `topic delete` does, with no notice): the scripts refuse the cached topic to PRODUCE,
    CONSUME and SET_PARTITION_ROLE alike, writing nothing; each pod forgets it, and the
    next request makes it anew."""
    pods = [_pod(start_pod, target, "--default-partitions", "1") for _ in range(3)]
    keys = target.keys
    pk = keys.partition(topic, 0)
    with pods[0].client() as producer, pods[1].client() as consumer, pods[2].client() as admin:
        producer.produce(topic, "k", "old")
        assert len(consumer.consume(topic, 0, 0).records) == 1  # the pods cache it
        assert admin.request("SET_PARTITION_ROLE", f"{topic} 0 leader").ok
        delete = partition_delete_call([pk.log, pk.state], TOMBSTONE_MS, "")
        target.client.execute_command(*scripts.as_eval(delete))
        target.client.delete(keys.topic(topic))
        target.client.srem(keys.topics, topic)

        deleted = ("UNKNOWN_TOPIC", "topic was deleted")
        assert _error(lambda: producer.produce(topic, "k", "stale")) == deleted
        assert _error(lambda: consumer.consume(topic, 0, 0)) == deleted
        role = admin.request("SET_PARTITION_ROLE", f"{topic} 0 follower")
        assert (role.code, role.message) == deleted
        assert target.client.exists(pk.log, keys.topic(topic)) == 0  # nothing was written
        assert target.client.hgetall(pk.state) == {b"deleted": b"1"}
        # Forgotten: made anew, its partition without the tombstone.
        reply = producer.produce(topic, "k", "new")
        assert consumer.consume(topic, 0, 0).records == [(reply.offset, b"new")]
        assert target.client.hget(pk.state, "deleted") is None
        assert target.client.pttl(pk.state) == -1
        assert admin.request("SET_PARTITION_ROLE", f"{topic} 0 leader").ok  # the new topic


def test_delete_of_an_unknown_topic_is_an_error(target: CliTarget) -> None:
    from click.testing import CliRunner

    from adapter.cli import main

    args = ["topic", "delete", "nope", "--redis-url", target.url, "--key-prefix",
            target.keys.prefix]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "no topic nope" in result.output


def test_without_auto_creation_unknown_topics_are_refused(
    target: CliTarget, topic: str, start_pod
) -> None:
    pod = _pod(start_pod, target, "--no-auto-create-topics")
    with pod.client() as client:
        message = f"unknown topic {topic} (auto-creation is off)"
        assert _error(lambda: client.produce(topic, "k", "v")) == ("UNKNOWN_TOPIC", message)
        assert _error(lambda: client.consume(topic, 0, 0)) == ("UNKNOWN_TOPIC", message)
        assert _error(lambda: client.join("g", topic, "c1")) == ("UNKNOWN_TOPIC", message)
        assert client.ping() == "pong"  # the connection stays usable
        assert not target.client.exists(target.keys.topic(topic))
        # only the pods' own __consumer_offsets (mapping/group/offsets_mirror.py)
        assert target.client.smembers(target.keys.topics) == {b"__consumer_offsets"}
        # Created by the operator, it serves.
        target.cli("topic", "create", topic, "--partitions", "1", "--replication-factor", "1",
                   "--min-insync-replicas", "1")  # fmt: skip
        reply = client.produce(topic, "k", "v")
        assert client.consume(topic, 0, 0).records == [(reply.offset, b"v")]
        assert client.join("g", topic, "c1").assigned == [0]


def test_max_topics_bounds_auto_creation(target: CliTarget, start_pod) -> None:
    """Kafka's internal topics (the pods' __consumer_offsets) are not counted."""
    pod = _pod(start_pod, target, "--max-topics", "2")
    names = [f"m{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    with pod.client() as client:
        client.produce(names[0], "k", "v")
        client.consume(names[1], 0, 0)
        assert _error(lambda: client.produce(names[2], "k", "v")) == (
            "TOPIC_LIMIT",
            f"cannot create topic {names[2]}: 2 topics exist, the limit is 2",
        )
        assert _error(lambda: client.join("g", names[2], "c"))[0] == "TOPIC_LIMIT"
        assert not target.client.exists(target.keys.topic(names[2]))
        client.produce(names[0], "k", "still served")  # existing topics are not limited
        target.cli("topic", "delete", names[0])
        client.produce(names[2], "k", "room again")
        assert target.client.smembers(target.keys.topics) == {
            n.encode() for n in ("__consumer_offsets", names[1], names[2])
        }


def test_the_topic_cache_is_bounded(redis_url: str) -> None:
    """Least recently used topics leave the cache; they are read again when needed."""

    async def body() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"cache-{uuid.uuid4().hex[:8]}")
        await pin_sequence_bits(client, keys, 10)
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            topics = Topics(batcher, keys, topic_defaults=TopicDefaults(2, 1, 1),
                            topic_cache_size=2)  # fmt: skip
            partitions = Partitions(batcher, keys, topics)
            for name in ("a", "b", "a", "c"):
                await topics.topic(name)
            assert topics.cache.cached() == ["a", "c"]  # b was least recently used
            assert topics.cache.known("b") is None
            assert (await topics.topic("b")).partitions == 2  # read again from Redis
            assert topics.cache.cached() == ["c", "b"]
            config = await topics.topic("c")
            await partitions.produce(config, 0, [(b"k", b"v")])  # the produce path caches too
            for name in ("d", "e", "f"):
                await topics.topic(name)
            assert topics.cache.cached() == ["e", "f"]
            assert len(partitions._produce_builders) == 0  # evicted with their topic
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(body())


def test_auto_creation_off_in_the_topics_never_creates(redis_url: str) -> None:
    async def body() -> None:
        client = connect(redis_url, 5.0)
        keys = Keys(f"noauto-{uuid.uuid4().hex[:8]}")
        batcher = RedisBatcher(client)
        runner = asyncio.create_task(batcher.run())
        try:
            topics = Topics(batcher, keys, auto_create_topics=False)
            assert await topics.lookup("x") is None
            with pytest.raises(Exception, match="unknown topic x"):
                await topics.topic("x")
            assert await client.exists(keys.topic("x")) == 0
            assert topics.cache.cached() == []
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(body())


@pytest.mark.slow
def test_topic_and_group_delete_on_the_cluster(cluster_url: str, start_pod, topic: str) -> None:
    """Every script touches one slot: deleting works on a real Redis Cluster too."""
    from click.testing import CliRunner

    from adapter.cli import main
    from mapping.connection.cluster import connect_sync

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--redis-url", cluster_url])
        assert result.exit_code == 0, result.output
        return result.output

    g, h = (f"{name}-{uuid.uuid4().hex[:8]}" for name in "gh")  # the cluster is shared
    pod = start_pod(cluster_url, *RF1)
    with pod.client() as client:
        client.produce_many(topic, [(f"user{i}", "v") for i in range(6)])
        generation = client.join(g, topic, "c1").generation
        client.commit(g, topic, "c1", generation, 0, 1)
        client.leave(g, topic, "c1", generation)
        client.join(h, topic, "c1")
        assert cli("group", "delete", g) == f"deleted group={g} topic={topic}\n"
        assert client.committed(g, topic, 0) == 0
        assert cli("topic", "delete", topic) == f"deleted topic={topic} partitions=3 groups=[{h}]\n"
        wait_until(lambda: f"topic {topic} was deleted" in pod.log())
        cluster = connect_sync(cluster_url)
        try:
            keys = Keys()
            assert not cluster.exists(keys.topic(topic))
            for p in range(3):
                pk = keys.partition(topic, p)
                assert not cluster.exists(pk.log)
                assert cluster.hget(pk.state, "deleted") == b"1"
                assert 0 < cluster.pttl(pk.state) <= TOMBSTONE_MS
            assert not cluster.exists(keys.group(h, topic).members)
            reply = client.produce(topic, "user1", "again")
            assert client.consume(topic, reply.partition, 0).records == [(reply.offset, b"again")]
        finally:
            cluster.close()


def test_acks_all_waiters_of_a_deleted_topic_are_answered_at_once(
    target: CliTarget, topic: str, start_pod
) -> None:
    """No follower plays the replicas (--no-replicator): an acks=all PRODUCE waits for an hw
    that will never come. Deleting the topic answers it UNKNOWN_TOPIC, not a timeout."""
    target.cli("topic", "create", topic, "--partitions", "1")  # RF 3, min ISR 2
    pod = start_pod(target.url, "--key-prefix", target.keys.prefix, "--no-replicator",
                    "--acks-timeout-ms", "20000")  # fmt: skip
    with pod.client() as client:
        client.send_raw(f"V1|1|PRODUCE|{topic} k:v acks=all\n".encode())
        log = target.keys.partition(topic, 0).log
        wait_until(lambda: target.client.xlen(log) == 1)  # appended, now waiting for acks
        target.cli("topic", "delete", topic)
        reply = client.read_response()
        assert (reply.code, reply.message) == ("UNKNOWN_TOPIC", "topic was deleted")
        assert client.ping() == "pong"


# --- what a deletion leaves (issue 20, item 6) -----------------------------------------------


def _kafka_admin(pod: Pod) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})


def _use_the_topic_every_way(
    target: CliTarget, pods: list[Pod], topic: str, kafka_group: str
) -> None:
    """Everything that writes keys of a topic: Kafka CreateTopics (replicated), growth by
    CreatePartitions, an idempotent Kafka producer, a Kafka consumer group that commits,
    DeleteRecords, V1 produce and a V1 group, a Spark sink's markers. (The Kafka group's own
    state, keyed by the group alone, is no key of the topic.)"""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import NewPartitions, NewTopic

    admin = _kafka_admin(pods[0])
    created = admin.create_topics([NewTopic(topic, 2, 2, config={"min.insync.replicas": "1"})])
    assert created[topic].result(10) is None
    assert admin.create_partitions([NewPartitions(topic, 3)])[topic].result(10) is None
    producer = Producer({"bootstrap.servers": pods[1].bootstrap, "enable.idempotence": True})
    for p in range(3):
        for i in range(5):
            producer.produce(topic, key=f"k{i}", value=b"v", partition=p)
    assert producer.flush(10) == 0
    # (-1: below the high watermark: partition 0's five records)
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, -1)]).values()
    assert deleted.result(10).low_watermark > 0
    consumer = Consumer({"bootstrap.servers": pods[0].bootstrap, "group.id": kafka_group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    seen = 0
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            seen += 1
            consumer.commit(message, asynchronous=False)
        if seen >= 10:  # 15 records, 5 removed by DeleteRecords
            break
    consumer.close()
    assert seen == 10
    with pods[1].client() as v1:
        v1.produce(topic, "v1", "record")
        generation = v1.join("g1", topic, "c1").generation
        v1.commit("g1", topic, "c1", generation, 2, 1)
    target.client.hset(target.keys.sink_markers(topic, 2), "query:0", "0 1 1")
    pk = target.keys.partition(topic, 2)
    assert target.client.exists(pk.log, pk.replica(1), pk.producers, pk.producer_times) == 4


@pytest.mark.parametrize("way", ["cli", "kafka"])
def test_a_deleted_topic_leaves_only_expiring_tombstones(
    target: CliTarget, topic: str, start_pod, way: str
) -> None:
    """A topic used every way, grown, then deleted by ``adapter topic delete`` or Kafka's
    DeleteTopics: a SCAN of the keyspace finds its three partitions' tombstones, each with
    a TTL, and nothing else (no log, replica, producers, Spark markers, group, topic hash,
    topics-set or id-index entry). Made anew, its partitions carry no TTL."""
    pods = [_pod(start_pod, target), _pod(start_pod, target)]
    kafka_group = f"kg-{uuid.uuid4().hex[:8]}"
    _use_the_topic_every_way(target, pods, topic, kafka_group)
    topic_id = target.client.hget(target.keys.topic(topic), "topic_id")
    assert target.client.hget(target.keys.topic_ids, topic_id) == topic.encode()
    if way == "cli":
        out = target.cli("topic", "delete", topic)
        assert out == f"deleted topic={topic} partitions=3 groups=[g1 {kafka_group}]\n"
    else:
        admin = _kafka_admin(pods[0])  # alive until the result is in
        assert admin.delete_topics([topic])[topic].result(10) is None
    for pod in pods:
        wait_until(lambda pod=pod: f"topic {topic} was deleted" in pod.log())
    _assert_only_tombstones(target, topic, 3, topic_id)
    with pods[1].client() as v1:
        v1.produce(topic, "k", "again")
        for p in range(3):  # (RF 1: the pods' default)
            assert v1.consume(topic, p, 0).high_watermark >= -1
    for p in range(3):
        state = target.keys.partition(topic, p).state
        assert target.client.hget(state, "deleted") is None
        assert target.client.pttl(state) == -1


def test_delete_records_through_a_pod_that_missed_the_deletion_writes_nothing(
    target: CliTarget, topic: str, start_pod
) -> None:
    """The deletion's notice is lost (simulated as above): Kafka DeleteRecords through the
    pod that still has the topic cached is refused like every partition script, and writes
    nothing into the tombstone; otherwise its ``log_start`` would stay in the state hash of
    the topic made anew, and so would the tombstone's TTL: the new partition's state (its
    high watermark, log end) would vanish within the hour."""
    from adapter.kafka import errors
    from adapter.kafka.versions import DELETE_RECORDS
    from tests.support.kafka import RawKafka

    pod = _pod(start_pod, target, "--default-partitions", "1")
    keys = target.keys
    pk = keys.partition(topic, 0)
    with pod.client() as client:
        for value in ("a", "b", "c"):
            client.produce(topic, "k", value)  # the pod caches the topic
        delete = partition_delete_call([pk.log, pk.state], TOMBSTONE_MS, "")
        target.client.execute_command(*scripts.as_eval(delete))
        target.client.delete(keys.topic(topic))
        target.client.srem(keys.topics, topic)

        request = DELETE_RECORDS.request[2]
        body = request(
            topics=[
                request.DeleteRecordsTopic(
                    name=topic,
                    partitions=[
                        request.DeleteRecordsTopic.DeleteRecordsPartition(
                            partition_index=0, offset=-1
                        )
                    ],
                )
            ],
            timeout_ms=5000,
        )
        with RawKafka(pod.kafka_port) as raw:
            (answer,) = raw.call(DELETE_RECORDS, 2, body).topics
        assert answer.partitions[0].error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        assert target.client.hgetall(pk.state) == {b"deleted": b"1"}  # nothing written
        # Made anew (the pod forgot it): a state of its own, with no TTL.
        reply = client.produce(topic, "k", "new")
        assert client.consume(topic, 0, 0).records == [(reply.offset, b"new")]
        assert target.client.hget(pk.state, "log_start") is None
        assert target.client.pttl(pk.state) == -1


class _Paused:
    """A batcher whose calls wait while ``holds`` says so (``release`` lets them go): one
    step of a topic's creation or deletion is held back while another runs."""

    def __init__(self, batcher: RedisBatcher, holds: Callable[[tuple], bool]) -> None:
        self.batcher = batcher
        self.holds = holds
        self.release = asyncio.Event()
        self.held = asyncio.Event()

    async def call(self, *command: Any) -> Any:
        if self.holds(command):
            self.held.set()
            await self.release.wait()
        return await self.batcher.call(*command)


async def _running_batcher(url: str) -> tuple[Any, RedisBatcher, asyncio.Task]:
    client = connect(url, 5.0)
    batcher = RedisBatcher(client)
    return client, batcher, asyncio.create_task(batcher.run())


def test_a_creation_announced_after_the_deletion_of_its_topic_keeps_the_tombstones(
    target: CliTarget, topic: str
) -> None:
    """A pod creates the topic (topic/ensure.lua) and, before it announces it (revives its
    partitions, lists it), the topic is deleted. The late announcement must not remove the
    deletion's tombstones (they would leave partitions that no deletion covers, writable
    without a TTL) nor list a topic that no longer exists."""
    from mapping.operations.topic_lifecycle import delete_topic

    async def body() -> None:
        client, batcher, runner = await _running_batcher(target.url)
        try:
            await pin_sequence_bits(client, target.keys, 10)
            calls = 0

            def after_the_creation(command: tuple) -> bool:
                nonlocal calls
                calls += 1
                return calls > 1  # the creation script goes, its announcement waits

            paused = _Paused(batcher, after_the_creation)
            creator = Topics(paused, target.keys, topic_defaults=TopicDefaults(2, 1, 1))  # type: ignore[arg-type]
            creating = asyncio.create_task(creator.topic(topic))
            await asyncio.wait_for(paused.held.wait(), 5)
            topic_id = await client.hget(target.keys.topic(topic), "topic_id")
            deletion = await delete_topic(Topics(batcher, target.keys), topic)
            assert deletion is not None and deletion.partitions == 2
            paused.release.set()
            await creating  # announced now, after the deletion

            _assert_only_tombstones(target, topic, 2, topic_id)
            # Made anew: another id, the old topic's tombstones go.
            topics = Topics(batcher, target.keys, topic_defaults=TopicDefaults(2, 1, 1))
            partitions = Partitions(batcher, target.keys, topics)
            config = await topics.topic(topic)
            assert config.topic_id.encode() != topic_id
            result = await partitions.produce(config, 1, [(b"k", b"v")])
            page = await partitions.consume(config, 1, 0, 10)
            assert page.records == [(result.offsets[0], b"v")]
            for p in range(2):
                state = target.keys.partition(topic, p).state
                assert await client.pttl(state) < 0 and not await client.hexists(state, "deleted")
            assert await client.sismember(target.keys.topics, topic)
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(body())


def test_partitions_added_while_the_topic_is_deleted_get_tombstones_too(
    target: CliTarget, topic: str
) -> None:
    """CreatePartitions grows the topic (and a record lands in a new partition) after the
    deletion read the partition count: the new partitions are deleted too, their states
    become expiring tombstones like the others."""
    from mapping.operations.topic_lifecycle import add_partitions, delete_topic

    async def body() -> None:
        client, batcher, runner = await _running_batcher(target.url)
        try:
            await pin_sequence_bits(client, target.keys, 10)
            topics = Topics(batcher, target.keys, topic_defaults=TopicDefaults(2, 1, 1))
            topic_id = (await topics.topic(topic)).topic_id.encode()
            grown = False

            async def grow() -> None:
                other = Topics(batcher, target.keys)
                await add_partitions(other, topic, 4)
                config = await other.topic(topic)
                assert config.partitions == 4
                writer = Partitions(batcher, target.keys, other)
                await writer.produce(config, 3, [(b"k", b"in a new partition")])

            class GrowingFirst(_Paused):
                async def call(self, *command: Any) -> Any:
                    nonlocal grown
                    touches_partitions = any(":part:{" in str(arg) for arg in command)
                    if touches_partitions and not grown:
                        grown = True  # the count was read: the topic grows now
                        await grow()
                    return await self.batcher.call(*command)

            deleter = Topics(GrowingFirst(batcher, lambda _: False), target.keys)  # type: ignore[arg-type]
            deletion = await delete_topic(deleter, topic)
            assert grown and deletion is not None
            assert deletion.partitions == 4
            _assert_only_tombstones(target, topic, 4, topic_id)
        finally:
            runner.cancel()
            await client.aclose()

    asyncio.run(body())
