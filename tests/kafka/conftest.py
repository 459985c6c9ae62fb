"""Two pods on one Redis (single-replica topics, so records are visible at once): tests
produce through one and fetch through the other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import Pod

SINGLE_REPLICA = ("--default-replication-factor", "1", "--default-min-insync-replicas", "1")
# The two pods' own key prefix: their broker registry lists only them (a pod another test
# kills with the default prefix stays registered until its TTL runs out).
PREFIX = "kafkatests"


@pytest.fixture(scope="session")
def kafka_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    args = (*SINGLE_REPLICA, "--kafka-max-message-bytes", str(4 << 20), "--key-prefix", PREFIX)
    pods = [Pod(redis_url, *args) for _ in range(2)]
    for pod in pods:
        pod.start()
    # (log files are per port and appended to: only this run's part counts)
    starts = [len(pod.log()) for pod in pods]
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()
    # every request the tests sent (fuzzed ones included) was answered by its API module:
    # none fell back to the "request failed" answer
    for pod, start in zip(pods, starts, strict=True):
        assert "request failed" not in pod.log()[start:], pod.log_path
