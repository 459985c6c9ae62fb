"""Replication over TCP: acks=all, the high watermark, the replicator and its leases, roles,
REPLICA_FETCH errors and Redis WAIT. Every test uses its own key prefix, so replicators of
pods started elsewhere on the shared Redis never play its followers."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from adapter.client import Client, RequestFailed
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from tests.support.pods import Pod
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
Start = Callable[..., Pod]


@pytest.fixture
def prefix() -> str:
    return f"r{uuid.uuid4().hex[:10]}"


def create_topic(redis_url: str, prefix: str, topic: str, *options: str) -> str:
    result = CliRunner().invoke(
        main,
        ["topic", "create", topic, "--redis-url", redis_url, "--key-prefix", prefix, *options],
    )
    assert result.exit_code == 0, result.output
    return result.output


def fetch(client: Client, topic: str, partition: int, replica: int, offset: int) -> dict:
    response = client.request("REPLICA_FETCH", f"{topic} {partition} {replica} {offset}")
    assert response.ok, response
    return response.fields()


def test_default_settings_make_a_plain_produce_visible(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(redis_url, "--key-prefix", prefix)
    with pod.client() as client:
        reply = client.produce(topic, "user1", "created")
        # The replicator copies it (woken by the append's notice, not a poll): visible soon.
        records = wait_until(
            lambda: client.consume(topic, reply.partition, 0).records, timeout=10, interval=0.005
        )
        assert records == [(reply.offset, b"created")]


def test_acks_all_with_the_replicator(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(redis_url, "--key-prefix", prefix)
    with pod.client() as client:
        replies = [client.produce(topic, f"k{i}", f"v{i}", acks="all") for i in range(20)]
        for reply in replies:
            assert reply.high_watermark >= reply.offset
        records = client.consume(topic, replies[0].partition, 0).records
        assert (replies[0].offset, b"v0") in records
        acked = fetch(client, topic, replies[0].partition, 1, replies[-1].offset)
        assert acked["isr"] == "[0 1 2]" and acked["under_replicated"] == "false"


def test_acks_all_times_out_without_the_replicator(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(
        redis_url, "--key-prefix", prefix, "--no-replicator", "--acks-timeout-ms", "300"
    )
    with pod.client() as client:
        started = time.monotonic()
        response = client.request("PRODUCE", f"{topic} user1:created acks=all")
        assert (response.code, time.monotonic() - started >= 0.29) == (
            "REPLICATION_TIMEOUT",
            True,
        )
        assert client.ping() == "pong"  # the connection stays usable
        # The record stays in the log, invisible until the followers have it.
        assert client.consume(topic, 2, 0).records == []
        fetch(client, topic, 2, 1, 2**62)
        fetch(client, topic, 2, 2, 2**62)
        assert [v for _, v in client.consume(topic, 2, 0).records] == [b"created"]


def test_records_above_hw_appear_once_replicas_catch_up(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator")
    create_topic(redis_url, prefix, topic, "--partitions", "1")
    with pod.client() as client:
        offsets = [client.produce(topic, f"k{i}", f"v{i}").offset for i in range(3)]
        assert client.consume(topic, 0, 0).records == []
        assert client.produce(topic, "k", "x").high_watermark == -1
        first = fetch(client, topic, 0, 1, offsets[1])
        assert (first["acked_offset"], first["hw"]) == (str(offsets[1]), "-1")
        second = fetch(client, topic, 0, 2, offsets[2])
        assert second["hw"] == str(offsets[1])
        assert [o for o, _ in client.consume(topic, 0, 0).records] == offsets[:2]
        # Past the log end: echoed as sent, clamped for the ISR.
        third = fetch(client, topic, 0, 1, offsets[2] * 2)
        assert third["acked_offset"] == str(offsets[2] * 2)
        fetch(client, topic, 0, 2, offsets[2] * 2)
        consumed = client.consume(topic, 0, 0)
        assert [o for o, _ in consumed.records][:3] == offsets
        assert len(consumed.records) == 4  # the acks=1 record "x" too


def test_min_isr_3_with_one_follower_acking(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    create_topic(
        redis_url, prefix, topic, "--partitions", "1", "--replication-factor", "3",
        "--min-insync-replicas", "3",
    )  # fmt: skip
    pod = start_pod(
        redis_url, "--key-prefix", prefix, "--no-replicator",
        "--acks-timeout-ms", "1000", "--replica-lag-max-ms", "200",
    )  # fmt: skip

    def produce_while_fetching(replicas: list[int]) -> str:
        with concurrent.futures.ThreadPoolExecutor(1) as pool, pod.client() as follower:
            with pod.client() as producer:
                sent = pool.submit(producer.request, "PRODUCE", f"{topic} k:v acks=all")
                while not sent.done():  # a follower driving REPLICA_FETCH by hand
                    for r in replicas:
                        fetch(follower, topic, 0, r, 2**62)
                    time.sleep(0.02)  # paces the hand-driven follower's fetches
                response = sent.result()
                return response.code if not response.ok else "OK"

    assert produce_while_fetching([1]) == "REPLICATION_TIMEOUT"
    with pod.client() as client:
        assert fetch(client, topic, 0, 1, 2**62)["isr"] == "[0 1]"
    assert produce_while_fetching([1, 2]) == "OK"


def test_replica_fetch_errors_keep_the_connection(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator")
    create_topic(redis_url, prefix, topic, "--partitions", "2")
    follower = f"{topic}-f"
    create_topic(redis_url, prefix, follower, "--partitions", "1")
    with pod.client() as client:
        assert client.request("SET_PARTITION_ROLE", f"{follower} 0 follower").ok
        requests = [
            (f"{topic} 0 0 1", "invalid replica id"),
            (f"{topic} 0 3 1", "invalid replica id"),
            (f"{topic} 0 -1 1", "invalid replica id"),
            (f"{topic} 0 x 1", "invalid replica id"),
            (f"{topic} 2 1 1", "invalid partition"),
            (f"{topic} -1 1 1", "invalid partition"),
            (f"{topic} y 1 1", "invalid partition"),
            (f"{topic} 0 1 z", "invalid offset"),
            (f"{topic} 0 1 -2", "invalid offset"),
            (f"{topic} 0 1 {2**63}", "invalid offset"),
            (f"{topic} 0 1", "REPLICA_FETCH requires: <topic> <partition> <replica_id> <offset>"),
            (f"{topic} 0 1 1 1", "REPLICA_FETCH requires: <topic> <partition> <replica_id> "
             "<offset>"),
            ("bad{name} 0 1 1", "invalid topic: must be 1-249 characters of [A-Za-z0-9._-]"),
            (f"{follower} 0 1 1", "partition is not leader"),
        ]  # fmt: skip
        responses = client.pipeline(
            [("REPLICA_FETCH", args) for args, _ in requests] + [("PING", "")]
        )
        for (args, message), response in zip(requests, responses, strict=False):
            assert (response.code, response.message) == ("BAD_REQUEST", message), args
        assert responses[-1].payload == "pong"
        ok = fetch(client, topic, 1, 2, 5)
        assert ok == {
            "replica": "2",
            "acked_offset": "5",
            "hw": "-1",
            "isr": "[0 1 2]",
            "under_replicated": "false",
        }


def test_partition_role_is_shared_by_every_pod(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    create_topic(redis_url, prefix, topic, "--partitions", "1")
    a = start_pod(redis_url, "--key-prefix", prefix)
    b = start_pod(redis_url, "--key-prefix", prefix)
    with a.client() as ca, b.client() as cb:
        assert ca.produce(topic, "k", "v", acks="all").partition == 0
        role = ca.request("SET_PARTITION_ROLE", f"{topic} 0 follower")
        assert role.payload.startswith(f"topic={topic} partition=0 role=follower hw=")
        refused = cb.request("PRODUCE", f"{topic} k:v")
        assert (refused.code, refused.message) == ("NOT_LEADER", "partition is a follower")
        not_leader = cb.request("REPLICA_FETCH", f"{topic} 0 1 0")
        assert not_leader.message == "partition is not leader"
        assert cb.request("SET_PARTITION_ROLE", f"{topic} 0 leader").ok
        # Leader again: the replicator is woken and acks=all works at once.
        assert ca.produce(topic, "k", "w", acks="all").high_watermark > 0


def test_replicator_owner_killed_another_pod_takes_over(
    own_redis: RedisProcess, start_pod: Start, topic: str
) -> None:
    # --replica-lag-max-ms 600: lease 300 ms (half of it), renewed every 100 ms.
    args = ("--replica-lag-max-ms", "600", "--acks-timeout-ms", "3000")
    a = start_pod(own_redis.url, *args)
    admin = redis.Redis.from_url(own_redis.url, decode_responses=True)
    keys = Keys().replicator_leases(16)
    wait_until(lambda: all(admin.get(k) for k in keys[1:]), timeout=5)
    b = start_pod(own_redis.url, *args)

    def owners() -> dict[str, int]:
        counts: dict[str, int] = {}
        for key in keys[1:]:
            owner = admin.get(key)
            if owner:
                pid = int(owner.split("-")[-2])
                counts[pid] = counts.get(pid, 0) + 1
        return counts

    # The shards are shared out: 8 each.
    wait_until(lambda: owners() == {a.process.pid: 8, b.process.pid: 8}, timeout=5)
    with b.client() as client:
        assert client.produce(topic, "k", "v", acks="all").high_watermark >= 0
    # A's leases are short (at most the 300 ms lease, renewed by its ticks), so once it is
    # dead they run out within the lease time and B's next ticks take them: no timer, no
    # hand-over message (asserted on the leases, not on the clock).
    a_leases = [k for k in keys[1:] if int(admin.get(k).split("-")[-2]) == a.process.pid]
    assert all(0 < admin.pttl(k) <= 300 for k in a_leases)
    a.kill()
    wait_until(lambda: owners() == {b.process.pid: 16}, timeout=5, interval=0.01)
    with b.client() as client:
        for i in range(12):  # keys over every partition
            reply = client.produce(topic, f"key{i}", "v", acks="all")
            assert reply.high_watermark >= reply.offset
    admin.close()


def test_topic_cli_create_and_describe(redis_url: str, prefix: str, topic: str) -> None:
    output = create_topic(
        redis_url, prefix, topic, "--partitions", "2", "--replication-factor", "2",
        "--min-insync-replicas", "2",
    )  # fmt: skip
    assert output.startswith(f"created topic={topic} partitions=2 replication_factor=2")
    again = create_topic(
        redis_url, prefix, topic, "--partitions", "2", "--replication-factor", "2",
        "--min-insync-replicas", "2",
    )  # fmt: skip
    assert again.startswith("exists")
    runner = CliRunner()
    base = ["--redis-url", redis_url, "--key-prefix", prefix]
    clash = runner.invoke(main, ["topic", "create", topic, "--partitions", "3", *base])
    assert clash.exit_code != 0 and "exists with other settings" in clash.output
    bad = runner.invoke(
        main, ["topic", "create", f"{topic}x", "--replication-factor", "2",
               "--min-insync-replicas", "3", *base],
    )  # fmt: skip
    assert bad.exit_code != 0
    described = runner.invoke(main, ["topic", "describe", topic, *base])
    assert described.exit_code == 0, described.output
    lines = described.output.splitlines()
    assert lines[0] == (
        f"topic={topic} partitions=2 replication_factor=2 min_insync_replicas=2 "
        "retention_ms=-1 retention_bytes=-1 retention_ignore_groups=false"
    )
    assert lines[1].startswith("partition=0 role=leader last_offset=-1 log_end_offset=0 hw=-1")


def test_min_isr_default_is_capped_at_the_replication_factor(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    pod = start_pod(redis_url, "--key-prefix", prefix, "--default-replication-factor", "1")
    with pod.client() as client:
        reply = client.produce(topic, "k", "v", acks="all")  # min ISR 2 > RF 1: capped to 1
        assert reply.high_watermark == reply.offset


def test_topic_settings_are_used_by_pods(
    redis_url: str, start_pod: Start, prefix: str, topic: str
) -> None:
    create_topic(redis_url, prefix, topic, "--partitions", "1", "--replication-factor", "1",
                 "--min-insync-replicas", "1")  # fmt: skip
    pod = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator")
    with pod.client() as client:
        reply = client.produce(topic, "k", "v", acks="all")
        assert reply.high_watermark == reply.offset
        replica = client.request("REPLICA_FETCH", f"{topic} 0 1 0")
        assert replica.message == "invalid replica id"  # RF 1: no followers


def test_redis_wait_for_a_redis_replica(
    own_redis: RedisProcess, start_pod: Start, tmp_path: Path, topic: str
) -> None:
    replica = RedisProcess(
        tmp_path / "replica",
        appendonly=False,
        extra_args=["--replicaof", "127.0.0.1", str(own_redis.port)],
    ).start()
    try:
        admin = redis.Redis(port=replica.port)
        wait_until(lambda: admin.info("replication")["master_link_status"] == "up", timeout=10)
        admin.close()
        one = start_pod(own_redis.url, "--redis-wait-replicas", "1")
        two = start_pod(own_redis.url, "--redis-wait-replicas", "2", "--acks-timeout-ms", "300")
        with one.client() as client:
            reply = client.produce(topic, "k", "durable", acks="all")
        with redis.Redis(port=replica.port) as copy:
            key = Keys().partition(topic, reply.partition).log
            assert copy.xlen(key) >= 1  # on the Redis replica before acks=all answered
        with two.client() as client:
            with pytest.raises(RequestFailed) as failed:
                client.produce(topic, "k", "v", acks="all")
            assert failed.value.code == "REPLICATION_TIMEOUT"
            assert client.produce(topic, "k", "v", acks="1").offset > 0
    finally:
        replica.stop()
