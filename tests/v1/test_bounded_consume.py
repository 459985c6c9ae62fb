"""CONSUME's byte limit holds where the data is read: a pod pipelining CONSUMEs over large
values holds about ``--consume-max-bytes`` per call, not every record a page could count."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from mapping.core.keys import Keys
from tests.support.pods import RF1, Pod

StartPod = Callable[..., Pod]

LARGE_VALUE = b"x" * (512 << 10)
RECORDS = 100  # 50 MiB in one partition: one uncut page of them is 50 MiB
PIPELINED = 8


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture
def large_partition(redis_url: str, topic: str) -> Iterator[str]:
    """The topic; its logs are deleted afterwards (they would hold 50 MiB of the shared Redis)."""
    yield topic
    client = redis.Redis.from_url(redis_url)
    try:
        client.delete(*(Keys().partition(topic, p).log for p in range(3)))
    finally:
        client.close()


def test_pipelined_consumes_of_large_values_hold_about_the_byte_limit(
    start_pod: StartPod, redis_url: str, large_partition: str
) -> None:
    topic = large_partition
    pod = start_pod(redis_url, *RF1)  # --consume-max-bytes: the default, 1 MiB
    assert pod.process is not None
    with pod.client(timeout=120) as client:
        # A few at a time, so that producing does not set the pod's peak memory itself.
        sent = [
            reply
            for _ in range(RECORDS // 4)
            for reply in client.produce_many(topic, [("user1", LARGE_VALUE)] * 4)
        ]
        partition = sent[0].partition
        # Peak resident memory so far (startup, the produces) is the baseline.
        baseline_kib = _status_kib(pod.process.pid, "VmHWM")
        request = ("CONSUME", f"{topic} {partition} 0")
        # The first read of the partition: hw and the size marks, then a native XRANGE
        # counted from them.
        first_reads = client.pipeline([request] * PIPELINED)
        # Now the pod knows the marks: both in one pipeline.
        known_reads = client.pipeline([request] * PIPELINED)
    first = f"{sent[0].offset}:{LARGE_VALUE.decode()}"
    for reply in [*first_reads, *known_reads]:
        assert reply.ok, reply
        records = reply.fields()["messages"].split(",")
        # 512 KiB each: two reach the 1 MiB limit exactly (the marks say "at most 512 KiB").
        assert len(records) == 2 and records[0] == first
    grown_mib = (_status_kib(pod.process.pid, "VmHWM") - baseline_kib) >> 10
    print(f"pod peak RSS grew by {grown_mib} MiB over {2 * PIPELINED} pipelined CONSUMEs")
    # Reading every record of a page would hold 8 x 50 MiB; a page of the limit holds ~8 MiB
    # (and its escaped reply lines).
    assert grown_mib < 64
