"""--redis-wait-replicas on Redis Cluster (issue 26): WAIT runs on the node that took the
write (a probe key hash-tagged onto it), so one node's lagging replica holds back the acks and
readers of that node's partitions only, and commits (which wait for every primary)."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from adapter.client import Client
from mapping.keys import DEFAULT_PREFIX, Keys
from mapping.partitioner import partition_for
from tests.deploy.conftest import LoopbackCluster
from tests.support import Pod, wait_until

PARTITIONS = 3  # V1's default for a topic made on first use


def _key_for(partition: int) -> str:
    return next(
        key
        for key in (f"k{i}" for i in range(1000))
        if partition_for(key.encode(), PARTITIONS) == partition
    )


def _values(client: Client, topic: str, partition: int) -> set[bytes]:
    return {value for _, value in client.consume(topic, partition, 0).records}


@pytest.mark.slow
def test_wait_runs_on_the_node_that_took_the_write(failover_cluster: LoopbackCluster) -> None:
    topic = f"c-{uuid.uuid4().hex[:10]}"
    keys = Keys(DEFAULT_PREFIX)
    pod = Pod(
        failover_cluster.url, "--redis-wait-replicas", "1", "--acks-timeout-ms", "800"
    ).start()
    client = pod.client()
    try:
        for p in range(PARTITIONS):
            reply = client.produce(topic, _key_for(p), f"ok-{p}", acks="all")
            assert reply.partition == p
        assert all(_values(client, topic, p) == {f"ok-{p}".encode()} for p in range(PARTITIONS))
        member = client.join("billing", topic, "c1")
        client.commit("billing", topic, "c1", member.generation, 0, 1)

        primary = failover_cluster.primary_of(keys.partition(topic, 0).state)
        replica = failover_cluster.replica_of(primary)
        others = [
            p
            for p in range(1, PARTITIONS)
            if failover_cluster.primary_of(keys.partition(topic, p).state) is not primary
        ]
        assert replica.process is not None
        os.kill(replica.process.pid, signal.SIGSTOP)  # partition 0's node loses its replica
        try:
            response = client.request("PRODUCE", f"{topic} {_key_for(0)}:cut acks=all")
            assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
            assert b"cut" not in _values(client, topic, 0)  # not served either
            for p in others:  # other nodes' partitions go on
                start = time.monotonic()
                client.produce(topic, _key_for(p), f"more-{p}", acks="all")
                assert time.monotonic() - start < 0.7
                wait_until(lambda p=p: f"more-{p}".encode() in _values(client, topic, p))  # type: ignore[misc]
            response = client.request("COMMIT", f"billing {topic} c1 {member.generation} 0 2")
            assert not response.ok and response.code == "REPLICATION_TIMEOUT", response
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        wait_until(lambda: b"cut" in _values(client, topic, 0))
        client.commit("billing", topic, "c1", member.generation, 0, 3)
        assert client.committed("billing", topic, 0) == 3
    finally:
        client.close()
        pod.stop()
