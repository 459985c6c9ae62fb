"""Consumer lag in bounded Redis work: partition/produce.lua numbers each entry, so a group
partition's lag reads two entries however long its backlog (partition/lag.lua), and is
exact; through ``inspection.group`` (what ``inspect`` and the metrics endpoint use)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from mapping.connection import scripts
from mapping.connection.embedded import RedisProcess, free_port
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.operations import inspection
from mapping.partition.partition_scripts import (
    PartitionHead,
    partition_produce_call,
    produced_offsets,
)
from tests.support.pods import RF1, scrape_metrics

BITS = codec.DEFAULT_SEQUENCE_BITS


class Partitions:
    """A topic's partitions written through partition/produce.lua (one replica: hw = log end)."""

    def __init__(self, client: redis.Redis, keys: Keys, topic: str, partitions: int = 1) -> None:
        self.client, self.keys, self.topic = client, keys, topic
        client.hset(keys.topic(topic), mapping={"partitions": partitions})

    def produce(self, partition: int, count: int, value: bytes = b"v") -> list[int]:
        head = PartitionHead(self.keys.partition(self.topic, partition), BITS, 1, 0)
        offsets: list[int] = []
        for start in range(0, count, 10_000):
            items = [p for _ in range(min(10_000, count - start)) for p in (b"k", value)]
            call = scripts.as_eval(partition_produce_call(head, items))
            offsets += produced_offsets(self.client.execute_command(*call))
        return offsets

    def join(self, group: str) -> None:
        """A group that has members but no commit yet."""
        self.client.sadd(self.keys.groups, f"{group} {self.topic}")
        self.client.hset(self.keys.group(group, self.topic).meta, "generation", 1)

    def commit(self, group: str, partition: int, offset: int) -> None:
        """As the group scripts and the Spark connector write it (the documented layout)."""
        self.client.sadd(self.keys.groups, f"{group} {self.topic}")
        self.client.hset(self.keys.group(group, self.topic).offsets, str(partition), offset)

    def lags(self, group: str) -> list[int]:
        """Each partition's lag; exact unless written as "<lag>+"."""
        view = inspection.group(self.client, self.keys, group, self.topic)
        assert view is not None
        return [p.lag if p.lag_is_exact else f"{p.lag}+" for p in view.partitions]  # type: ignore[misc]


@pytest.fixture
def partitions(redis_client: redis.Redis) -> Partitions:
    return Partitions(redis_client, Keys(f"lag-{uuid.uuid4().hex[:8]}"), "t", partitions=2)


def test_lag_is_exact_from_any_position(partitions: Partitions) -> None:
    offsets = partitions.produce(0, 50)
    partitions.join("nothing-committed")
    assert partitions.lags("nothing-committed") == [50, 0]  # a consumer starts from 0
    partitions.commit("g", 0, offsets[20])
    assert partitions.lags("g")[0] == 30
    partitions.commit("g", 0, offsets[49] + 1)
    assert partitions.lags("g")[0] == 0  # everything consumed
    partitions.commit("g", 0, offsets[10] + 1)  # between two offsets: from the next record
    assert partitions.lags("g")[0] == 39
    # Retention trims the head: the records a group has not read yet still count exactly.
    log = partitions.keys.partition("t", 0).log
    partitions.client.xtrim(log, minid=codec.entry_id(offsets[30], BITS), approximate=False)
    assert partitions.lags("g")[0] == 20
    partitions.commit("g", 0, 0)  # below the log start: every record left
    assert partitions.lags("g")[0] == 20


def test_lag_stops_at_the_high_watermark(partitions: Partitions) -> None:
    offsets = partitions.produce(1, 10)
    state = partitions.keys.partition("t", 1).state
    partitions.client.hset(state, "hw", offsets[6])  # 3 records not replicated yet
    partitions.commit("g", 1, offsets[2])
    assert partitions.lags("g")[1] == 5


def test_entries_written_before_numbering_are_counted(partitions: Partitions) -> None:
    pk = partitions.keys.partition("t", 0)
    for ms in range(1, 6):  # as an older version wrote them: no 'n'
        partitions.client.xadd(pk.log, {"key": "k", "value": "v", "ts": ms}, id=f"{ms}-0")
    partitions.client.hset(pk.state, mapping={"log_end": codec.encode(5, 0, BITS)})
    offsets = partitions.produce(0, 3)
    first_numbered = partitions.client.xrange(pk.log, min=codec.entry_id(offsets[0], BITS))[0]
    assert first_numbered[1][b"n"] == b"6"  # numbering goes on from the log's length
    partitions.join("g")
    assert partitions.lags("g") == [8, 0]  # counted one by one
    partitions.commit("g", 0, offsets[1])
    assert partitions.lags("g")[0] == 2  # both numbered: read from the numbers


def test_old_entries_beyond_the_count_cap_are_an_at_least(partitions: Partitions) -> None:
    pk = partitions.keys.partition("t", 0)
    pipe = partitions.client.pipeline(transaction=False)
    for ms in range(1, inspection.LAG_COUNT_CAP + 11):  # as an older version wrote them
        pipe.xadd(pk.log, {"key": "k", "value": "v", "ts": ms}, id=f"{ms}-0")
    pipe.execute()
    partitions.client.hset(
        pk.state, mapping={"log_end": codec.encode(ms, 0, BITS), "hw": ms << BITS}
    )
    partitions.join("g")
    assert partitions.lags("g") == [f"{inspection.LAG_COUNT_CAP}+", 0]


def test_a_lag_reads_two_entries_however_long_the_backlog(tmp_path) -> None:  # noqa: ANN001
    """Every XRANGE/XREVRANGE the lag script runs has COUNT 1, with 20 000 records to count
    (seen with MONITOR on a Redis of the test's own; the old script counted up to 100 000
    with one XRANGE ... COUNT 100000)."""
    with RedisProcess(tmp_path / "redis", appendonly=False) as server:
        client = redis.Redis.from_url(server.url)
        partitions = Partitions(client, Keys("lag"), "t")
        offsets = partitions.produce(0, 20_000)
        partitions.commit("g", 0, offsets[5])
        seen: list[list[str]] = []
        ready = threading.Event()

        def watch() -> None:
            with redis.Redis.from_url(server.url).monitor() as monitor:
                ready.set()
                for command in monitor.listen():
                    words = command["command"].split()
                    if words[:2] == ["PING", "lag-done"]:
                        return
                    if command.get("client_type") == "lua":
                        seen.append(words)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        assert ready.wait(10)
        try:
            lags = partitions.lags("g")
        finally:
            client.execute_command("PING", "lag-done")
            watcher.join(10)
        client.close()
    assert lags == [19_995]
    reads = [words for words in seen if words[0] in ("XRANGE", "XREVRANGE")]
    assert reads and all(words[-2:] == ["COUNT", "1"] for words in reads), reads


@pytest.fixture
def metrics_port() -> Iterator[int]:
    yield free_port()


@pytest.mark.slow
def test_the_lag_metric_counts_past_the_old_cap(
    redis_url: str, start_pod, topic: str, metrics_port: int
) -> None:  # noqa: ANN001
    """120 000 records behind a committed offset: the metric says exactly that (the old
    script stopped counting at 100 000)."""
    pod = start_pod(redis_url, "--metrics-port", str(metrics_port), *RF1)
    with pod.client() as client:
        partition = client.produce(topic, "user1", "first").partition
    client = redis.Redis.from_url(redis_url)
    try:
        partitions = Partitions(client, Keys(), topic, partitions=3)
        offsets = partitions.produce(partition, 120_000)
        partitions.commit(f"g-{topic}", partition, offsets[0])
        samples = scrape_metrics(metrics_port)
    finally:
        client.delete(Keys().partition(topic, partition).log)
        client.close()
    labels = ("group", f"g-{topic}"), ("partition", str(partition)), ("topic", topic)
    assert samples[("adapter_consumer_lag_records", labels)] == 120_000
