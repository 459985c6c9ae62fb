"""Groups across adapter pods: one coordinator in Redis, whichever pod a member talks to.

Three consumer processes of one group, each on its own pod, split the partitions; one is
SIGKILLed (no LEAVE) and the others take its partitions over after the session timeout;
every record is handed out at least once and no committed offset passes what was handed
out. Then 20 members joining at once through three pods: no lost update.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from adapter.client import Client, GroupAssignment
from adapter.client.producer import Producer
from mapping.group import assignors
from tests.support import ROOT
from tests.support.pods import RF1, Pod
from tests.support.v1 import KEYS
from tests.support.waiting import wait_until

PARTITIONS = 6
SESSION_MS = 1500
HEARTBEAT_S = "0.25"
WAIT_S = 60  # generous: a loaded 2-core machine


class ConsumerProcess:
    def __init__(self, port: int, group: str, topic: str, consumer_id: str, log: Path) -> None:
        self.consumer_id = consumer_id
        self.log_path = log
        args = [str(port), group, topic, consumer_id, str(log), HEARTBEAT_S]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.v1.consumer_process", *args], cwd=ROOT
        )

    def entries(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text().split("\n")
        return [json.loads(line) for line in lines[:-1]]  # the last one may be partial

    def last_assignment(self) -> dict | None:
        joins = [e for e in self.entries() if "generation" in e]
        return joins[-1] if joins else None

    def handed(self) -> set[tuple[int, int]]:
        return {(e["p"], e["o"]) for e in self.entries() if "p" in e}

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def consumers() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    yield started
    for consumer in started:
        consumer.kill()


def converged(r: redis.Redis, group: str, topic: str, alive: list[ConsumerProcess]) -> bool:
    """Every live consumer holds the group's current generation, Redis lists exactly them,
    and their partitions cover 0..P-1 with no overlap and no gap."""
    keys = KEYS.group(group, topic)
    generation = r.hget(keys.meta, "generation")
    members = sorted(m.decode() for m in r.hkeys(keys.members))
    if generation is None or members != sorted(c.consumer_id for c in alive):
        return False
    views = [c.last_assignment() for c in alive]
    if any(v is None or v["generation"] != int(generation) for v in views):
        return False
    owned = sorted(p for v in views if v is not None for p in v["assigned"])
    assert owned == list(range(PARTITIONS)), views  # same generation: must be a partition
    return True


def check_commits_never_pass_handed(
    r: redis.Redis, group: str, topic: str, everyone: list[ConsumerProcess]
) -> dict[int, int]:
    committed = {int(p): int(o) for p, o in r.hgetall(KEYS.group(group, topic).offsets).items()}
    handed = set().union(*(c.handed() for c in everyone))  # read after: logs only grow
    for partition, offset in committed.items():
        top = max((o for p, o in handed if p == partition), default=-1)
        assert offset <= top + 1, (partition, offset, top)
    return committed


def produce(port: int, topic: str, tag: str, count: int) -> set[tuple[int, int]]:
    with Producer("127.0.0.1", port, linger_s=0.01) as producer:
        futures = [producer.send(topic, f"{tag}-{i}", f"{tag}{i}") for i in range(count)]
        producer.flush()
    return {(f.result().partition, f.result().offset) for f in futures}


def all_handled_and_committed(
    r: redis.Redis,
    group: str,
    topic: str,
    everyone: list[ConsumerProcess],
    produced: set[tuple[int, int]],
) -> Callable[[], bool]:
    last = {}
    for partition, offset in produced:
        last[partition] = max(last.get(partition, -1), offset)

    def done() -> bool:
        committed = check_commits_never_pass_handed(r, group, topic, everyone)
        handed = set().union(*(c.handed() for c in everyone))
        return produced <= handed and all(committed.get(p) == o + 1 for p, o in last.items())

    return done


def test_three_consumers_on_three_pods_split_and_take_over(
    start_pod: Callable[..., Pod],
    redis_url: str,
    topic: str,
    consumers: list[ConsumerProcess],
    tmp_path: Path,
) -> None:
    settings = ("--session-timeout-ms", str(SESSION_MS), "--default-partitions", str(PARTITIONS))
    pods = [start_pod(redis_url, *RF1, *settings) for _ in range(3)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    for i, pod in enumerate(pods):
        consumers.append(ConsumerProcess(pod.port, group, topic, f"c{i}", tmp_path / f"c{i}"))
    r = redis.Redis.from_url(redis_url)
    wait_until(lambda: converged(r, group, topic, consumers), timeout=WAIT_S, interval=0.1)

    produced = produce(pods[0].port, topic, "a", 300)
    done = all_handled_and_committed(r, group, topic, consumers, produced)
    wait_until(done, timeout=WAIT_S, interval=0.1)
    for consumer in consumers:  # each handled its share: the partitions really were split
        assert consumer.handed()

    # c2 dies without LEAVE; what is produced now on its partitions waits for its session to
    # run out, then c0 and c1 take over (and keep every commit at or below what they got).
    victim = consumers[2]
    victim.kill()
    produced |= produce(pods[1].port, topic, "b", 300)
    survivors = consumers[:2]
    wait_until(lambda: converged(r, group, topic, survivors), timeout=WAIT_S, interval=0.1)
    done = all_handled_and_committed(r, group, topic, consumers, produced)
    wait_until(done, timeout=WAIT_S, interval=0.1)
    assert sorted(m.decode() for m in r.hkeys(KEYS.group(group, topic).members)) == ["c0", "c1"]
    # Everything the victim never got is now handled by the survivors.
    victim_last = victim.last_assignment()
    assert victim_last is not None
    survivors_handed = set().union(*(c.handed() for c in survivors))
    for partition, offset in produced - victim.handed():
        assert (partition, offset) in survivors_handed
    r.close()


def test_twenty_members_join_at_once_through_three_pods(
    start_pod: Callable[..., Pod], redis_url: str, topic: str
) -> None:
    # Default session timeout (10 s): nobody heartbeats here, nobody may expire.
    pods = [start_pod(redis_url, *RF1, "--default-partitions", "24") for _ in range(3)]
    group = f"g-{uuid.uuid4().hex[:8]}"
    ids = [f"m{i:02d}" for i in range(20)]
    clients = [Client("127.0.0.1", pods[i % 3].port) for i in range(20)]
    barrier = threading.Barrier(20)
    replies: dict[str, GroupAssignment] = {}

    def join(i: int) -> None:
        barrier.wait()
        replies[ids[i]] = clients[i].join(group, topic, ids[i])

    threads = [threading.Thread(target=join, args=(i,)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(replies) == ids
    # Each JOIN added one member: 20 generations, each handed out exactly once.
    assert sorted(reply.generation for reply in replies.values()) == list(range(1, 21))
    keys = KEYS.group(group, topic)
    with redis.Redis.from_url(redis_url) as r:
        assert int(r.hget(keys.meta, "generation")) == 20
        assert sorted(m.decode() for m in r.hkeys(keys.members)) == ids
    # The members behind learn the generation by JOINing again (no new generation) and all
    # see one consistent assignment.
    final = {m: clients[i].join(group, topic, m) for i, m in enumerate(ids)}
    assert {reply.generation for reply in final.values()} == {20}
    expected = assignors.round_robin(ids, 24)
    assert {m: reply.assigned for m, reply in final.items()} == expected
    for i, member in enumerate(ids):
        assert clients[i].sync(group, topic, member, 20).assigned == expected[member]
        clients[i].close()
