"""``python -m bench.kafka_groups``: consumer-group rebalance rows, Kafka against V1 in one
run (never a timed test).

Three pods on one ``redis-server``, one topic of ``--partitions`` partitions:

- rebalance: ``--members`` consumers (confluent-kafka, eager ``range``; V1 GroupConsumer)
  subscribe at once, spread over the pods; the time until every member owns partitions
  and together they own each partition exactly once (Kafka's includes the pods'
  ``--kafka-group-initial-rebalance-delay-ms``, here 300 ms, the default);
- member leaves: one member closes (LeaveGroup / LEAVE); the time until the survivors own
  every partition again, each once;
- member lost: a member in a child process is SIGKILLed (no leave); the same time, which
  the session timeout (3 s for both protocols here) dominates.

Heartbeats every 300 ms for both protocols (librdkafka heartbeat.interval.ms; V1
GroupConsumer heartbeat_interval_s), so the two are compared on equal terms.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import click

from adapter.client.group_consumer import GroupConsumer
from mapping.connection.embedded import RedisProcess
from tests.support import ROOT
from tests.support.pods import RF1, Pod

PREFIX = "kgbench"
SESSION_MS = 3000
HEARTBEAT_S = 0.3
POLL_S = 0.05
SETTLE_S = 30.0


def _pods(redis_url: str, count: int) -> list[Pod]:
    """``count`` pods with short sessions, their logs on this process's stderr."""
    return [
        Pod(
            redis_url,
            "--key-prefix",
            PREFIX,
            *RF1,
            "--no-replicator",
            "--log-level",
            "WARNING",
            "--session-timeout-ms",
            str(SESSION_MS),
            log_dir=None,
        ).start(timeout=30)  # fmt: skip
        for _ in range(count)
    ]


def _split(owned: list[set[int]], partitions: int) -> bool:
    """Every member owns something; together each partition exactly once."""
    return (
        all(owned)
        and set().union(*owned) == set(range(partitions))
        and sum(len(o) for o in owned) == partitions
    )


def _time_until(
    condition: Callable[[], bool], state: Callable[[], object], timeout: float = SETTLE_S
) -> float | None:
    """Seconds until ``condition`` holds; None (and the members' partitions printed) when
    it did not within ``timeout``: the row then reads null."""
    started = time.perf_counter()
    while not condition():
        if time.perf_counter() - started > timeout:
            click.echo(f"did not settle within {timeout}s: {state()}", err=True)
            return None
        time.sleep(0.01)
    return time.perf_counter() - started


class KafkaMember(threading.Thread):
    """A confluent-kafka consumer polled on its own thread; ``owned`` its partitions."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": int(HEARTBEAT_S * 1000),
            "partition.assignment.strategy": "range", "enable.auto.commit": False,
        })  # fmt: skip
        self.topic = topic
        self.owned: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stopping.is_set():
            self.consumer.poll(POLL_S)
            self.owned = {tp.partition for tp in self.consumer.assignment()}
        self.consumer.close()  # LeaveGroup
        self.owned = set()

    def leave(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


class V1Member(threading.Thread):
    def __init__(self, port: int, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = GroupConsumer(
            group, topic, port=port, heartbeat_interval_s=HEARTBEAT_S, idle_wait_s=POLL_S
        )

    @property
    def owned(self) -> set[int]:
        return set(self.consumer.assignment)

    def run(self) -> None:
        self.consumer.run(lambda record: None)

    def leave(self) -> None:
        self.consumer.stop()
        self.join(timeout=30)
        self.consumer.close()  # LEAVE


def _child(kind: str, address: str, group: str, topic: str, status: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.kafka_groups", "member", kind, address, group, topic,
         str(status)],
        cwd=ROOT,
    )  # fmt: skip


def _rows(
    kind: str, members: list, partitions: int, spawn_child: Callable[[Path], subprocess.Popen]
) -> dict[str, float]:
    def owned() -> list[set[int]]:
        return [m.owned for m in members]

    for member in members:
        member.start()
    rebalance = _time_until(lambda: _split(owned(), partitions), owned)
    leaving = members.pop()
    started = time.perf_counter()
    leaving.leave()
    left = _time_until(lambda: _split(owned(), partitions), owned)
    if left is not None:
        left = time.perf_counter() - started  # the leave's own time included
    with tempfile.TemporaryDirectory() as folder:
        status = Path(folder) / "owned"
        status.write_text("")
        child = spawn_child(status)

        def child_owned() -> set[int]:
            return {int(p) for p in status.read_text().split(",") if p}

        _time_until(
            lambda: _split([*owned(), child_owned()], partitions),
            lambda: [*owned(), child_owned()],
        )
        started = time.perf_counter()
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        lost = _time_until(lambda: _split(owned(), partitions), owned)
        if lost is not None:
            lost = time.perf_counter() - started
    for member in members:
        member.leave()
    return {
        f"{kind}_rebalance_{len(members) + 1}_members_s": _rounded(rebalance),
        f"{kind}_member_leaves_s": _rounded(left),
        f"{kind}_member_lost_s": _rounded(lost),
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


@click.group(invoke_without_command=True)
@click.option("--members", default=10, show_default=True)
@click.option("--partitions", default=12, show_default=True)
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
@click.pass_context
def main(ctx: click.Context, members: int, partitions: int, json_path: Path | None) -> None:
    """Rebalance times of Kafka and V1 consumer groups over three pods."""
    if ctx.invoked_subcommand is not None:
        return
    rows: dict[str, float | None] = {}
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        pods = _pods(server.url, 3)
        try:
            from confluent_kafka.admin import AdminClient, NewTopic

            topic = f"kg-{uuid.uuid4().hex[:8]}"
            admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
            admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=30)
            kafka_group, v1_group = f"kafka-{topic}", f"v1-{topic}"
            bootstraps = [pod.bootstrap for pod in pods]
            rows |= _rows(
                "kafka",
                [KafkaMember(bootstraps[i % 3], kafka_group, topic) for i in range(members)],
                partitions,
                lambda status: _child("kafka", bootstraps[1], kafka_group, topic, status),
            )
            ports = [pod.port for pod in pods]
            rows |= _rows(
                "v1",
                [V1Member(ports[i % 3], v1_group, topic) for i in range(members)],
                partitions,
                lambda status: _child("v1", str(ports[1]), v1_group, topic, status),
            )
        finally:
            for pod in pods:
                pod.stop(timeout=30)
    for name, value in rows.items():
        click.echo(f"{name:40} {value}")
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2))


@main.command()
@click.argument("kind", type=click.Choice(["kafka", "v1"]))
@click.argument("address")
@click.argument("group")
@click.argument("topic")
@click.argument("status", type=click.Path(path_type=Path))
def member(kind: str, address: str, group: str, topic: str, status: Path) -> None:
    """(internal) one member in a child process, writing its partitions to STATUS."""
    one = (
        KafkaMember(address, group, topic)
        if kind == "kafka"
        else V1Member(int(address), group, topic)
    )
    one.start()
    written = None
    while True:
        owned = ",".join(str(p) for p in sorted(one.owned))
        if owned != written:
            status.write_text(owned)
            written = owned
        time.sleep(0.01)


if __name__ == "__main__":
    main()
