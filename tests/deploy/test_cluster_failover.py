"""Redis Cluster failover under idempotent Kafka producers (issue 26, item 3): a primary is
SIGKILLed while confluent-kafka producers (enable.idempotence, acks=all) write through two
pods, its replica takes over, the killed node comes back as a replica; twice.

Afterwards: no record stored twice, each producer's records in the order it sent them, the
followers of every partition caught up (the built-in replicator resumed on the promoted
nodes), and both pods still up. Without ``--redis-wait-replicas`` an acknowledged write the
replica had not received yet is lost with the primary (a separate item): those are counted
and reported, not asserted."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from typing import Any

import pytest
import redis

from mapping.connection.cluster import connect_sync
from mapping.core.codec import offset_of
from mapping.core.keys import Keys
from tests.support.cluster import LoopbackCluster
from tests.support.pods import Pod
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

PARTITIONS = 6  # their slots spread over the three primaries
ROUNDS = 2


class IdempotentWriter(threading.Thread):
    """One idempotent acks=all producer writing ``<tag>-<n>`` to partition ``n % PARTITIONS``,
    paced, with every delivery report kept. A producer that librdkafka declares fatally
    failed is replaced by a new one (its records may still be in flight: not counted as
    acknowledged)."""

    def __init__(self, tag: str, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.tag, self.bootstrap, self.topic = tag, bootstrap, topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: Counter[str] = Counter()
        self.fatal = 0
        self.sent = 0
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 60000, "request.timeout.ms": 5000,
            "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 500,
        })  # fmt: skip

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:  # (an offset librdkafka does not know comes as None or -1)
            offset = msg.offset()
            self.acked[msg.value()] = (msg.partition(), -1 if offset is None else offset)
        else:
            self.errors[err.name()] += 1

    def run(self) -> None:
        from confluent_kafka import KafkaException

        try:
            producer = self._producer()
            while not self.stopping.is_set():
                value = f"{self.tag}-{self.sent}".encode()
                try:
                    producer.produce(
                        self.topic, value=value, partition=self.sent % PARTITIONS,
                        on_delivery=self._report,
                    )  # fmt: skip
                except (KafkaException, BufferError) as exc:
                    error = exc.args[0] if exc.args else None
                    if getattr(error, "fatal", lambda: False)():
                        self.fatal += 1
                        producer.purge()
                        producer = self._producer()
                    producer.poll(0.05)
                    continue
                self.sent += 1
                producer.poll(0.002)  # paced: about 400 records/s per writer
            producer.flush(30)
        except BaseException as exc:  # reported by the test
            self.failure = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=45)
        assert not self.is_alive(), "a writer did not finish"
        assert self.failure is None, self.failure


def _read_logs(url: str, keys: Keys, topic: str) -> dict[int, list[tuple[int, bytes]]]:
    """Each partition's log as stored in Redis: (offset, value), oldest first."""
    cluster = connect_sync(url, socket_timeout=5)
    try:
        return {
            p: [(offset_of(entry_id), fields[b"value"])
                for entry_id, fields in cluster.xrange(keys.partition(topic, p).log)]
            for p in range(PARTITIONS)
        }  # fmt: skip
    finally:
        cluster.close()


def _followers_caught_up(url: str, keys: Keys, topic: str, partitions: int = PARTITIONS) -> bool:
    """Every partition's high watermark reached its log end: the replicator played every
    follower to the end, on the promoted primaries too."""
    cluster = connect_sync(url, socket_timeout=5, decode_responses=True)
    try:
        for p in range(partitions):
            state = cluster.hgetall(keys.partition(topic, p).state)
            if state.get("hw") != state.get("log_end"):
                return False
        return True
    finally:
        cluster.close()


def _alive(pod: Pod) -> bool:
    assert pod.process is not None
    if pod.process.poll() is not None:
        return False
    with pod.client(timeout=5) as client:
        return client.ping() == "pong"


def test_primaries_killed_under_idempotent_producers(
    failover_cluster: LoopbackCluster, start_pod
) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    url = failover_cluster.url
    keys = Keys(f"fo-{uuid.uuid4().hex[:6]}")
    pods = [start_pod(url, "--key-prefix", keys.prefix) for _ in range(2)]
    bootstrap = ",".join(pod.bootstrap for pod in pods)
    topic = f"failover-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(20)

    writers = [IdempotentWriter(f"w{i}", bootstrap, topic) for i in range(3)]
    for writer in writers:
        writer.start()
    started = time.monotonic()
    killed_at = []
    try:
        for round_ in range(ROUNDS):
            time.sleep(1.5)
            # the primary of another partition's log each round
            victim = failover_cluster.primary_of(keys.partition(topic, round_).log)
            replica = failover_cluster.replica_of(victim)
            failover_cluster.kill(victim)
            killed = time.monotonic()
            failover_cluster.wait_promoted(replica)  # its replica took over
            killed_at.append((round(killed - started, 1), round(time.monotonic() - killed, 1)))
            time.sleep(1.5)
            failover_cluster.restart(victim)  # back, as the new primary's replica
            failover_cluster.wait_ok(timeout=30)
        time.sleep(1.0)
    finally:
        for writer in writers:
            writer.stop()

    wait_until(lambda: _followers_caught_up(url, keys, topic), timeout=15, interval=0.2)
    logs = _read_logs(url, keys, topic)
    stored = Counter(value for records in logs.values() for _, value in records)
    duplicates = {value: n for value, n in stored.items() if n > 1}
    reorders = []
    for p, records in logs.items():
        last: dict[str, int] = {}
        for _, value in records:
            tag, n = value.decode().rsplit("-", 1)
            if int(n) <= last.get(tag, -1):
                reorders.append((p, value))
            last[tag] = int(n)
    where = {value: (p, offset) for p, records in logs.items() for offset, value in records}
    acked = {value: at for writer in writers for value, at in writer.acked.items()}
    lost = [value for value in acked if value not in where]
    # librdkafka reports a batch that a later one acknowledged implicitly without an offset
    implicit = sum(1 for _, offset in acked.values() if offset < 0)
    moved = [v for v, at in acked.items() if v in where and at[1] >= 0 and where[v] != at]
    errors = sum((w.errors for w in writers), Counter())
    sent = sum(w.sent for w in writers)
    print(
        f"\nfailover: (killed at, promoted after) {killed_at} s; sent {sent}, "
        f"acked {len(acked)}, stored {sum(stored.values())}; duplicates {len(duplicates)}, "
        f"reorders {len(reorders)}, acked but lost {len(lost)}, acked at another offset "
        f"{len(moved)} (acked without one: {implicit}); producer errors {dict(errors)}, "
        f"fatal {sum(w.fatal for w in writers)}"
    )
    places = {
        value: [(p, offset) for p, records in logs.items() for offset, v in records if v == value]
        for value in list(duplicates)[:5]
    }
    assert not duplicates, f"{len(duplicates)} stored twice, e.g. at {places}"
    assert not reorders, f"{len(reorders)} out of order, e.g. {reorders[:5]}"
    assert not moved, f"{len(moved)} acknowledged at another offset, e.g. {moved[:5]}"
    assert len(acked) > 1000  # the writers got through the failovers
    assert all(_alive(pod) for pod in pods), [pod.log()[-3000:] for pod in pods]


def test_followers_resume_on_a_promoted_primary(
    failover_cluster: LoopbackCluster, start_pod
) -> None:
    """A fetch the replicator made just before a failover may not have reached the replica
    that takes over: there the followers are behind the log end again, and an append wakes
    only followers that had everything. Simulated exactly (the followers' state rewound on
    the primary, then a manual failover that loses nothing else): the replicator notices the
    failover (the cluster's epoch grew) and brings the followers up to the log end again;
    the next acks=all produce is answered."""
    url = failover_cluster.url
    keys = Keys(f"rs-{uuid.uuid4().hex[:6]}")
    pod = start_pod(url, "--key-prefix", keys.prefix, "--default-partitions", "1")
    topic = f"resume-{uuid.uuid4().hex[:6]}"
    pk = keys.partition(topic, 0)
    with pod.client() as client:
        client.produce(topic, "k", "one", acks="all")  # the followers have it
    primary = failover_cluster.primary_of(pk.state)
    node = redis.Redis(port=primary.port, decode_responses=True)
    try:
        # What the promoted replica holds when the last fetches did not reach it.
        node.hset(pk.state, mapping={"replica.1.acked_offset": -1,
                                     "replica.2.acked_offset": -1, "hw": -1})  # fmt: skip
        node.delete(pk.replica(1), pk.replica(2))
    finally:
        node.close()
    failover_cluster.failover(failover_cluster.replica_of(primary))
    with pod.client() as client:
        client.produce(topic, "k", "two")  # acks=1: wakes no follower by itself
        wait_until(lambda: _followers_caught_up(url, keys, topic, partitions=1), timeout=10)
        third = client.request("PRODUCE", f"{topic} k:three acks=all")
    assert third.ok, third
