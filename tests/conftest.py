"""Shared fixtures (their machinery is in ``tests/support``): a real Redis over TCP for the
run, Redis servers and clusters of a test's own, adapter pods as child processes, and
certificates."""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from adapter.client import Client
from mapping.connection.embedded import RedisProcess
from tests.support.cluster import LoopbackCluster
from tests.support.kafka import KAFKA_PODS_PREFIX
from tests.support.pods import RF1, Pod, start_all
from tests.support.redis import shared_redis, start_replica
from tests.support.tls import Certs, TLSProxy, make_certs, running_tls_proxy

# Pods started by tests take a free Kafka port unless told one (tests.support.pods.Pod
# passes its own): parallel pods never collide on 9093.
os.environ.setdefault("ADAPTER_KAFKA_PORT", "0")

# A run started in the background by a shell without job control (`make test &`, nohup)
# has SIGINT ignored, and the programs it starts inherit that: the tests that press Ctrl-C
# on a child (topic tail, the README's consumers) would wait for it in vain.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One Redis for the run; tests isolate themselves with unique topic/group names."""
    with shared_redis(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    """A Redis of the test's own (AOF on), for tests that kill or restart it."""
    server = RedisProcess(tmp_path / "redis", appendonly=True)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def replica(own_redis: RedisProcess, tmp_path: Path) -> Iterator[RedisProcess]:
    """A replica of ``own_redis`` (no AOF), its link up; resumed before it is killed, for a
    test that SIGSTOPs it to cut the link."""
    copy = start_replica(own_redis, tmp_path / "replica")
    yield copy
    if copy.process is not None:
        os.kill(copy.process.pid, signal.SIGCONT)
    copy.kill()


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis+cluster://127.0.0.1:<port>``: three primaries (no replicas), the slots in
    three even runs (``LoopbackCluster``), AOF on like a real deployment."""
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (apt-get install redis-tools)")
    cluster = LoopbackCluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield cluster.start().url
    finally:
        cluster.stop()


@pytest.fixture
def failover_cluster(tmp_path: Path) -> Iterator[LoopbackCluster]:
    """A cluster of its own, for a test that kills primaries: three primaries with one
    replica each, and a short node timeout (1 s) so a replica takes over within seconds."""
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed (apt-get install redis-tools)")
    cluster = LoopbackCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=1000)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def start_pod() -> Iterator[Callable[..., Pod]]:
    """``start_pod(redis_url, *serve_args, connect=None)`` -> a running pod, stopped after
    the test (``connect``: how clients reach it, see ``Pod``)."""
    pods: list[Pod] = []

    def start(redis_url: str, *args: str, connect: Callable[[int], Client] | None = None) -> Pod:
        pod = Pod(redis_url, *args, connect=connect)
        pods.append(pod)
        return pod.start()

    yield start
    for pod in pods:
        pod.stop()


@pytest.fixture(scope="session")
def pod(redis_url: str) -> Iterator[Pod]:
    """A pod shared by the run, with single-replica topics so records are visible at once
    (replication has its own tests)."""
    shared = Pod(redis_url, *RF1)
    shared.start()
    yield shared
    shared.stop()


@pytest.fixture(scope="session")
def kafka_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    """Two pods on one Redis (single-replica topics, so records are visible at once): tests
    produce through one and fetch through the other."""
    args = (*RF1, "--kafka-max-message-bytes", str(4 << 20), "--key-prefix", KAFKA_PODS_PREFIX)
    pods = [Pod(redis_url, *args) for _ in range(2)]
    start_all(pods)
    # (log files are per port and appended to: only this run's part counts)
    starts = [len(pod.log()) for pod in pods]
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()
    # every request the tests sent (fuzzed ones included) was answered by its API module:
    # none fell back to the "request failed" answer
    for pod, start in zip(pods, starts, strict=True):
        assert "request failed" not in pod.log()[start:], pod.log_path


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A throw-away certificate authority's server, client and rogue certificates."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def tls_proxy(own_redis: RedisProcess, certs: Certs) -> Iterator[TLSProxy]:
    """rediss:// in front of the test's own redis-server (see ``TLSProxy``)."""
    with running_tls_proxy(certs, own_redis.port) as proxy:
        yield proxy
