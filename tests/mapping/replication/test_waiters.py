"""acks=all waiting in-process: no polling, a few Redis calls whatever the number of waiters,
and Redis WAIT."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import redis

from adapter.pod import build_pod
from adapter.settings import Settings
from adapter.v1.handlers.acks import check, start_ack
from mapping.connection.client import connect
from mapping.connection.embedded import RedisProcess
from mapping.core.errors import BrokerError
from mapping.partition.partition_scripts import LATEST_OFFSET
from mapping.partition.partitions import Partitions
from mapping.replication.pod_replication import Replication
from mapping.topic.topic_config import TopicConfig, TopicDefaults
from tests.support.waiting import wait_until, wait_until_async


def commands_processed(url: str) -> int:
    """Every command Redis ran (those inside scripts too)."""
    with redis.Redis.from_url(url) as admin:
        return int(admin.info("stats")["total_commands_processed"])


def script_calls(url: str) -> int:
    with redis.Redis.from_url(url) as admin:
        return int(admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


REPLICATED = TopicDefaults(1, 3, 2)  # one partition, RF 3, min ISR 2


async def run_with(
    url: str,
    body,  # noqa: ANN001
    *,
    acks_timeout_ms: int,
    run_replicator: bool = True,
    redis_wait_replicas: int = 0,
    lag_ms: int = 60_000,
    defaults: TopicDefaults = REPLICATED,
) -> None:
    """``body(partitions, replication)`` on an in-process pod (adapter/pod.py) on ``url``."""
    settings = Settings(
        key_prefix="w",
        acks_timeout_ms=acks_timeout_ms,
        replicator=run_replicator,
        redis_wait_replicas=redis_wait_replicas,
        replica_lag_max_ms=lag_ms,
        topic_defaults=defaults,
        # the transaction completer's periodic lease renewal is not a waiter's polling
        transaction_check_interval_ms=0,
    )
    client = connect(url)
    pod = build_pod(settings, client, pod_id="test-pod")
    running = asyncio.create_task(pod.run())
    try:
        await body(pod.partitions, pod.replication)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()


async def wait_for_ack(
    replication: Replication, config: TopicConfig, partition: int, offset: int
) -> int:
    """A V1 acks=all wait: the hw once acknowledged, else V1's BrokerError."""
    ack = await replication.acks.await_ack(config, partition, offset)
    check(ack)
    return ack.high_watermark


def test_a_thousand_waiters_cost_a_handful_of_calls(own_redis: RedisProcess) -> None:
    async def body(partitions: Partitions, replication: Replication) -> None:
        config = await partitions.topics.topic("many")
        produced = await asyncio.gather(
            *(partitions.produce(config, 0, [(b"k", b"v%d" % i)]) for i in range(1000))
        )
        offsets = [r.offsets[0] for r in produced]
        waiters = [asyncio.ensure_future(wait_for_ack(replication, config, 0, o)) for o in offsets]
        # subscribed, with the partition's hw and ISR read once
        channels = replication.acks.waits._channels
        await wait_until_async(lambda: getattr(channels.get(("many", 0)), "known", 0))
        before = commands_processed(own_redis.url)
        await asyncio.sleep(1.0)  # the window watched for polling (what is under test)
        idle = commands_processed(own_redis.url) - before - 1  # the INFO itself
        assert idle <= 2, idle  # no polling while waiting
        assert not any(w.done() for w in waiters)
        before = script_calls(own_redis.url)
        await partitions.replica_fetch(config, 0, 1, LATEST_OFFSET)
        await partitions.replica_fetch(config, 0, 2, LATEST_OFFSET)
        hws = await asyncio.gather(*waiters)
        assert all(hw >= o for hw, o in zip(hws, offsets, strict=True))
        # The 2 fetches (the first one also answered NOSCRIPT once), nothing per waiter.
        assert script_calls(own_redis.url) - before <= 3
        # Later waiters on the same partition are answered from what the pod already knows.
        more = await partitions.produce(config, 0, [(b"k", b"late")])
        waiter = asyncio.ensure_future(wait_for_ack(replication, config, 0, more.offsets[0]))
        await asyncio.sleep(0)  # the waiter registers itself (one turn of the loop)
        await partitions.replica_fetch(config, 0, 1, LATEST_OFFSET)
        await partitions.replica_fetch(config, 0, 2, LATEST_OFFSET)
        assert await waiter >= more.offsets[0]

    asyncio.run(run_with(own_redis.url, body, acks_timeout_ms=5000, run_replicator=False))


def test_waiters_time_out_and_isr_shrink_is_noticed(own_redis: RedisProcess) -> None:
    async def body(partitions: Partitions, replication: Replication) -> None:
        config = await partitions.topics.topic("shrink")
        first = await partitions.produce(config, 0, [(b"k", b"a")])
        with pytest.raises(BrokerError) as failed:
            await wait_for_ack(replication, config, 0, first.offsets[0])
        assert failed.value.code == "REPLICATION_TIMEOUT"
        # Replica 1 has everything, replica 2 nothing: once replica 2 has lagged longer than
        # 300 ms it leaves the ISR, hw moves with nothing published by a fetch or produce:
        # the waiter's timed re-check sees it.
        await partitions.replica_fetch(config, 0, 1, LATEST_OFFSET)
        second = await partitions.produce(config, 0, [(b"k", b"b")])
        await partitions.replica_fetch(config, 0, 1, LATEST_OFFSET)
        assert await wait_for_ack(replication, config, 0, second.offsets[0]) >= second.offsets[0]

    asyncio.run(
        run_with(own_redis.url, body, acks_timeout_ms=250, run_replicator=False, lag_ms=300)
    )


def test_redis_wait(own_redis: RedisProcess, tmp_path: Path) -> None:
    replica = RedisProcess(
        tmp_path / "replica",
        appendonly=False,
        extra_args=["--replicaof", "127.0.0.1", str(own_redis.port)],
    ).start()
    try:
        with redis.Redis(port=replica.port) as admin:
            wait_until(lambda: admin.info("replication")["master_link_status"] == "up")

        async def body(partitions: Partitions, replication: Replication) -> None:
            config = await partitions.topics.topic("durable")
            results = await asyncio.gather(
                *(partitions.produce(config, 0, [(b"k", b"v%d" % i)]) for i in range(50))
            )
            acks = await asyncio.gather(
                *(wait_for_ack(replication, config, 0, r.offsets[0]) for r in results)
            )
            assert len(acks) == 50
            with redis.Redis(port=replica.port) as copy:
                assert copy.xlen(partitions.keys.partition("durable", 0).log) == 50

        async def two(partitions: Partitions, replication: Replication) -> None:
            config = await partitions.topics.topic("durable2")
            result = await partitions.produce(config, 0, [(b"k", b"v")])
            with pytest.raises(BrokerError) as failed:
                await wait_for_ack(replication, config, 0, result.offsets[0])
            assert failed.value.code == "REPLICATION_TIMEOUT"
            assert "redis replicas" in failed.value.message

        rf1 = TopicDefaults(1, 1, 1)
        options = {"acks_timeout_ms": 500, "run_replicator": False, "defaults": rf1}
        asyncio.run(run_with(own_redis.url, body, redis_wait_replicas=1, **options))
        options["defaults"] = rf1
        asyncio.run(run_with(own_redis.url, two, redis_wait_replicas=2, **options))
    finally:
        replica.stop()


def test_start_ack_answers_from_the_append_when_it_can(own_redis: RedisProcess) -> None:
    """One replica, or an ISR of the leader alone that is enough: the append's own reply
    acknowledges it (no waiter, no subscription). Three replicas with two in sync required:
    it waits for the followers' fetches."""

    async def body(partitions: Partitions, replication: Replication) -> None:
        replicated = await partitions.topics.topic("replicated")  # RF 3, min ISR 2
        pending = start_ack(
            replication.acks, replicated, 0, partitions.start_produce(replicated, 0, [(b"k", b"v")])
        )
        await asyncio.sleep(0.2)  # a while with no fetch: the ack must not come (under test)
        assert not pending.future.done()
        await partitions.replica_fetch(replicated, 0, 1, LATEST_OFFSET)
        await partitions.replica_fetch(replicated, 0, 2, LATEST_OFFSET)
        offset, hw = await pending
        assert hw >= offset >= 0
        assert list(replication.acks.waits._channels) == [("replicated", 0)]

        single, _ = await partitions.topics.create("single", 1, 1, 1)
        offset, hw = await start_ack(
            replication.acks, single, 0, partitions.start_produce(single, 0, [(b"k", b"v")])
        )
        assert hw >= offset >= 0
        # RF 2, min ISR 1: once its follower has lagged past 1 s, the leader alone is the
        # ISR and hw is the log end
        alone, _ = await partitions.topics.create("alone", 1, 2, 1)
        await partitions.produce(alone, 0, [(b"k", b"not copied")])
        await asyncio.sleep(1.1)  # waits out the 1 s replica lag under test
        offset, hw = await start_ack(
            replication.acks, alone, 0, partitions.start_produce(alone, 0, [(b"k", b"v")])
        )
        assert hw >= offset >= 0
        assert list(replication.acks.waits._channels) == [("replicated", 0)]  # no new waiters

    asyncio.run(
        run_with(own_redis.url, body, acks_timeout_ms=5000, run_replicator=False, lag_ms=1000)
    )
