"""``python -m bench.authorizer``: what ``--authorizer`` costs a Kafka request, side by side.

Two pods on one ``redis-server`` (a free port, AOF off): one as by default, one with
``--authorizer`` and bindings as a deployment has them: User:ANONYMOUS (these clients do not
log in) allowed WRITE, READ and CREATE on a PREFIXED topic pattern and READ on the
consumer's group, among ``--unrelated`` bindings of other users on other topics and groups,
so that every check walks a realistic list. The same rows run against each pod in turn,
``--rounds`` times, each pod first in every other round (the median is kept: on a busy
machine turns share the noise):

- produce / fetch: bench/kafka.py's confluent-kafka producer and consumer rows (records/s);
- produce_requests: plain Produce v9 requests of one record each, one at a time, straight
  to the pod (requests/s): the authorizer's check is per request and per topic, so small
  requests show it most;
- fetch_requests: plain Fetch v12 requests of one record each, the same way.

For each row the pod's CPU time (/proc/<pid>/stat) over the row, per record or request, and
the ratio authorizer/plain of rate and CPU. And the check itself: µs of one ``allows`` over
the same bindings (and with the authorizer off), timed in this process.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import click
import redis

from bench.kafka import PREFIX, kafka_fetch, kafka_produce, pod
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from mapping.security.acl_store import SyncAclStore
from mapping.security.acls import (
    ANONYMOUS,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from tests.support.pods import Pod
from tests.support.procfs import cpu_seconds

TOPICS = "authz-bench-"  # the allowed PREFIXED pattern; every topic here starts with it
GROUP = "bench"  # bench/kafka.py's consumer's group.id
ROWS = ("produce", "fetch", "produce_requests", "fetch_requests")


def bindings(unrelated: int) -> list[AclBinding]:
    """The allowing bindings, after ``unrelated`` others (other users, topics, groups;
    literal and prefixed, allow and deny) that every check has to pass over."""
    found = []
    kinds = (ResourceType.TOPIC, ResourceType.GROUP)
    patterns = (PatternType.LITERAL, PatternType.PREFIXED)
    operations = (Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)
    for i in range(unrelated):
        found.append(AclBinding(
            kinds[i % 2], f"team-{i}-", patterns[i // 2 % 2], f"User:service-{i}", "*",
            operations[i % 4], Permission.DENY if i % 10 == 9 else Permission.ALLOW,
        ))  # fmt: skip
    for operation in (Operation.WRITE, Operation.READ, Operation.CREATE):
        found.append(AclBinding(
            ResourceType.TOPIC, TOPICS, PatternType.PREFIXED, ANONYMOUS, "*", operation,
            Permission.ALLOW,
        ))  # fmt: skip
    found.append(AclBinding(
        ResourceType.GROUP, GROUP, PatternType.LITERAL, ANONYMOUS, "*", Operation.READ,
        Permission.ALLOW,
    ))  # fmt: skip
    return found


def _cpu(served: Pod) -> float:
    return sum(cpu_seconds(pid) for pid in served.pids())


def produce_requests(kafka_port: int, topic: str, requests: int) -> tuple[float, int]:
    """(requests/s, the last record's offset) of one-record Produce v9 requests to
    partition 0, each answered before the next."""
    from adapter.kafka import errors
    from adapter.kafka.versions import PRODUCE
    from tests.support.kafka import RawKafka, batch, partition_reply, produce_body

    body = produce_body(topic, 0, batch([b"x" * 100]))
    last = -1
    with RawKafka(kafka_port, timeout=30) as raw:
        started = time.perf_counter()
        for _ in range(requests):
            reply = partition_reply(raw.call(PRODUCE, 9, body))
            if reply.error_code != errors.NONE:
                raise RuntimeError(f"Produce failed: error {reply.error_code}")
            last = reply.base_offset
        return requests / (time.perf_counter() - started), last


def fetch_requests(kafka_port: int, topic: str, offset: int, requests: int) -> float:
    """requests/s of Fetch v12 requests of partition 0 from ``offset`` (its last record: one
    record each), each answered before the next."""
    from adapter.kafka import errors
    from adapter.kafka.versions import FETCH
    from tests.support.kafka import RawKafka, fetch_body

    body = fetch_body(topic, 0, offset)
    with RawKafka(kafka_port, timeout=30) as raw:
        started = time.perf_counter()
        for _ in range(requests):
            part = raw.call(FETCH, 12, body).responses[0].partitions[0]
            if part.error_code != errors.NONE or not part.records:
                raise RuntimeError(f"Fetch got no record: error {part.error_code}")
        return requests / (time.perf_counter() - started)


def one_round(served: Pod, records: int, requests: int) -> dict[str, tuple[float, float]]:
    """Every row once against ``served``: row -> (rate, pod CPU µs per record or request)."""
    topic = f"{TOPICS}{uuid.uuid4().hex[:8]}"
    rows: dict[str, tuple[float, float]] = {}

    def timed(name: str, count: int, row: Callable[[], float]) -> None:
        before = _cpu(served)
        rate = row()
        rows[name] = (rate, (_cpu(served) - before) / count * 1e6)

    timed("produce", records, lambda: kafka_produce(served.bootstrap, topic, records))
    # (kafka_produce's first record, written before its clock starts, is read too)
    timed("fetch", records, lambda: kafka_fetch(served.bootstrap, topic, records + 1))
    last: list[int] = []

    def produce_row() -> float:
        rate, offset = produce_requests(served.kafka_port, topic, requests)
        last.append(offset)
        return rate

    timed("produce_requests", requests, produce_row)
    timed(
        "fetch_requests",
        requests,
        lambda: fetch_requests(served.kafka_port, topic, last[0], requests),
    )
    return rows


def _answers(served: Pod) -> bool:
    """The authorizing pod lets User:ANONYMOUS create and write a topic under the allowed
    prefix (its bindings are loaded)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": served.bootstrap, "message.timeout.ms": 5000})
    delivered: list[object] = []
    producer.produce(f"{TOPICS}ready", b"v", on_delivery=lambda e, m: delivered.append(e))
    producer.flush(15)
    return delivered == [None]


def check_us(unrelated: int | None, calls: int = 20_000) -> float:
    """µs of one of the pod's checks (WRITE on an allowed topic) in this process, over
    ``bindings(unrelated)``; None: the authorizer off."""
    from adapter.authorizer import Authorizer

    authorizer = Authorizer(enabled=unrelated is not None)
    authorizer.set_bindings(bindings(unrelated or 0))
    name = f"{TOPICS}topic"
    args = (ANONYMOUS, "/127.0.0.1", Operation.WRITE, ResourceType.TOPIC, name)
    assert authorizer.allows(*args)
    started = time.perf_counter()
    for _ in range(calls):
        authorizer.allows(*args)
    return (time.perf_counter() - started) / calls * 1e6


def measure(
    redis_url: str, records: int, requests: int, rounds: int, unrelated: int
) -> dict[str, float]:
    """The rows against a plain pod and an authorizing pod, in turns, ``rounds`` times."""
    from tests.support.waiting import wait_until

    client = redis.Redis.from_url(redis_url)
    try:
        SyncAclStore(client, Keys(PREFIX)).create(bindings(unrelated))
    finally:
        client.close()
    pods = {"plain": pod(redis_url), "authorizer": pod(redis_url, ["--authorizer"])}
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        name: {row: [] for row in ROWS} for name in pods
    }
    try:
        wait_until(lambda: _answers(pods["authorizer"]), timeout=30)
        for turn in range(rounds):
            # each pod goes first in every other round: neither always meets a cold start
            order = list(pods.items())[:: -1 if turn % 2 else 1]
            for name, served in order:
                for row, sample in one_round(served, records, requests).items():
                    samples[name][row].append(sample)
    finally:
        for served in pods.values():
            served.stop(timeout=30)
    result: dict[str, float] = {
        "bindings": unrelated + 4,
        "rounds": rounds,
        "check_off_us": round(check_us(None), 2),
        "check_authorizer_us": round(check_us(unrelated), 2),
    }
    for row in ROWS:
        unit = "records" if row in ("produce", "fetch") else "requests"
        median = {
            name: (
                statistics.median(rate for rate, _ in samples[name][row]),
                statistics.median(cpu for _, cpu in samples[name][row]),
            )
            for name in pods
        }
        for name, (rate, cpu) in median.items():
            result[f"{row}_{name}_{unit}_per_s"] = round(rate)
            result[f"{row}_{name}_pod_cpu_us_per_{unit[:-1]}"] = round(cpu, 1)
        (rate_plain, cpu_plain), (rate_authz, cpu_authz) = median["plain"], median["authorizer"]
        result[f"{row}_rate_ratio"] = round(rate_authz / rate_plain, 3)
        result[f"{row}_cpu_ratio"] = round(cpu_authz / cpu_plain, 3) if cpu_plain else 0.0
    return result


@click.command()
@click.option("--records", default=100_000, show_default=True,
              help="Records of each confluent-kafka row.")  # fmt: skip
@click.option("--requests", default=5_000, show_default=True,
              help="Requests of each plain-request row.")  # fmt: skip
@click.option("--rounds", default=5, show_default=True,
              help="Turns of every row on each pod (the median is reported).")  # fmt: skip
@click.option("--unrelated", default=100, show_default=True,
              help="Bindings of other users besides the four that allow.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(records: int, requests: int, rounds: int, unrelated: int, json_path: Path | None) -> None:
    """Kafka produce and fetch rows against a pod without and with --authorizer."""
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        rows = measure(server.url, records, requests, rounds, unrelated)
    for name, value in rows.items():
        click.echo(f"{name:50} {value}")
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
