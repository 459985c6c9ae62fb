"""--redis-wait-replicas: readers see hw only up to what the Redis replica has (durable_hw),
acks wait for it, and readers still progress with no acks=all traffic
(mapping/replication/durable.py)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import redis

from adapter.kafka import errors
from adapter.kafka.versions import JOIN_GROUP, OFFSET_FETCH, SYNC_GROUP
from mapping.connection.embedded import RedisProcess
from mapping.core.errors import BrokerError
from mapping.core.keys import DEFAULT_PREFIX, Keys
from mapping.partition.kafka import KafkaStore
from mapping.partition.partitions import Partitions
from mapping.replication.pod_replication import Replication
from mapping.topic.topic_config import TopicConfig, TopicDefaults
from tests.mapping.replication.test_waiters import run_with, wait_for_ack
from tests.support.kafka import RawKafka, commit_offsets, fetch_offsets, fetch_offsets_answer
from tests.support.kafka_groups import subscription
from tests.support.pods import Pod
from tests.support.waiting import wait_until

RF1 = TopicDefaults(1, 1, 1)


async def _readable(partitions: Partitions, config: TopicConfig, expected: int) -> None:
    """Wait until CONSUME serves ``expected`` records."""
    for _ in range(500):
        if len((await partitions.consume(config, 0, 0, 100)).records) == expected:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{expected} records never became readable")


def test_readers_see_only_what_the_replica_has(
    own_redis: RedisProcess, replica: RedisProcess
) -> None:
    assert replica.process is not None
    pid = replica.process.pid

    async def body(partitions: Partitions, replication: Replication) -> None:
        config = await partitions.topics.topic("durable")
        kafka = KafkaStore(partitions)
        # no acks=all at all: appends and reads alone bring durable_hw up
        written = await partitions.produce(config, 0, [(b"k", b"a"), (b"k", b"b")])
        await _readable(partitions, config, 2)
        os.kill(pid, signal.SIGSTOP)  # the replica's link is cut
        try:
            late = await partitions.produce(config, 0, [(b"k", b"c")])
            with pytest.raises(BrokerError) as failed:
                await wait_for_ack(replication, config, 0, late.offsets[0])
            assert failed.value.code == "REPLICATION_TIMEOUT"
            for _ in range(3):  # rounds run meanwhile; none may serve the late record
                result = await partitions.consume(config, 0, 0, 100)
                assert [value for _, value in result.records] == [b"a", b"b"]
                assert result.high_watermark == written.offsets[1]
                read = await kafka.start_read(config, 0, 0, 100)
                assert read.high_watermark == written.offsets[1]
                status = await partitions.partition_status(config, 0, reader=True)
                assert status.high_watermark == written.offsets[1]
                # the acks path still sees the real hw
                status = await partitions.partition_status(config, 0)
                assert status.high_watermark == late.offsets[0]
                await asyncio.sleep(0.2)
        finally:
            os.kill(pid, signal.SIGCONT)
        await _readable(partitions, config, 3)
        again = await partitions.produce(config, 0, [(b"k", b"d")])
        assert await wait_for_ack(replication, config, 0, again.offsets[0]) >= again.offsets[0]
        assert len((await partitions.consume(config, 0, 0, 100)).records) == 4

    asyncio.run(
        run_with(
            own_redis.url,
            body,
            acks_timeout_ms=300,
            run_replicator=False,
            defaults=RF1,
            redis_wait_replicas=1,
        )
    )


def test_without_the_flag_nothing_is_clamped(
    own_redis: RedisProcess, replica: RedisProcess
) -> None:
    assert replica.process is not None
    pid = replica.process.pid

    async def body(partitions: Partitions, replication: Replication) -> None:
        assert partitions.durable is None and not partitions.durable_reads
        config = await partitions.topics.topic("plain")
        os.kill(pid, signal.SIGSTOP)
        try:
            await partitions.produce(config, 0, [(b"k", b"a")])
            assert len((await partitions.consume(config, 0, 0, 100)).records) == 1
        finally:
            os.kill(pid, signal.SIGCONT)

    asyncio.run(
        run_with(own_redis.url, body, acks_timeout_ms=300, run_replicator=False, defaults=RF1)
    )


def test_kafka_commits_wait_for_the_replica(
    own_redis: RedisProcess, replica: RedisProcess, topic: str
) -> None:
    """Kafka OffsetCommit with the flag: REQUEST_TIMED_OUT (retriable) while the replica's
    link is cut, NONE once it is back, and OffsetFetch then shows the committed offset."""
    assert replica.process is not None
    pid = replica.process.pid
    pod = Pod(own_redis.url, "--redis-wait-replicas", "1", "--acks-timeout-ms", "500").start()
    client = pod.client()
    try:
        client.produce(topic, "k", "v")  # the topic, made on first use
        assert commit_offsets(pod, "billing", topic, {0: 1}) == [errors.NONE]
        os.kill(pid, signal.SIGSTOP)
        try:
            assert commit_offsets(pod, "billing", topic, {0: 5}) == [errors.REQUEST_TIMED_OUT]
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: commit_offsets(pod, "billing", topic, {0: 7}) == [errors.NONE])
        (answered,) = fetch_offsets(pod, "billing", topic, [0], OFFSET_FETCH.max_version)
        assert answered.committed_offset == 7 and answered.error_code == errors.NONE
    finally:
        client.close()
        pod.stop()


def _kafka_join(raw: RawKafka, group: str, topic: str, member_id: str) -> tuple[int, str, int]:
    """A raw JoinGroup v3 (no MEMBER_ID_REQUIRED): (error, member id, generation)."""
    request = JOIN_GROUP.request[3]
    protocol = request.JoinGroupRequestProtocol(name="range", metadata=subscription(topic))
    body = request(group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=3000,
                   member_id=member_id, protocol_type="consumer", protocols=[protocol])  # fmt: skip
    reply = raw.call(JOIN_GROUP, 3, body)
    return reply.error_code, reply.member_id, reply.generation_id


def _kafka_sync(raw: RawKafka, group: str, member_id: str, generation: int) -> tuple[int, bytes]:
    request = SYNC_GROUP.request[3]
    share = request.SyncGroupRequestAssignment(member_id=member_id, assignment=b"mine")
    body = request(group_id=group, generation_id=generation, member_id=member_id,
                   group_instance_id=None, assignments=[share])  # fmt: skip
    reply = raw.call(SYNC_GROUP, 3, body)
    return reply.error_code, bytes(reply.assignment or b"")


def test_group_state_changes_wait_for_the_replica(
    own_redis: RedisProcess, replica: RedisProcess, topic: str
) -> None:
    """With the flag, V1 JOIN/SYNC and Kafka JoinGroup/SyncGroup answer only after a WAIT
    round: REPLICATION_TIMEOUT (V1) and COORDINATOR_NOT_AVAILABLE (Kafka, retriable) while the
    replica's link is cut, success once it is back."""
    assert replica.process is not None
    pid = replica.process.pid
    pod = Pod(own_redis.url, "--redis-wait-replicas", "1", "--acks-timeout-ms", "500").start()
    client = pod.client()
    raw = RawKafka(pod.kafka_port)
    try:
        client.produce(topic, "k", "v")  # the topic, made on first use
        os.kill(pid, signal.SIGSTOP)
        try:
            response = client.request("JOIN", f"billing {topic} c1")
            assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
        finally:
            os.kill(pid, signal.SIGCONT)
        member = client.join("billing", topic, "c1")
        os.kill(pid, signal.SIGSTOP)
        try:
            response = client.request("SYNC", f"billing {topic} c1 {member.generation}")
            assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
        finally:
            os.kill(pid, signal.SIGCONT)
        response = client.request("SYNC", f"billing {topic} c1 {member.generation}")
        assert response.ok, response

        code, member_id, generation = _kafka_join(raw, "kbilling", topic, "")
        assert code == errors.NONE
        os.kill(pid, signal.SIGSTOP)
        try:
            code, _ = _kafka_sync(raw, "kbilling", member_id, generation)
            assert code == errors.COORDINATOR_NOT_AVAILABLE
            code, _, _ = _kafka_join(raw, "kbilling", topic, member_id)
            assert code == errors.COORDINATOR_NOT_AVAILABLE
        finally:
            os.kill(pid, signal.SIGCONT)
        code, member_id, generation = _kafka_join(raw, "kbilling", topic, member_id)
        assert code == errors.NONE
        assert _kafka_sync(raw, "kbilling", member_id, generation) == (errors.NONE, b"mine")
    finally:
        raw.close()
        client.close()
        pod.stop()


def test_spark_end_positions_stop_at_durable_hw(own_redis: RedisProcess) -> None:
    from spark_connector import offsets
    from spark_connector.options import parse_options

    keys = Keys("w")
    with redis.Redis(port=own_redis.port) as client:
        client.hset(keys.partition("t", 0).state, mapping={"hw": 5, "durable_hw": 3})
        client.hset(keys.partition("t", 1).state, mapping={"hw": 5})
        assert offsets.end_positions(client, keys, "t", 2) == {0: 6, 1: 6}
        assert offsets.end_positions(client, keys, "t", 2, durable=True) == {0: 4, 1: 0}
    opts = parse_options({"redis.url": own_redis.url, "topic": "t", "durableReads": "true"})
    assert opts.durable_reads


def test_committed_offsets_are_served_only_once_the_replica_has_them(
    own_redis: RedisProcess, replica: RedisProcess, topic: str
) -> None:
    """With the flag, no reader serves a committed offset the Redis replica lacks (a failover
    would take it back: mapping/replication/durable_reads.py): while the replica's link is cut, a
    commit
    the replica lacks is not answered by OffsetFetch (COORDINATOR_LOAD_IN_PROGRESS, retried by
    clients), V1 OFFSET (REPLICATION_TIMEOUT), ``group describe``, ``inspect``, the metrics
    scrape or the Spark source; once the link is back all of them serve it."""
    from click.testing import CliRunner

    from adapter.cli import main
    from mapping.operations import inspection, metrics_snapshot
    from spark_connector import offsets

    assert replica.process is not None
    pid = replica.process.pid
    pod = Pod(own_redis.url, "--redis-wait-replicas", "1", "--acks-timeout-ms", "500").start()
    client = pod.client()
    keys = Keys(DEFAULT_PREFIX)
    cli = ["--redis-url", own_redis.url]
    sync = redis.Redis(port=own_redis.port)
    try:
        client.produce(topic, "k", "v")  # the topic, made on first use
        assert commit_offsets(pod, "billing", topic, {0: 3}) == [errors.NONE]
        assert fetch_offsets_answer(pod, "billing", topic, 0) == (errors.NONE, 3)
        os.kill(pid, signal.SIGSTOP)
        try:
            # stored on the primary, not on the replica: answered by nobody
            assert commit_offsets(pod, "billing", topic, {0: 5}) == [errors.REQUEST_TIMED_OUT]
            assert fetch_offsets_answer(pod, "billing", topic, 0)[0] == (
                errors.COORDINATOR_LOAD_IN_PROGRESS
            )
            (v1_answer,) = fetch_offsets(pod, "billing", topic, [0], 1)  # v1: on the partition
            assert v1_answer.error_code == errors.COORDINATOR_LOAD_IN_PROGRESS
            response = client.request("OFFSET", f"billing {topic} 0")
            assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
            described = CliRunner().invoke(main, ["group", "describe", "billing", *cli])
            assert described.exit_code != 0 and "redis replicas" in described.output
            with pytest.raises(BrokerError, match="redis replicas"):
                inspection.committed_offsets(sync, keys, "billing", topic)
            with pytest.raises(BrokerError, match="redis replicas"):
                offsets.group_positions(sync, keys, "billing", topic, 1)
            with pytest.raises(BrokerError, match="redis replicas"):
                metrics_snapshot.read(sync, keys, 10_000)
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: fetch_offsets_answer(pod, "billing", topic, 0) == (errors.NONE, 5))
        assert client.request("OFFSET", f"billing {topic} 0").payload == "offset=5"
        described = CliRunner().invoke(main, ["group", "describe", "billing", *cli])
        assert described.exit_code == 0, described.output
        assert inspection.committed_offsets(sync, keys, "billing", topic) == {0: 5}
        assert offsets.group_positions(sync, keys, "billing", topic, 1) == {0: 5}
        lags = metrics_snapshot.read(sync, keys, 10_000).lags
        assert [(g.group, g.committed) for g in lags if (g.topic, g.partition) == (topic, 0)] == [
            ("billing", 5)
        ]
    finally:
        sync.close()
        client.close()
        pod.stop()


def test_without_the_flag_readers_do_not_wait(
    own_redis: RedisProcess, replica: RedisProcess, topic: str
) -> None:
    """A pod without the flag stores 0 for the readers outside pods: they read committed
    offsets without a WAIT, a stopped replica or not."""
    from mapping.operations import inspection

    assert replica.process is not None
    pod = Pod(own_redis.url).start()
    client = pod.client()
    sync = redis.Redis(port=own_redis.port)
    try:
        client.produce(topic, "k", "v")
        assert commit_offsets(pod, "billing", topic, {0: 4}) == [errors.NONE]
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            keys = Keys(DEFAULT_PREFIX)
            assert inspection.committed_offsets(sync, keys, "billing", topic) == {0: 4}
            assert client.request("OFFSET", f"billing {topic} 0").payload == "offset=4"
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
    finally:
        sync.close()
        client.close()
        pod.stop()
