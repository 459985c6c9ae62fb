"""Debian bookworm's packaged Kafka clients against two pods, as a Debian user runs them:
kcat 1.7.1 (librdkafka 2.0.2), Sarama 1.22 and kafka-go 0.2.1 (our small Go programs in
``debian_clients/``, built with Debian's Go 1.19), and Burrow 1.2.1 reading a group's lag.
They send the old protocol versions and message formats (Produce v2 with magic 1, Fetch
v2-4, ListOffsets v0-1, OffsetCommit v1-2, JoinGroup v1, CreateTopics v0-2; librdkafka 2.0.2
wants SaslHandshake v0 listed). Every record and committed offset is checked through V1 on
the pods, not through the client that wrote it. ``tools/bootstrap-clients.sh`` installs the
packages; a test skips only where one is missing."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.debian_tools import (
    Burrow,
    build_go_client,
    require,
    run_json,
    running_zookeeper,
)
from tests.support import ROOT
from tests.support.pods import RF1, Pod, plain_client, start_all

PARTITIONS = 3
RECORDS = 12
USER, PASSWORD = "debian", "kcat pass:word"
# The records every client writes: key-<i> -> value-<i> (as the Go programs do).
VALUES = {f"value-{i}".encode(): f"key-{i}" for i in range(RECORDS)}

Log = dict[int, list[tuple[int, bytes]]]  # partition -> [(offset, value)] as V1 reads them


@pytest.fixture(scope="module")
def kcat() -> str:
    return require("kcat", "kcat")


@pytest.fixture(scope="module")
def sarama() -> Path:
    return build_go_client("sarama")


@pytest.fixture(scope="module")
def kafkago() -> Path:
    return build_go_client("kafkago")


def _create_topic(pod: Pod, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=10)[topic].result(15)


def _v1_log(pod: Pod, topic: str, partitions: int = PARTITIONS, login: bool = False) -> Log:
    with pod.client() as client:
        if login:
            client.auth(USER, PASSWORD)
        return {p: client.consume(topic, p, 0).records for p in range(partitions)}


def _v1_committed(pod: Pod, group: str, topic: str, partitions: int = PARTITIONS) -> dict:
    with pod.client() as client:
        return {p: client.committed(group, topic, p) for p in range(partitions)}


def _written(log: Log) -> set[tuple[int, int, str, str]]:
    """(partition, offset, key, value) of each record in the log, keys from VALUES."""
    return {(p, o, VALUES[v], v.decode()) for p, records in log.items() for o, v in records}


def _read(records: list[dict[str, Any]], value: str = "value") -> set[tuple]:
    return {(r["partition"], r["offset"], r["key"], r[value]) for r in records}


def _next_positions(log: Log) -> dict[int, int]:
    """What a group that read everything has committed: each partition's last offset + 1 (0 =
    "nothing committed" for a partition that got no record)."""
    return {p: records[-1][0] + 1 if records else 0 for p, records in log.items()}


# --- kcat (librdkafka 2.0.2) -----------------------------------------------------------------


def _kcat(kcat: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kcat, "-m", "10", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def _kcat_json(kcat: str, *args: str) -> list[dict[str, Any]]:
    return run_json([kcat, "-m", "10", "-J", *args])


def _kcat_produce(kcat: str, bootstrap: str, topic: str, *config: str) -> None:
    lines = "".join(f"{key}:{value.decode()}\n" for value, key in VALUES.items())
    result = _kcat(kcat, "-b", bootstrap, "-P", "-t", topic, "-K", ":", *config, stdin=lines)
    assert result.returncode == 0, result.stderr


def test_kcat_produces_consumes_lists_and_consumes_in_a_group(
    kcat: str, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    _create_topic(a, topic, PARTITIONS)
    _kcat_produce(kcat, a.bootstrap, topic, "-X", "acks=all")
    log = _v1_log(b, topic)
    assert sorted(v for records in log.values() for _, v in records) == sorted(VALUES)

    read = _kcat_json(kcat, "-b", b.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e")
    assert _read(read, "payload") == _written(log)

    metadata = _kcat_json(kcat, "-b", a.bootstrap, "-L", "-t", topic)[0]
    ports = {broker["name"].rsplit(":", 1)[1] for broker in metadata["brokers"]}
    assert {str(a.kafka_port), str(b.kafka_port)} <= ports
    [listed] = metadata["topics"]
    assert listed["topic"] == topic
    assert sorted(p["partition"] for p in listed["partitions"]) == list(range(PARTITIONS))

    group = f"kcat-{uuid.uuid4().hex[:8]}"
    consumed = _kcat_json(
        kcat, "-b", f"{a.bootstrap},{b.bootstrap}", "-G", group,
        "-X", "auto.offset.reset=earliest", "-e", topic,
    )  # fmt: skip
    assert _read(consumed, "payload") == _written(log)
    # kcat commits what it read as it closes (librdkafka's auto commit)
    assert _v1_committed(b, group, topic) == _next_positions(log)


@pytest.fixture(scope="module")
def sasl_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    """Two pods that require SASL, their user added with ``python -m adapter user add``."""
    prefix = f"debian-sasl-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [sys.executable, "-m", "adapter", "user", "add", USER, "--password", PASSWORD,
         "--redis-url", redis_url, "--key-prefix", prefix],
        cwd=ROOT, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    pods = [
        Pod(redis_url, *RF1, "--key-prefix", prefix, "--auth-redis",
            "--default-partitions", str(PARTITIONS),
            connect=plain_client)
        for _ in range(2)
    ]  # fmt: skip
    start_all(pods)
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()


def _sasl(password: str) -> list[str]:
    settings = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": USER,
        "sasl.password": password,
    }
    return [arg for name, value in settings.items() for arg in ("-X", f"{name}={value}")]


def test_kcat_sasl_plain(kcat: str, sasl_pods: tuple[Pod, Pod], topic: str) -> None:
    """librdkafka 2.0.2 starts SASL only when ApiVersions lists SaslHandshake v0 (then it
    sends v1 and SaslAuthenticate v0): the right password produces and consumes, a wrong one
    is refused."""
    a, b = sasl_pods
    _kcat_produce(kcat, a.bootstrap, topic, *_sasl(PASSWORD))
    log = _v1_log(b, topic, login=True)
    read = _kcat_json(
        kcat, "-b", b.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", *_sasl(PASSWORD)
    )
    assert _read(read, "payload") == _written(log) and len(read) == RECORDS

    refused = _kcat(kcat, "-b", a.bootstrap, "-L", "-m", "2", *_sasl("wrong"))
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stderr, refused.stderr


# --- Sarama 1.22 and kafka-go 0.2.1 ----------------------------------------------------------


# Sarama sends what config.Version allows: 0.10.2.0 is the oldest with consumer groups
# (Produce v2 with magic-1 messages, Fetch v3, CreateTopics v0); 2.2.0 its newest.
@pytest.mark.parametrize("version", ["0.10.2.0", "2.2.0"])
def test_sarama_creates_produces_lists_offsets_and_consumes_in_a_group(
    sarama: Path, kafka_pods: tuple[Pod, Pod], topic: str, version: str
) -> None:
    a, b = kafka_pods
    client = [str(sarama), "-brokers", f"{a.bootstrap},{b.bootstrap}", "-version", version]
    assert run_json([*client, "create-topic", topic, str(PARTITIONS)]) == [{"created": topic}]
    produced = run_json([*client, "produce", topic, str(RECORDS)])
    log = _v1_log(b, topic)
    assert {(r["partition"], r["offset"]) for r in produced} == {
        (p, o) for p, records in log.items() for o, _ in records
    }
    assert len(produced) == RECORDS and sorted(v for r in log.values() for _, v in r) == sorted(
        VALUES
    )
    offsets = run_json([*client, "offsets", topic])
    assert {o["partition"]: (o["oldest"], o["newest"]) for o in offsets} == _bounds(log)

    group = f"sarama-{uuid.uuid4().hex[:8]}"
    *consumed, committed = run_json([*client, "consume", group, topic, str(RECORDS)])
    assert _read(consumed) == _written(log)
    expected = _next_positions(log)
    # (OffsetFetch answers -1 for a partition without a commit, V1 OFFSET 0)
    assert committed == {"committed": {str(p): o or -1 for p, o in expected.items()}}
    assert _v1_committed(a, group, topic) == expected


def test_kafka_go_creates_produces_lists_offsets_and_consumes_in_a_group(
    kafkago: Path, kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    client = [str(kafkago), "-brokers", f"{a.bootstrap},{b.bootstrap}"]
    assert run_json([*client, "create-topic", topic, str(PARTITIONS)]) == [{"created": topic}]
    assert run_json([*client, "produce", topic, str(RECORDS)]) == [{"written": RECORDS}]
    log = _v1_log(b, topic)
    assert sorted(v for records in log.values() for _, v in records) == sorted(VALUES)
    offsets = run_json([*client, "offsets", topic])
    assert {o["partition"]: (o["first"], o["last"]) for o in offsets} == _bounds(log)

    group = f"kafka-go-{uuid.uuid4().hex[:8]}"
    consumed = run_json([*client, "consume", group, topic, str(RECORDS)])
    assert _read(consumed) == _written(log)
    assert _v1_committed(a, group, topic) == _next_positions(log)


def _bounds(log: Log) -> dict[int, tuple[int, int]]:
    """Kafka's (log start, high watermark) of each partition: its first offset and its last
    + 1 (0, 0 while empty)."""
    return {p: (r[0][0], r[-1][0] + 1) if r else (0, 0) for p, r in log.items()}


# --- Burrow 1.2.1 ----------------------------------------------------------------------------


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[int]:
    with running_zookeeper(tmp_path / "zookeeper") as port:
        yield port


def _produce_spread(pod: Pod, topic: str, partitions: int, count: int) -> None:
    """``count`` records round the partitions, one millisecond apart at least: the offsets
    have gaps, as they do in production."""
    producer = Producer({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})
    for i in range(count):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=i % partitions)
        assert producer.flush(10) == 0
        time.sleep(0.002)


def _burrow_answer(burrow: Burrow, path: str, ready: Callable[[dict], bool]) -> dict[str, Any]:
    """Burrow's answer to ``path`` once ``ready`` holds (it refreshes every second)."""
    deadline = time.monotonic() + 30
    answer: tuple[int, dict[str, Any]] = (0, {})
    while time.monotonic() < deadline and burrow.running():
        answer = burrow.get(path)
        if answer[0] == 200 and ready(answer[1]):
            return answer[1]
        time.sleep(0.5)
    raise AssertionError(f"Burrow's {path}: {answer}\n{burrow.log()[-3000:]}")


def test_burrow_reads_each_partitions_high_watermark(
    kafka_pods: tuple[Pod, Pod], topic: str, tmp_path: Path, zookeeper: int
) -> None:
    """Burrow's cluster module (Metadata, then ListOffsets v0 "latest" every second) shows
    each partition's high watermark: the last offset + 1."""
    a, b = kafka_pods
    _create_topic(a, topic, PARTITIONS)
    _produce_spread(a, topic, PARTITIONS, 6)
    expected = [high for _, high in _bounds(_v1_log(b, topic)).values()]
    burrow = Burrow(tmp_path / "burrow", zookeeper, [a.bootstrap, b.bootstrap], "pods").start()
    try:
        answer = _burrow_answer(burrow, f"topic/{topic}", lambda a: a.get("offsets") == expected)
    finally:
        burrow.stop()
    assert answer["offsets"] == expected


def test_burrow_shows_a_groups_lag_in_offset_units(
    kafka_pods: tuple[Pod, Pod], topic: str, tmp_path: Path, zookeeper: int
) -> None:
    """Burrow's lag is the high watermark minus the committed offset, the commits read from
    ``__consumer_offsets`` (the pods' mirror of the committed offsets, in Kafka's format):
    offsets are time-encoded, so it counts offset units, not records (docs/kafka.md,
    "Debian's clients and Burrow")."""
    a, b = kafka_pods
    _create_topic(a, topic, 1)
    _produce_spread(a, topic, 1, 10)
    [records] = _v1_log(b, topic, 1).values()
    committed = records[5][0]  # five records read, five unread
    high_watermark = records[-1][0] + 1
    group = f"burrow-{uuid.uuid4().hex[:8]}"
    committer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    committer.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    committer.close()

    burrow = Burrow(tmp_path / "burrow", zookeeper, [a.bootstrap, b.bootstrap], "pods",
                    group_pattern=f"^{group}$")  # fmt: skip
    try:
        status = _burrow_answer(
            burrow.start(), f"consumer/{group}/lag", lambda a: any(_current_lags(a))
        )["status"]
    finally:
        burrow.stop()
    [partition] = status["partitions"]
    assert (partition["topic"], partition["partition"]) == (topic, 0)
    assert partition["end"]["offset"] == committed
    assert partition["current_lag"] == high_watermark - committed == status["totallag"]
    assert partition["current_lag"] > 5  # five records unread, many more offset units


def _current_lags(answer: dict[str, Any]) -> list[int]:
    return [p.get("current_lag", 0) for p in (answer.get("status") or {}).get("partitions", [])]
