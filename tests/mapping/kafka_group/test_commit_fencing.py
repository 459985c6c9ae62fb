"""Atomic commits (issue 26, item 2) on a single Redis: an OffsetCommit whose pod stalls
between the membership check and the write never lands over the offsets the group's next
generation read or committed meanwhile, in the classic protocol (expiry, a new generation,
a replaced static member), under KIP-848 (member epoch moved, member expired) and for
commits from outside group management. The scenarios are in ``fencing.py`` (the Redis
Cluster tests run them too). Then the same with real pods: one stopped with SIGSTOP right
after it checked a commit (``redis_hold.py`` places the stop between check and write)."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from adapter.kafka import errors
from adapter.kafka.versions import HEARTBEAT, JOIN_GROUP, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP
from mapping.core.keys import Keys
from mapping.kafka_group.offsets import KAFKA_GROUP_COMMIT_CHECK
from tests.mapping.kafka_group.fencing import BASE, NEWER, OLD, SCENARIOS
from tests.mapping.kafka_group.redis_hold import RedisHold
from tests.support.kafka import RawKafka
from tests.support.kafka_groups import subscription
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

ROUNDS = 4  # the live test's stale commits: reading only and committing in turn


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_commit_held_after_its_check_never_goes_backwards(
    redis_url: str, scenario: Callable[[str], Awaitable[None]]
) -> None:
    asyncio.run(scenario(redis_url))


class RawMember:
    """A classic group member speaking the Kafka protocol to one pod, request by request."""

    def __init__(self, port: int, group: str, topic: str, session_ms: int) -> None:
        self.raw = RawKafka(port)
        self.group, self.topic, self.session_ms = group, topic, session_ms
        self.member_id, self.generation, self.leader = "", -1, ""

    def join(self) -> None:
        request = JOIN_GROUP.request[5]
        for _ in range(2):  # MEMBER_ID_REQUIRED first (JoinGroup v4+)
            body = request(
                group_id=self.group,
                session_timeout_ms=self.session_ms,
                rebalance_timeout_ms=5000,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[
                    request.JoinGroupRequestProtocol(
                        name="range", metadata=subscription(self.topic)
                    )
                ],
            )
            reply = self.raw.call(JOIN_GROUP, 5, body)
            self.member_id = reply.member_id
            if reply.error_code != errors.MEMBER_ID_REQUIRED:
                break
        assert reply.error_code == errors.NONE, reply
        self.generation, self.leader = reply.generation_id, reply.leader

    def sync(self, assignments: dict[str, bytes]) -> bytes:
        request = SYNC_GROUP.request[3]
        shares = [
            request.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in assignments.items()
        ]
        body = request(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            assignments=shares,
        )
        reply = self.raw.call(SYNC_GROUP, 3, body)
        assert reply.error_code == errors.NONE, reply
        return reply.assignment

    def heartbeat(self) -> int:
        body = HEARTBEAT.request[3](
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
        )
        return self.raw.call(HEARTBEAT, 3, body).error_code

    def commit_request(self, offset: int) -> Any:
        request = OFFSET_COMMIT.request[7]
        topic = request.OffsetCommitRequestTopic
        partition = topic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1
        )
        return request(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            topics=[topic(name=self.topic, partitions=[partition])],
        )

    def commit(self, offset: int) -> int:
        return commit_code(self.raw.call(OFFSET_COMMIT, 7, self.commit_request(offset)))

    def committed(self) -> int:
        """Partition 0's committed offset (OffsetFetch: as a consumer reads where to start)."""
        request = OFFSET_FETCH.request[7]
        topics = [request.OffsetFetchRequestTopic(name=self.topic, partition_indexes=[0])]
        reply = self.raw.call(OFFSET_FETCH, 7, request(group_id=self.group, topics=topics))
        return reply.topics[0].partitions[0].committed_offset

    def close(self) -> None:
        self.raw.close()


def commit_code(reply: Any) -> int:
    [code] = [p.error_code for t in reply.topics for p in t.partitions]
    return code


def _round(paused: Pod, other: Pod, hold: RedisHold, prefix: str, topic: str, n: int) -> None:
    """One stale commit: m1 and m2 form generation 1 through ``other``; m1's next commit goes
    through ``paused``, which is stopped right after the commit's check; m1 (stuck with it)
    goes silent, its session runs out, m2 rebalances alone through ``other`` and reads
    where to start (and, in even rounds, commits further); then ``paused`` goes on."""
    group = f"fence-{n}-{uuid.uuid4().hex[:8]}"
    m1 = RawMember(other.kafka_port, group, topic, session_ms=1000)
    m2 = RawMember(other.kafka_port, group, topic, session_ms=10_000)
    stale = RawKafka(paused.kafka_port)
    try:
        with ThreadPoolExecutor(2) as pool:  # JoinGroup waits for the barrier
            list(pool.map(RawMember.join, (m1, m2)))
            assert m1.generation == m2.generation
            leader, follower = (m1, m2) if m1.leader == m1.member_id else (m2, m1)
            waiting = pool.submit(follower.sync, {})
            leader.sync({m1.member_id: b"0", m2.member_id: b"1,2"})
            waiting.result()
        assert m1.commit(BASE) == errors.NONE
        history = [m2.committed()]

        check = KAFKA_GROUP_COMMIT_CHECK.sha.encode()
        hold.hold_after(check, Keys(prefix).kafka_group(group).meta.encode())
        correlation = stale.send(OFFSET_COMMIT, 7, m1.commit_request(OLD))
        hold.wait_held()
        paused.signal(signal.SIGSTOP)
        try:
            wait_until(lambda: m2.heartbeat() == errors.REBALANCE_IN_PROGRESS, 10, 0.1)
            m2.join()  # m1's session ran out: m2 alone forms the next generation
            assert m2.generation > m1.generation
            m2.sync({m2.member_id: b"0,1,2"})
            history.append(m2.committed())  # where m2 starts partition 0 from
            if n % 2 == 0:
                assert m2.commit(NEWER) == errors.NONE
                history.append(m2.committed())
        finally:
            paused.signal(signal.SIGCONT)
            hold.release()
        reply = stale.receive(OFFSET_COMMIT, 7)
        assert reply.header.correlation_id == correlation
        history.append(m2.committed())
        if n % 2 == 1:  # m2 commits its progress from where it started
            assert m2.commit(BASE + 5) == errors.NONE
            history.append(m2.committed())
        assert history == sorted(history) and OLD not in history, (
            f"round {n}: the committed offset went backwards: {history}"
        )
        assert commit_code(reply) == errors.UNKNOWN_MEMBER_ID, reply
    finally:
        for member in (m1, m2):
            member.close()
        stale.close()


@pytest.mark.slow
def test_a_pod_paused_between_check_and_write_never_takes_a_commit_backwards(
    redis_url: str,
) -> None:
    """Two pods, a group of two consumers; a pod stopped (SIGSTOP) right after it checked an
    OffsetCommit, past the committer's session, while the group rebalances and commits
    through the other pod; then resumed (SIGCONT): the committed offset never goes back,
    and the stale commit is answered UNKNOWN_MEMBER_ID. Repeated, reading only and
    committing in turn."""
    prefix = f"fence{uuid.uuid4().hex[:8]}"
    args = (*RF1, "--key-prefix", prefix, "--no-replicator")
    with RedisHold(redis_url) as hold:
        # a long Redis timeout: the held write waits out the pause, as on a real SIGSTOP
        paused = Pod(hold.url, *args, "--redis-timeout-ms", "60000")
        other = Pod(redis_url, *args)
        try:
            paused.start()
            other.start()
            topic = f"t-{uuid.uuid4().hex[:8]}"
            with other.client() as client:
                client.produce(topic, "k", "v")  # the topic exists from here on
            for n in range(ROUNDS):
                _round(paused, other, hold, prefix, topic, n)
        finally:
            paused.signal(signal.SIGCONT)
            paused.stop()
            other.stop()
