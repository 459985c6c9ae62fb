"""Kafka consumer groups over the wire with real clients, on three pods sharing one Redis:
each client bootstraps to a different pod (any pod coordinates any group)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaConsumer

from adapter.client import RequestFailed
from mapping.core.keys import Keys
from tests.kafka.group_helpers import (
    CONFLUENT,
    GROUP_PREFIX,
    KIP848,
    POD_ARGS,
    SESSION_MS,
    AioMember,
    owned,
    poll_until,
    produce,
)
from tests.support import ROOT
from tests.support.pods import Pod, start_all

PARTITIONS = 6
PER_PARTITION = 5


@pytest.fixture(scope="module")
def group_pods(redis_url: str) -> Iterator[list[Pod]]:
    pods = [Pod(redis_url, *POD_ARGS) for _ in range(3)]
    start_all(pods)
    starts = [len(pod.log()) for pod in pods]
    yield pods
    for pod in pods:
        pod.stop()
    for pod, start in zip(pods, starts, strict=True):
        assert "request failed" not in pod.log()[start:], pod.log_path


@pytest.fixture
def group_topic(group_pods: list[Pod], topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": group_pods[0].bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)
    produce(group_pods[0].bootstrap, topic, PARTITIONS, PER_PARTITION)
    return topic


def _confluent(pod: Pod, group: str, **config: object) -> Consumer:
    return Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **CONFLUENT, **config})


def protocol_member(pod: Pod, group: str, protocol: str) -> Consumer:
    """A confluent-kafka member of ``group`` in the classic protocol or KIP-848 (``consumer``)."""
    settings = CONFLUENT if protocol == "classic" else KIP848
    return Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **settings})


def test_two_confluent_consumers_on_two_pods_split_the_partitions(
    group_pods: list[Pod], group_topic: str
) -> None:
    group = f"g-{group_topic}"
    consumers = [_confluent(group_pods[i], group) for i in range(2)]
    got: list[list[bytes]] = [[], []]
    try:
        for consumer in consumers:
            consumer.subscribe([group_topic])

        def poll_all() -> None:
            for i, consumer in enumerate(consumers):
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    got[i].append(message.value())

        def settled() -> bool:
            shares = [owned(c) for c in consumers]
            return len(got[0]) + len(got[1]) == PARTITIONS * PER_PARTITION and all(shares)

        poll_until([poll_all], settled)
        shares = [owned(c) for c in consumers]
        assert shares[0] | shares[1] == set(range(PARTITIONS))
        assert not shares[0] & shares[1]
        # each consumed exactly its own partitions' records, none twice
        for i in range(2):
            assert len(got[i]) == len(set(got[i]))
            assert {int(v.split(b"-")[0]) for v in got[i]} == shares[i]
    finally:
        for consumer in consumers:
            consumer.close()


def test_confluent_kafka_python_and_aiokafka_in_one_group_then_one_leaves(
    group_pods: list[Pod], group_topic: str
) -> None:
    group = f"g-{group_topic}"
    confluent = _confluent(group_pods[0], group)
    python = KafkaConsumer(
        bootstrap_servers=group_pods[1].bootstrap,
        group_id=group,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=300,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    aio = AioMember(group_pods[2].bootstrap, group, group_topic)
    got: dict[str, list[bytes]] = {"confluent": [], "python": []}

    def poll_sync() -> None:
        message = confluent.poll(0.1)
        if message is not None and message.error() is None:
            got["confluent"].append(message.value())
        for records in python.poll(timeout_ms=100).values():
            got["python"].extend(r.value for r in records)

    def owned_by_each() -> list[set[int]]:
        return [
            owned(confluent),
            {tp.partition for tp in python.assignment()},
            aio.owned,
        ]

    def total() -> int:
        return len(got["confluent"]) + len(got["python"]) + len(aio.got)

    def state() -> object:
        return owned_by_each(), {k: len(v) for k, v in got.items()}, len(aio.got), aio.failure

    try:
        confluent.subscribe([group_topic])
        python.subscribe([group_topic])
        aio.start()
        everything = PARTITIONS * PER_PARTITION
        poll_until([poll_sync], lambda: total() == everything and all(owned_by_each()), state=state)
        split = owned_by_each()
        assert set().union(*split) == set(range(PARTITIONS))
        assert sum(len(s) for s in split) == PARTITIONS  # no partition twice
        consumed = got["confluent"] + got["python"] + aio.got
        assert len(consumed) == len(set(consumed)) == everything

        # aiokafka leaves (LeaveGroup): the other two take its partitions at once, well
        # before its session would have run out, and consume what is produced next on every
        # partition (nothing was committed: they may read the older records again)
        aio.leave()
        produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="late")

        def late() -> set[int]:
            survivors = got["confluent"] + got["python"]
            return {int(v.split(b"-")[0]) for v in survivors if b"-late" in v}

        poll_until(
            [poll_sync],
            lambda: (
                owned_by_each()[0] | owned_by_each()[1] == set(range(PARTITIONS))
                and late() == set(range(PARTITIONS))
            ),
            state=state,
        )
        assert not owned_by_each()[0] & owned_by_each()[1]
    finally:
        confluent.close()
        python.close()
        if aio.is_alive():
            aio.leave()


def _consume_all(consumer: Consumer, count: int) -> list:
    got: list = []
    poll_until(
        [lambda: got.extend(m for m in [consumer.poll(0.2)] if m is not None and not m.error())],
        lambda: len(got) >= count,
    )
    return got


def test_commits_resume_and_are_shared_with_v1(group_pods: list[Pod], group_topic: str) -> None:
    group = f"g-{group_topic}"
    first = _confluent(group_pods[0], group)
    try:
        first.subscribe([group_topic])
        read = _consume_all(first, PARTITIONS * PER_PARTITION)
        first.commit(asynchronous=False)
        committed = {tp.partition: tp.offset for tp in first.committed(first.assignment())}
    finally:
        first.close()
    last = {}
    for m in read:
        last[m.partition()] = max(last.get(m.partition(), -1), m.offset())
    assert committed == {p: o + 1 for p, o in last.items()}

    # V1 OFFSET answers what the Kafka group committed
    with group_pods[1].client() as v1:
        for p, offset in committed.items():
            assert v1.committed(group, group_topic, p) == offset

    # a kafka-python consumer of the group on another pod resumes where the commit left
    produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="late")
    python = KafkaConsumer(
        group_topic,
        bootstrap_servers=group_pods[2].bootstrap,
        group_id=group,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=300,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    resumed: list[bytes] = []
    try:
        poll_until(
            [lambda: [resumed.extend(r.value for r in rs) for rs in python.poll(200).values()]],
            lambda: len(resumed) >= PARTITIONS,
        )
        python.commit()
    finally:
        python.close()
    assert sorted(resumed) == sorted(f"{p}-late0".encode() for p in range(PARTITIONS))

    # a V1 COMMIT moves partition 0 back to its first record: a Kafka consumer resumes there
    first_of_0 = min(m.offset() for m in read if m.partition() == 0)
    with group_pods[1].client() as v1:
        member = v1.join(group, group_topic, "v1-member")
        v1.commit(group, group_topic, "v1-member", member.generation, 0, first_of_0)
        v1.leave(group, group_topic, "v1-member", member.generation)
    again = _confluent(group_pods[2], group)
    try:
        again.subscribe([group_topic])
        replayed = _consume_all(again, PER_PARTITION + 1)
    finally:
        again.close()
    assert sorted(m.value() for m in replayed) == sorted(
        [f"0-{i}".encode() for i in range(PER_PARTITION)] + [b"0-late0"]
    )


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_killed_member_is_replaced_after_its_session_timeout(
    group_pods: list[Pod], group_topic: str, tmp_path: Path, protocol: str
) -> None:
    """A member SIGKILLed (no LeaveGroup, no leaving heartbeat) in the classic protocol and
    in KIP-848 (group.protocol=consumer): its partitions go to the survivor once its session
    runs out. The split counts as settled when the two cover the topic (KIP-848 hands
    partitions over one heartbeat at a time, not all at once as the eager protocol does)."""
    group = f"g-{protocol}-{group_topic}"
    status = tmp_path / "member"
    status.write_text("")
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.kafka.group_member", group_pods[1].bootstrap, group,
         group_topic, str(status), protocol],
        cwd=ROOT,
    )  # fmt: skip
    survivor = protocol_member(group_pods[0], group, protocol)
    try:
        survivor.subscribe([group_topic])

        def child_owns() -> set[int]:
            return {int(p) for p in status.read_text().split(",") if p}

        poll_until(
            [lambda: survivor.poll(0.2)],
            lambda: (
                bool(child_owns())
                and bool(owned(survivor))
                and child_owns() | owned(survivor) == set(range(PARTITIONS))
            ),
            state=lambda: (child_owns(), owned(survivor)),
        )
        assert not child_owns() & owned(survivor)
        child.kill()  # the group notices when its session runs out
        child.wait(timeout=10)
        poll_until(
            [lambda: survivor.poll(0.2)],
            lambda: owned(survivor) == set(range(PARTITIONS)),
            state=lambda: owned(survivor),
        )
    finally:
        survivor.close()
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_members_get_the_partitions_a_topic_grows(
    group_pods: list[Pod], group_topic: str, protocol: str
) -> None:
    """A topic grown by CreatePartitions while two members consume it: the new partitions
    are assigned without a restart, split between the members. Classic: the client leader
    sees the count change in its metadata and rejoins; KIP-848: the pods' target assignment
    follows the topic's partition count."""
    group = f"g-grow-{protocol}-{group_topic}"
    members = [protocol_member(group_pods[i], group, protocol) for i in range(2)]
    admin = AdminClient({"bootstrap.servers": group_pods[2].bootstrap})
    try:
        for member in members:
            member.subscribe([group_topic])

        def covered(count: int) -> bool:
            shares = [owned(m) for m in members]
            return all(shares) and shares[0] | shares[1] == set(range(count))

        poll_all = [lambda m=m: m.poll(0.1) for m in members]
        poll_until(poll_all, lambda: covered(PARTITIONS), state=lambda: [owned(m) for m in members])
        grown = PARTITIONS * 2
        futures = admin.create_partitions([NewPartitions(group_topic, grown)])
        futures[group_topic].result(timeout=15)
        poll_until(poll_all, lambda: covered(grown), state=lambda: [owned(m) for m in members])
        assert not owned(members[0]) & owned(members[1])
    finally:
        for member in members:
            member.close()


def _generation(redis_url: str, group: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        meta = Keys(GROUP_PREFIX).kafka_group(group).meta
        return int(client.hget(meta, "generation") or -1)
    finally:
        client.close()


def test_a_static_member_restarting_keeps_its_partitions_without_a_rebalance(
    group_pods: list[Pod], group_topic: str, redis_url: str
) -> None:
    group = f"g-{group_topic}"
    members = [
        _confluent(group_pods[i], group, **{"group.instance.id": f"static-{i}"}) for i in range(2)
    ]
    try:
        for member in members:
            member.subscribe([group_topic])
        poll_until(
            [lambda: [m.poll(0.1) for m in members]],
            lambda: (
                all(owned(m) for m in members)
                and owned(members[0]) | owned(members[1]) == set(range(PARTITIONS))
            ),
        )
        before = owned(members[0])
        generation = _generation(redis_url, group)
        members[0].close()  # a static member leaves no group on close (KIP-345)
        members[0] = _confluent(group_pods[2], group, **{"group.instance.id": "static-0"})
        members[0].subscribe([group_topic])
        poll_until([lambda: [m.poll(0.1) for m in members]], lambda: bool(owned(members[0])))
        assert owned(members[0]) == before
        assert _generation(redis_url, group) == generation
    finally:
        for member in members:
            member.close()


def test_cooperative_sticky_keeps_partitions_when_a_member_joins(
    group_pods: list[Pod], group_topic: str
) -> None:
    group = f"g-{group_topic}"
    sticky = {"partition.assignment.strategy": "cooperative-sticky"}
    members = [_confluent(group_pods[i], group, **sticky) for i in range(2)]
    try:
        for member in members:
            member.subscribe([group_topic])

        def split() -> bool:
            shares = [owned(m) for m in members]
            return (
                all(shares)
                and set().union(*shares) == set(range(PARTITIONS))
                and sum(len(o) for o in shares) == PARTITIONS
            )

        poll_until([lambda: [m.poll(0.1) for m in members]], split)
        before = [owned(m) for m in members]
        members.append(_confluent(group_pods[2], group, **sticky))
        members[2].subscribe([group_topic])
        poll_until(
            [lambda: [m.poll(0.1) for m in members]],
            lambda: split() and all(len(owned(m)) == 2 for m in members),
            state=lambda: [owned(m) for m in members],
        )
        for i in range(2):  # sticky: the first two kept what they still own
            assert owned(members[i]) <= before[i]
    finally:
        for member in members:
            member.close()


def test_admin_lists_describes_and_deletes_groups(group_pods: list[Pod], group_topic: str) -> None:
    group = f"g-{group_topic}"
    member = _confluent(group_pods[1], group)
    admin = AdminClient({"bootstrap.servers": group_pods[2].bootstrap})
    try:
        member.subscribe([group_topic])
        poll_until([lambda: member.poll(0.1)], lambda: owned(member) == set(range(PARTITIONS)))
        member.commit(asynchronous=False, offsets=[TopicPartition(group_topic, 0, 1)])
        listed = admin.list_consumer_groups().result(timeout=15)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert described.group_id == group
        assert len(described.members) == 1
        assigned = described.members[0].assignment.topic_partitions
        assert {tp.partition for tp in assigned} == set(range(PARTITIONS))
        # a group with a live member is not deleted
        refused = admin.delete_consumer_groups([group])[group]
        with pytest.raises(KafkaException) as failure:
            refused.result(timeout=15)
        assert failure.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    admin.delete_consumer_groups([group])[group].result(timeout=15)
    listed = admin.list_consumer_groups().result(timeout=15)
    assert group not in {g.group_id for g in listed.valid}
    with group_pods[0].client() as v1:
        assert v1.committed(group, group_topic, 0) == 0  # the offsets went with it


def test_v1_join_is_refused_while_kafka_consumers_of_the_group_are_live(
    group_pods: list[Pod], group_topic: str
) -> None:
    group = f"g-{group_topic}"
    member = _confluent(group_pods[0], group)
    try:
        member.subscribe([group_topic])
        poll_until([lambda: member.poll(0.1)], lambda: bool(owned(member)))
        with group_pods[1].client() as v1:
            with pytest.raises(RequestFailed) as refused:
                v1.join(group, group_topic, "v1-member")
            assert refused.value.code == "GROUP_IN_USE"
            assert v1.ping() == "pong"  # the connection goes on
    finally:
        member.close()  # leaves the group
    with group_pods[1].client() as v1:
        assert v1.join(group, group_topic, "v1-member").assigned == list(range(PARTITIONS))
