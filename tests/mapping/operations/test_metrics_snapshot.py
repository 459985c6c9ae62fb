"""mapping/operations/metrics_snapshot.py on a real Redis: lag in records as `inspect` reads it,
live
members of both protocols, partitions' Kafka offsets, and a cost in round trips that does not
grow with the number of groups (groups at the end of the log read nothing, groups that never
committed share one read)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from mapping.connection import scripts
from mapping.core.keys import Keys, group_part
from mapping.operations import metrics_snapshot
from mapping.operations.inspection import PARTITION_LAG
from mapping.operations.metrics_snapshot import DeploymentSnapshot
from tests.support.topic_writer import TopicWriter

SESSION_MS = 10_000


class Deployment:
    def __init__(self, url: str) -> None:
        self.writer = TopicWriter(url, prefix=f"snap-{uuid.uuid4().hex[:8]}")
        self.keys: Keys = self.writer.keys
        self.client = redis.Redis.from_url(url)

    def close(self) -> None:
        self.writer.close()
        self.client.close()

    def now_ms(self) -> int:
        seconds, micros = self.client.time()
        return seconds * 1000 + micros // 1000

    def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """As the group scripts write it (the documented layout, mapping/core/keys.py)."""
        self.client.sadd(self.keys.groups, f"{group} {topic}")
        self.client.hset(self.keys.group(group, topic).offsets, str(partition), offset)

    def read(self) -> DeploymentSnapshot:
        return metrics_snapshot.read(self.client, self.keys, SESSION_MS)


@pytest.fixture
def deployment(redis_url: str) -> Iterator[Deployment]:
    made = Deployment(redis_url)
    yield made
    made.close()


def test_lag_offsets_and_members(deployment: Deployment) -> None:
    keys = deployment.keys
    offsets = deployment.writer.produce("orders", 2, [(b"k", b"v%d" % i) for i in range(10)])
    deployment.commit("billing", "orders", 2, offsets[4])
    now = deployment.now_ms()
    v1_members = keys.group("billing", "orders").members
    deployment.client.hset(v1_members, mapping={"c1": now, "gone": now - 60_000})
    # a Kafka group with one member whose session runs and one whose session ran out
    deployment.client.sadd(keys.kafka_groups, group_part("kafka group"))
    kafka_members = keys.kafka_group("kafka group").members
    deployment.client.hset(kafka_members, mapping={"m1": now + 30_000, "m2": now - 1})

    snapshot = deployment.read()

    lags = {(one.group, one.partition): one for one in snapshot.lags}
    assert (lags[("billing", 2)].lag, lags[("billing", 2)].committed) == (6, offsets[4])
    assert (lags[("billing", 0)].lag, lags[("billing", 0)].committed) == (0, None)
    assert all(one.exact for one in snapshot.lags)
    assert snapshot.members == {"billing": 1, "kafka group": 1}
    assert snapshot.partition_counts == {"orders": 3}
    by_partition = {p.partition: p for p in snapshot.partitions}
    written, empty = by_partition[2], by_partition[0]
    assert (written.high_watermark, written.log_end) == (offsets[-1], offsets[-1] + 1)
    assert written.log_start == offsets[0]
    assert (empty.high_watermark, empty.log_end, empty.log_start) == (-1, 0, 0)
    assert (written.replicas, written.isr_size, written.dirty) == (1, 1, None)
    assert snapshot.brokers == [] and snapshot.leader("orders", 0) is None


def test_round_trips_do_not_grow_with_groups(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = deployment.writer.produce("orders", 2, [(b"k", b"v")] * 5)
    end = offsets[-1] + 1  # a group here has read everything

    def cost() -> tuple[int, int, DeploymentSnapshot]:
        """(pipelines, partition/lag.lua calls, the snapshot) of one read."""
        sent: list[list[tuple]] = []
        real = scripts.call_many_sync

        def counted(client: redis.Redis, commands: list[tuple]) -> list:
            sent.append(commands)
            return real(client, commands)

        with monkeypatch.context() as patched:
            patched.setattr(scripts, "call_many_sync", counted)
            snapshot = deployment.read()
        lag_calls = sum(1 for pipe in sent for c in pipe if c[:2] == ("EVALSHA", PARTITION_LAG.sha))
        return len(sent), lag_calls, snapshot

    deployment.commit("caught-up-0", "orders", 2, end)
    deployment.commit("never-0", "orders", 0, 0)  # committed elsewhere, not on partition 2
    few_pipelines, few_lag_calls, _ = cost()
    for i in range(1, 41):
        deployment.commit(f"caught-up-{i}", "orders", 2, end)
        deployment.commit(f"never-{i}", "orders", 0, 0)
    many_pipelines, many_lag_calls, snapshot = cost()

    assert many_pipelines == few_pipelines
    # partition 2 read once from 0 for every group that never committed there; partitions
    # 0 and 1 are empty and the caught-up groups are past the high watermark: no read
    assert few_lag_calls == many_lag_calls == 1
    lags = {(one.group, one.partition): one.lag for one in snapshot.lags}
    assert lags[("never-40", 2)] == 5 and lags[("caught-up-40", 2)] == 0
    # groups at distinct positions behind: one read each
    for i in range(3):
        deployment.commit(f"behind-{i}", "orders", 2, offsets[i + 1])
    _, behind_lag_calls, snapshot = cost()
    assert behind_lag_calls == 1 + 3
    lags = {(one.group, one.partition): one.lag for one in snapshot.lags}
    assert [lags[(f"behind-{i}", 2)] for i in range(3)] == [4, 3, 2]
