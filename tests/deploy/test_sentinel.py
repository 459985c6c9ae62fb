"""Redis Sentinel: pods, command lines and the Spark connector find the primary through
sentinels (--redis-sentinel/--redis-sentinel-master, redis.sentinel/redis.sentinelMaster),
and a pod follows a failover without a restart: the primary SIGKILLed, the sentinels promote
its replica, and the same pod serves V1 and Kafka again, acks=all waits wake (its pub/sub
moved to the new primary), the new primary gets the scripts it lacks (NOSCRIPT), and every
record acknowledged and replicated before the kill is still there. A READONLY reply (a pod
still talking to a demoted primary) makes the client ask the sentinels again."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from redis.exceptions import ConnectionError as RedisConnectionError

from adapter.cli import main
from adapter.client import Client
from adapter.kafka import errors as kafka_errors
from adapter.settings import Settings
from mapping.connection.client import connect, make_batcher
from mapping.connection.cluster import connect_sync, redact
from mapping.connection.sentinel import (
    SyncSentinelRedis,
    parse_sentinel_url,
    sentinel_url,
)
from mapping.core.errors import Unavailable
from mapping.core.keys import Keys
from mapping.partition.partition_scripts import PARTITION_CONSUME
from spark_connector import offsets
from spark_connector.options import OptionError, parse_options
from spark_connector.sink_options import parse_sink_options
from tests.deploy.sentinels import DATA_PASSWORD, MASTER, SENTINEL_PASSWORD, SentinelDeployment
from tests.support.kafka import commit_offsets, fetch_offsets_answer, kafka_read_for
from tests.support.pods import Pod
from tests.support.v1 import consume_values

# How long a failover may take until the same pod serves again: detection (down-after 2 s),
# the vote and the promotion take 3-4 s on loopback; the rest is slack for a loaded machine.
FAILOVER_BOUND_S = 20.0


class SentinelPod(Pod):
    """A pod started with the sentinel options instead of --redis-url."""

    def __init__(self, deployment: SentinelDeployment, *args: str) -> None:
        super().__init__(None, *deployment.options, "--log-format", "text", *args)


def _produce_until_ok(client: Client, topic: str, value: str, bound_s: float) -> float:
    """PRODUCE acks=all until it succeeds; the seconds it took."""
    start = time.monotonic()
    while True:
        response = client.request("PRODUCE", f"{topic} k-{value}:{value} acks=all")
        if response.ok:
            return time.monotonic() - start
        assert response.code in ("UNAVAILABLE", "REPLICATION_TIMEOUT"), response
        assert time.monotonic() - start < bound_s, f"no produce within {bound_s}s: {response}"
        time.sleep(0.1)


def _v1_values(client: Client, topic: str, partitions: int) -> set[bytes]:
    values: set[bytes] = set()
    for partition in range(partitions):
        values.update(value for _, value in client.consume(topic, partition, 0).records)
    return values


def _kafka_values(bootstrap: str, topic: str, partitions: int, wanted: set[bytes]) -> set[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    try:
        while not wanted <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


@pytest.mark.slow
def test_a_pod_follows_a_failover_without_a_restart(deployment: SentinelDeployment) -> None:
    """Two failovers (to the replica, then back to the first node, which rejoined as a
    replica), one pod all along."""
    topic = f"t-{uuid.uuid4().hex[:10]}"
    # RF 3 / min ISR 2 (the defaults): acks=all needs the replicator and the hw notifications
    pod = SentinelPod(deployment, "--acks-timeout-ms", "5000").start()
    client = pod.client()
    producer = Producer({"bootstrap.servers": pod.bootstrap, "acks": "all",
                         "message.timeout.ms": 60000})  # fmt: skip
    failed: list[object] = []

    def kafka_produce(values: list[str]) -> set[bytes]:
        for value in values:
            producer.produce(topic, key=value.encode(), value=value.encode(),
                             on_delivery=lambda err, _msg: err and failed.append(err))  # fmt: skip
        assert producer.flush(30) == 0 and not failed, failed
        return {value.encode() for value in values}

    try:
        acked = set()
        for i in range(20):
            client.produce(topic, f"k{i}", f"v1-{i}", acks="all")
            acked.add(f"v1-{i}".encode())
        acked |= kafka_produce([f"kafka-{i}" for i in range(20)])
        assert _v1_values(client, topic, 3) == acked
        member = client.join("billing", topic, "c1")
        client.commit("billing", topic, "c1", member.generation, 0, 12345)
        # acknowledged and on the replica: what survives a failover without
        # --redis-wait-replicas is what had reached the replica (see docs/durability.md)
        deployment.wait_in_sync()
        replica = deployment.data_client(deployment.replica.port)
        # (V1 CONSUME's script: PRODUCE goes through the module's command where Redis loaded
        # it)
        consume_sha = PARTITION_CONSUME.sha
        # SCRIPT LOAD is not replicated: after the failover the pod must load them again
        assert replica.script_exists(consume_sha) == [False]

        deployment.primary.kill()
        took = _produce_until_ok(client, topic, "first", FAILOVER_BOUND_S)
        acked.add(b"first")
        # the pod found the new primary through one sentinel; the others learn of it in turn
        deployment.wait(lambda: deployment.master_port() == deployment.replica.port)
        # acks=all keeps working: each answer comes from an hw notification or a status call,
        # well within the acks timeout
        for i in range(10):
            start = time.monotonic()
            client.produce(topic, f"after{i}", f"after-{i}", acks="all")
            assert time.monotonic() - start < 4.0
            acked.add(f"after-{i}".encode())
        # the pod's one pub/sub connection is on the new primary, subscribed to the pod's
        # home channel and the hw channels of partitions with acks=all waiters
        pubsub = replica.execute_command("CLIENT", "LIST", "TYPE", "pubsub").decode()
        subscribed = [line for line in pubsub.splitlines() if "name=sentinel" not in line]
        channels = [int(line.split(" sub=")[1].split()[0]) for line in subscribed]
        assert channels and max(channels) >= 2, pubsub
        v1_now = _v1_values(client, topic, 3)
        assert acked <= v1_now, acked - v1_now  # nothing acknowledged was lost
        assert replica.script_exists(consume_sha) == [True]
        replica.close()
        assert client.committed("billing", topic, 0) == 12345
        acked |= kafka_produce([f"kafka-after-{i}" for i in range(10)])

        # back to the first node, now a replica of the second
        revive_start = time.monotonic()
        deployment.revive(deployment.primary)
        print(f"revived in {time.monotonic() - revive_start:.1f}s")
        deployment.replica.kill()
        took_back = _produce_until_ok(client, topic, "second", FAILOVER_BOUND_S)
        acked.add(b"second")
        deployment.wait(lambda: deployment.master_port() == deployment.primary.port)
        acked |= kafka_produce([f"kafka-back-{i}" for i in range(10)])
        v1_now = _v1_values(client, topic, 3)
        assert acked <= v1_now, acked - v1_now
        seen = _kafka_values(pod.bootstrap, topic, 3, acked)
        assert acked <= seen, acked - seen
        assert client.committed("billing", topic, 0) == 12345
        member = client.join("billing", topic, "c1")  # its session expired meanwhile
        client.commit("billing", topic, "c1", member.generation, 0, 23456)
        assert client.committed("billing", topic, 0) == 23456
        assert pod.process is not None and pod.process.poll() is None  # never restarted
        print(f"failovers: the same pod served acks=all after {took:.1f}s and {took_back:.1f}s")
    finally:
        client.close()
        pod.stop()


@pytest.mark.slow
def test_command_lines_and_spark_follow_the_sentinels(deployment: SentinelDeployment) -> None:
    args = deployment.options
    created = CliRunner().invoke(main, ["topic", "create", "orders", "--partitions", "2", *args])
    assert created.exit_code == 0 and "created topic=orders" in created.output, created.output
    deployment.wait_in_sync()
    deployment.primary.kill()
    deployment.wait(lambda: deployment.master_port() == deployment.replica.port, FAILOVER_BOUND_S)
    listed = CliRunner().invoke(main, ["inspect", "topics", *args])
    assert "topic=orders partitions=2" in listed.output, listed.output
    # a write after the failover: the sync path loads the scripts the new primary lacks
    created = CliRunner().invoke(main, ["topic", "create", "refunds", *args])
    assert created.exit_code == 0, created.output
    # the async path (topic trim runs on the async Partitions) too
    trimmed = CliRunner().invoke(main, ["topic", "trim", "orders", *args])
    assert trimmed.exit_code == 0, trimmed.output
    # the Spark connector's driver and tasks connect the same way
    opts = parse_options(
        {
            "redis.sentinel": deployment.addresses,
            "redis.sentinelMaster": MASTER,
            "redis.password": DATA_PASSWORD,
            "redis.sentinelPassword": SENTINEL_PASSWORD,
            "topic": "orders",
        }
    )
    client = offsets.connect(opts)
    try:
        assert isinstance(client, SyncSentinelRedis)
        info = offsets.describe_topic(client, Keys(opts.key_prefix), "orders")
        assert info.partitions == 2
    finally:
        client.close()


@pytest.mark.slow
def test_a_readonly_reply_makes_the_client_ask_the_sentinels_again(
    deployment: SentinelDeployment,
) -> None:
    """A pod still connected to a primary that was demoted (no CLIENT KILL reached it) gets
    READONLY: that call fails as unavailable (never a stale success), and the next one asks
    the sentinels, which now name the new primary."""
    url = sentinel_url(deployment.addresses, MASTER)
    login = {"password": DATA_PASSWORD, "sentinel_password": SENTINEL_PASSWORD}
    sync_client = connect_sync(url, socket_timeout=5, **login)
    key = f"ro-{uuid.uuid4().hex[:8]}"

    async def scenario() -> None:
        client = connect(url, 5.0, **login)
        batcher = make_batcher(client)
        flusher = asyncio.ensure_future(batcher.run())
        try:
            assert await batcher.call("SET", key, "before") is True
            assert sync_client.set(key, "before-sync")
            _swap_roles(deployment)
            with pytest.raises(Unavailable, match="previous master is now a slave"):
                await batcher.call("SET", key, "refused")
            assert await batcher.call("SET", key, "after") is True  # on the new primary
        finally:
            flusher.cancel()
            await client.aclose()

    try:
        asyncio.run(scenario())
        with pytest.raises(RedisConnectionError, match="previous master is now a slave"):
            sync_client.set(key, "refused-sync")
        assert sync_client.set(key, "after-sync")
        new_primary = deployment.data_client(deployment.replica.port)
        assert new_primary.get(key) == b"after-sync"
        assert new_primary.role()[0] == b"master"
        new_primary.close()
    finally:
        sync_client.close()


@pytest.mark.slow
def test_nothing_served_or_acknowledged_is_taken_back_by_a_failover(
    deployment: SentinelDeployment,
) -> None:
    """--redis-wait-replicas 1: the replica's link cut (SIGSTOP), acks=all and commits
    meanwhile must not succeed and readers must not see the records the replica lacks; then
    the primary SIGKILLed and the lagging replica promoted. Several times: 0 acknowledged
    records lost, 0 records read that then vanished, and no committed offset answered by V1
    OFFSET or Kafka OffsetFetch ever answered lower afterwards (the commits made during the
    cut are stored on the primary alone: no reader may serve them)."""
    topic = f"d-{uuid.uuid4().hex[:10]}"
    pod = SentinelPod(deployment, "--redis-wait-replicas", "1", "--acks-timeout-ms", "800").start()
    client = pod.client()
    acked: set[bytes] = set()
    read: set[bytes] = set()
    committed = 0  # the highest commit answered OK
    served = {"v1": 0, "kafka": 0}  # the highest committed offset each reader answered

    def observe() -> None:
        """Ask both readers; an answer below one given before fails the test."""
        response = client.request("OFFSET", f"billing {topic} 0")
        if response.ok:
            offset = int(response.payload.removeprefix("offset="))
            assert offset >= served["v1"], f"OFFSET went back: {served['v1']} -> {offset}"
            served["v1"] = offset
        else:
            assert response.code in ("REPLICATION_TIMEOUT", "UNAVAILABLE"), response
        try:
            code, offset = fetch_offsets_answer(pod, "kbilling", topic, 0)
        except OSError:
            return  # the pod is between Redis primaries
        if code == kafka_errors.NONE and offset >= 0:
            assert offset >= served["kafka"], f"OffsetFetch went back: {served} -> {offset}"
            served["kafka"] = offset

    primary, replica = deployment.primary, deployment.replica
    try:
        for run in range(3):
            for i in range(5):
                assert client.request("PRODUCE", f"{topic} k{i}:r{run}-{i} acks=all").ok
                acked.add(f"r{run}-{i}".encode())
            assert acked <= consume_values(client, topic, 3)
            member = client.join("billing", topic, "c1")
            committed += 10
            client.commit("billing", topic, "c1", member.generation, 0, committed)
            assert commit_offsets(pod, "kbilling", topic, {0: committed}) == [kafka_errors.NONE]
            observe()

            assert replica.process is not None
            os.kill(replica.process.pid, signal.SIGSTOP)  # the replica's link is cut
            # more than the sockets' buffers hold: what follows stays in the primary's output
            # buffer, so the killed primary takes it with it
            with deployment.data_client(primary.port) as admin:
                admin.set("filler", b"x" * (32 << 20))
            during: set[bytes] = set()
            try:
                for i in range(2):
                    response = client.request("PRODUCE", f"{topic} x{i}:cut{run}-{i} acks=all")
                    assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
                    during |= consume_values(client, topic, 3)  # a reader meanwhile
                response = client.request(
                    "COMMIT", f"billing {topic} c1 {member.generation} 0 {committed + 5}"
                )
                assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
                cut_commit = commit_offsets(pod, "kbilling", topic, {0: committed + 5})
                assert cut_commit == [kafka_errors.REQUEST_TIMED_OUT]
                observe()  # neither commit may be served: the replica lacks them
                during |= consume_values(client, topic, 3)
                during |= kafka_read_for(pod.bootstrap, topic, 3, 1.5)  # Fetch as well
                assert not any(v.startswith(f"cut{run}".encode()) for v in during), during
                read |= during
                primary.kill()
            finally:
                os.kill(replica.process.pid, signal.SIGCONT)
            deployment.wait(
                lambda promoted=replica.port: deployment.master_port() == promoted,  # type: ignore[misc]
                FAILOVER_BOUND_S,
            )
            # WAIT needs a replica again: the old primary rejoins as one (empty)
            deployment.revive(primary)
            primary, replica = replica, primary
            _produce_until_ok(client, topic, f"after{run}", FAILOVER_BOUND_S)
            acked.add(f"after{run}".encode())
            now = consume_values(client, topic, 3)
            assert acked <= now, acked - now  # 0 acknowledged lost
            assert read <= now, read - now  # 0 phantom reads
            assert client.committed("billing", topic, 0) >= committed  # never backwards
            observe()
            read |= now
            lost = sorted(v for v in now if v.startswith(f"cut{run}".encode()))
            print(f"run {run}: unacknowledged records kept by the promoted replica: {lost}")
        assert pod.process is not None and pod.process.poll() is None
    finally:
        client.close()
        pod.stop()


def _swap_roles(deployment: SentinelDeployment) -> None:
    """Promote the replica and demote the primary by hand, as an operator would, and point
    the sentinels at the new primary: no sentinel reconfigures the old one, so its clients
    stay connected (a real failover kills them) and their next write gets READONLY."""
    new, old = deployment.replica, deployment.primary
    admin_new, admin_old = deployment.data_client(new.port), deployment.data_client(old.port)
    admin_new.execute_command("REPLICAOF", "NO", "ONE")
    admin_old.execute_command("REPLICAOF", "127.0.0.1", str(new.port))
    admin_new.close()
    admin_old.close()
    for sentinel in deployment.sentinels:
        client = sentinel.client()
        client.execute_command("SENTINEL", "REMOVE", MASTER)
        client.execute_command("SENTINEL", "MONITOR", MASTER, "127.0.0.1", new.port, 2)
        client.execute_command("SENTINEL", "SET", MASTER, "auth-pass", DATA_PASSWORD)
        client.close()
    deployment.wait(lambda: deployment.master_port() == new.port)


# Options: no Redis needed.


def test_sentinel_urls() -> None:
    url = sentinel_url("127.0.0.1:26379, [::1]:26380,sentinel-c", "orders-db")
    assert url == "redis+sentinel://127.0.0.1:26379,[::1]:26380,sentinel-c:26379/orders-db"
    target = parse_sentinel_url(url)
    assert target.sentinels == (("127.0.0.1", 26379), ("::1", 26380), ("sentinel-c", 26379))
    assert target.master == "orders-db" and not target.tls
    tls = sentinel_url("rediss://a:1,b:2?ssl_ca_certs=/ca.pem", "m")
    assert tls == "rediss+sentinel://a:1,b:2/m?ssl_ca_certs=/ca.pem"
    assert parse_sentinel_url(tls).tls_files == (("ssl_ca_certs", "/ca.pem"),)
    # the data nodes' login may ride in the URL, and never reaches a log
    assert redact("redis+sentinel://app:s3cret@a:1,b:2/m") == "redis+sentinel://app:***@a:1,b:2/m"
    assert parse_sentinel_url("redis+sentinel://app:s3cret@a:1/m").password == "s3cret"
    for sentinels, master in (("a:x", "m"), ("http://a:1", "m"), (",", "m"), ("a:1", ""),
                              ("a:1?ssl_ca_certs=/ca.pem", "m"), ("a:1?db=2", "m")):  # fmt: skip
        with pytest.raises(ValueError):
            sentinel_url(sentinels, master)


def test_settings_make_the_sentinel_url() -> None:
    settings = Settings(redis_sentinel="a:1,b:2", redis_sentinel_master="m",
                        redis_sentinel_password="pw")  # fmt: skip
    assert settings.redis_url == "redis+sentinel://a:1,b:2/m"
    assert settings.redis_options()["sentinel_password"] == "pw"
    assert dataclasses.replace(settings, metrics_port=1).redis_url == settings.redis_url
    with pytest.raises(ValueError):
        Settings(redis_url="redis://x:1/0", redis_sentinel="a:1", redis_sentinel_master="m")
    with pytest.raises(ValueError):
        Settings(redis_sentinel="a:1")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--redis-sentinel", "a:1"], "needs --redis-sentinel-master"),
        (["--redis-sentinel-master", "m", "--redis-url", "redis://x:1/0"], "need --redis-sentinel"),
        (
            [
                "--redis-sentinel",
                "a:1",
                "--redis-sentinel-master",
                "m",
                "--redis-url",
                "redis://x:1/0",
            ],
            "not both",
        ),  # fmt: skip
        (["--redis-sentinel", "a:port", "--redis-sentinel-master", "m"], "no valid port"),
        ([], "Missing option '--redis-url'"),
    ],
)
def test_cli_refuses_incomplete_sentinel_options(args: list[str], message: str) -> None:
    for command in (["inspect", "topics"], ["serve", "--port", "0"]):
        if command[0] == "serve" and not args:
            continue  # serve without a URL starts an embedded Redis
        result = CliRunner().invoke(main, [*command, *args], env={"ADAPTER_REDIS_URL": ""})
        assert result.exit_code == 2 and message in result.output, (command, result.output)


def test_cli_tls_files_need_a_rediss_sentinel(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not used")
    base = ["inspect", "topics", "--redis-sentinel-master", "m", "--redis-tls-ca", str(ca)]
    plain = CliRunner().invoke(main, [*base, "--redis-sentinel", "a:1"])
    assert plain.exit_code == 2 and "need a rediss://" in plain.output


def test_spark_options_take_sentinels() -> None:
    base = {"topic": "orders", "redis.sentinel": "a:1,b:2", "redis.sentinelMaster": "m"}
    opts = parse_options({**base, "redis.sentinelPassword": "pw", "redis.password": "data"})
    assert opts.redis_url == "redis+sentinel://a:1,b:2/m"
    assert opts.redis_sentinel_password == "pw" and opts.redis_password == "data"
    client = offsets.client_for(opts)  # not connected yet
    assert isinstance(client, SyncSentinelRedis)
    client.close()
    sink = parse_sink_options({**base, "redis.sentinelPassword": "pw"})
    assert sink.connection.redis_url == opts.redis_url
    for bad, message in (
        ({"topic": "orders", "redis.sentinel": "a:1"}, "redis.sentinelMaster"),
        ({**base, "redis.url": "redis://x:1/0"}, "not both"),
        (
            {"topic": "orders", "redis.url": "redis://x:1/0", "redis.sentinelMaster": "m"},
            "need option redis.sentinel",
        ),  # fmt: skip
        ({**base, "redis.sentinel": "a:port"}, "no valid port"),
    ):
        with pytest.raises(OptionError, match=message):
            parse_options(bad)


def test_tls_and_logins_reach_the_right_connections(tmp_path: Path) -> None:
    """rediss+sentinel://: TLS to the sentinels and the data nodes with the same files; the
    data nodes' login and the sentinels' own each go where they belong (no connection is
    made here; the local redis-server has no TLS)."""
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    url = sentinel_url("rediss://127.0.0.1:1,127.0.0.1:2", "m")
    client = connect_sync(url, password="data", sentinel_password="sentinels", ssl_ca_certs=ca)
    try:
        pool = client.connection_pool
        assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
        assert pool.connection_kwargs["password"] == "data"
        assert pool.connection_kwargs["ssl_ca_certs"] == ca
        assert client.sentinel is not None
        for one in client.sentinel.sentinels:
            kwargs = one.connection_pool.connection_kwargs
            assert one.connection_pool.connection_class.__name__ == "SSLConnection"
            assert kwargs["password"] == "sentinels" and kwargs["ssl_ca_certs"] == ca
    finally:
        client.close()
    plain = connect_sync(sentinel_url("127.0.0.1:1", "m"), password="data")
    assert plain.connection_pool.connection_class.__name__ == "SentinelManagedConnection"
    assert plain.sentinel is not None
    assert plain.sentinel.sentinels[0].connection_pool.connection_kwargs.get("password") is None
    plain.close()
