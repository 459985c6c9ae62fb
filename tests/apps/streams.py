"""What the application tests share: the input they produce, the per-key result it must
give, the application as a child process, and reading its output and its group's progress.

The input (see ``quix_app.py``/``faust_app.py`` for what the apps compute): ``KEYS`` keys,
``EARLY`` records each before the crash; the "late" half of the keys then gets ``LATE``
records more, half before and half after the application is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import ROOT
from tests.support.kafka import read_committed
from tests.support.waiting import wait_until

PARTITIONS = 3
# The key prefix of the applications' pods (conftest.py's app_pods)
APPS_PREFIX = "appstests"
KEYS = [f"k{n}" for n in range(8)]
LATE_KEYS = KEYS[4:]  # keys that get records after the crash too
EARLY = 20  # records per key before the crash (seq 0..EARLY-1)
LATE = 20  # more records per late key (seq EARLY..EARLY+LATE-1)

Record = tuple[str, int, int]  # key, seq, amount
PROCESSED = re.compile(r"processed (\S+) (\d+) (applied|skipped)")


def early_records() -> list[Record]:
    return [(key, seq, 1000 * n + seq) for seq in range(EARLY) for n, key in enumerate(KEYS)]


def late_records() -> list[Record]:
    return [
        (key, seq, 1000 * n + seq)
        for seq in range(EARLY, EARLY + LATE)
        for n, key in enumerate(KEYS)
        if key in LATE_KEYS
    ]


def expected_states(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """The state per key once every record is applied once: last seq, count, total."""
    states: dict[str, dict[str, Any]] = {}
    for key, seq, amount in records:
        state = states.setdefault(key, {"key": key, "seq": -1, "count": 0, "total": 0})
        state["seq"], state["count"], state["total"] = (
            seq,
            state["count"] + 1,
            state["total"] + amount,
        )
    return states


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=10)


def produce(bootstrap: str, topic: str, records: Sequence[Record]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, seq, amount in records:
        producer.produce(topic, key=key, value=json.dumps({"seq": seq, "amount": amount}))
    assert producer.flush(10) == 0


def _consumer(bootstrap: str, group: str = "apps-reader") -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False})  # fmt: skip


def latest_states(bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
    """The last value per key in ``topic`` (its records up to the high watermark): the
    application's latest state of each key it sent."""
    consumer = _consumer(bootstrap)
    latest: dict[str, dict[str, Any]] = {}
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        if metadata.error is not None:
            return latest  # not created yet
        for partition in metadata.partitions:
            _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            consumer.assign([TopicPartition(topic, partition, 0)])
            position = 0  # offsets have gaps: read until the position reaches the watermark
            while position < end:
                for message in consumer.consume(500, 1.0):
                    assert message.error() is None, message.error()
                    position = message.offset() + 1
                    latest[message.key().decode()] = json.loads(message.value())
    finally:
        consumer.close()
    return latest


def committed_to_end(bootstrap: str, group: str, topic: str) -> bool:
    """``group`` has committed every partition of ``topic`` up to its high watermark."""
    consumer = _consumer(bootstrap, group)
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        try:
            committed = consumer.committed(partitions, timeout=10)
        except KafkaException:
            return False
        for position in committed:
            _, end = consumer.get_watermark_offsets(position, timeout=10)
            if position.offset < end:
                return False
        return True
    finally:
        consumer.close()


def has_no_members(bootstrap: str, group: str) -> bool:
    """``group`` has no live member (a SIGKILLed one's session has expired)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        described = admin.describe_consumer_groups([group])[group].result(10)
    except KafkaException:
        return False
    return not described.members


def committed_outputs(bootstrap: str, topic: str, expected: int) -> list[dict[str, Any]]:
    """Every output record of ``topic`` read with read_committed (in order per partition;
    a key's records are in one partition), once ``expected`` arrived or 5 s passed."""
    found = read_committed(bootstrap, topic, PARTITIONS, expected, timeout=5.0)
    return [json.loads(value) for values in found.values() for value in values]


def committed_states(bootstrap: str, topic: str) -> dict[str, dict[str, Any]]:
    """The last committed output per key (read_committed): an exactly-once app's states."""
    total = len(early_records()) + len(late_records())
    return {state["key"]: state for state in committed_outputs(bootstrap, topic, total)}


@dataclass
class AppRun:
    """One run of an application as a child process, its output (stdout and stderr) in
    ``log_path``."""

    command: list[str]
    log_path: Path
    ready_line: str | None = None  # what the app logs once it has recovered and goes on
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> AppRun:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        return self

    def processed(self) -> list[tuple[str, int, str]]:
        """(key, seq, applied|skipped) of every record this run's app processed so far."""
        text = self.log_path.read_text(errors="replace")
        return [(key, int(seq), how) for key, seq, how in PROCESSED.findall(text)]

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_processed(self, count: int, timeout: float) -> None:
        def done() -> bool:
            assert self.running(), f"the app exited: see {self.log_path}"
            return len(self.processed()) >= count

        wait_until(done, timeout=timeout, interval=0.2)

    def wait_ready(self, timeout: float) -> None:
        """Until the app logged ``ready_line`` (at once when it has none)."""
        if self.ready_line is None:
            return

        def ready() -> bool:
            assert self.running(), f"the app exited: see {self.log_path}"
            return self.ready_line in self.log_path.read_text(errors="replace")

        wait_until(ready, timeout=timeout, interval=0.2)

    def wait_exit(self, timeout: float) -> int:
        """Until the app exits by itself; its exit status."""
        assert self.process is not None
        return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: no commit, no flush, no LeaveGroup."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class Outcome:
    """What a crash scenario left: the two runs and the output's last state per key."""

    first: AppRun
    second: AppRun
    states: dict[str, dict[str, Any]]


def crash_and_recover(
    bootstrap: str,
    group: str,
    source: str,
    sink: str,
    state_dir: Path,
    start_app: Any,
    read_states: Callable[[str, str], dict[str, dict[str, Any]]] = latest_states,
    *,
    kill_when_committed: bool = False,
    dies_in_checkpoint: bool = False,
    after_crash: Callable[[], None] | None = None,
) -> Outcome:
    """The scenario both applications go through. ``start_app(run)`` starts run 1 or 2 of
    the application (an `AppRun`); ``read_states(bootstrap, sink)`` reads the output's last
    state per key (an exactly-once app's: with read_committed).

    1. the early records in, run 1 processes them and commits their offsets;
    2. half the late records in, and run 1 is SIGKILLed once it has started on them (with
       ``kill_when_committed``: once it has processed and committed them all, so that run 2
       reads nothing during its recovery: Faust, docs/apps.md; with ``dies_in_checkpoint``:
       run 1 dies by itself inside a checkpoint, quix_app.py's $QUIX_EXIT_IN_CHECKPOINT);
       then ``after_crash()`` (compaction, say);
    3. its local state directory is deleted; run 2 starts: its state must come from the
       changelog, since the early records' offsets were committed and run 2 never reads
       them again;
    4. once run 2 is ready (``AppRun.ready_line``), the other late records go in.
    """
    create_topic(bootstrap, source)
    early, late = early_records(), late_records()
    expected = expected_states([*early, *late])
    produce(bootstrap, source, early)
    first: AppRun = start_app(1)
    try:
        first.wait_processed(len(early), timeout=60)
        wait_until(lambda: committed_to_end(bootstrap, group, source), timeout=30, interval=0.5)
        produce(bootstrap, source, late[: len(late) // 2])
        if dies_in_checkpoint:
            assert first.wait_exit(timeout=30) == 9, f"see {first.log_path}"
        elif kill_when_committed:
            first.wait_processed(len(early) + len(late) // 2, timeout=30)
            wait_until(lambda: committed_to_end(bootstrap, group, source), timeout=30, interval=0.5)
        else:
            first.wait_processed(len(early) + 1, timeout=30)
        if not dies_in_checkpoint:
            first.kill()
    finally:
        first.stop()
    if after_crash is not None:
        after_crash()
    assert state_dir.exists(), "the app kept no local state"
    shutil.rmtree(state_dir)
    # Run 2 joins once run 1's session has expired: joining beside the dead member takes two
    # rebalances, and Faust's table recovery across them is timing-dependent. Recovery from
    # the changelog is what this scenario tests; a member's death under load is the groups
    # tests' part.
    wait_until(lambda: has_no_members(bootstrap, group), timeout=30, interval=0.5)
    second: AppRun = start_app(2)
    try:
        # The rest of the late records go in once run 2 says it is ready: Faust seeks its
        # streams to the committed offsets at the end of its recovery while its fetcher
        # already runs, and skips records that were in flight across that seek (seen in
        # three runs, every record stored once in the log; with the seek done, none), and
        # with them the uncommitted ones it reads then (kill_when_committed).
        second.wait_ready(timeout=60)
        produce(bootstrap, source, late[len(late) // 2 :])
        states: dict[str, dict[str, Any]] = {}

        def finished() -> bool:
            assert second.running(), f"the app exited: see {second.log_path}"
            states.update(read_states(bootstrap, sink))
            return all(states.get(key, {}).get("seq") == expected[key]["seq"] for key in KEYS)

        wait_until(finished, timeout=60, interval=1.0)
    finally:
        second.stop()
    return Outcome(first, second, states)
