"""Group ids as Kafka clients use them, on pods under a fresh key prefix: ListGroups answers
the groups the pod coordinates (clients ask every broker and concatenate, so each group is
listed once, also across pods behind one address), a group id of any characters works end to
end (``roundrobin,range``, braces, spaces, ``%``, non-ASCII), and a committed leader epoch
comes back from OffsetFetch."""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka import errors
from adapter.kafka.versions import (
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LIST_GROUPS,
    OFFSET_FETCH,
)
from mapping.connection.embedded import free_port
from mapping.core.keys import Keys
from mapping.operations import inspection
from tests.kafka.group_helpers import CONFLUENT, owned, poll_until, produce
from tests.support.kafka import RawKafka, commit_offsets, fetch_offsets
from tests.support.pods import RF1, Pod, start_all
from tests.support.waiting import wait_until

PARTITIONS = 3
PER_PARTITION = 4
ODD_GROUPS = ["roundrobin,range", "a group {with}: odd % characters, é ü 日本"]


def _prefix() -> str:
    return f"kgids-{uuid.uuid4().hex[:8]}"


def _start(redis_url: str, prefix: str, *advertised: str | None) -> list[Pod]:
    """One pod per entry of ``advertised`` (None: its own address), all registered."""
    pods = []
    for address in advertised:
        listener = ("--kafka-advertised-listener", address) if address else ()
        args = (*RF1, "--key-prefix", prefix, *listener)
        pods.append(Pod(redis_url, *args, "--kafka-group-initial-rebalance-delay-ms", "200"))
    start_all(pods)
    client = redis.Redis.from_url(redis_url)
    try:
        live = Keys(prefix).kafka_brokers[0]
        wait_until(lambda: client.zcard(live) == len(pods))
    except BaseException:
        for pod in pods:  # nothing of a failed start left running
            pod.stop()
        raise
    finally:
        client.close()
    return pods


@pytest.fixture(scope="module")
def id_pods(redis_url: str) -> Iterator[tuple[list[Pod], str]]:
    """Two pods, each its own broker, and their key prefix."""
    prefix = _prefix()
    pods = _start(redis_url, prefix, None, None)
    starts = [len(pod.log()) for pod in pods]
    yield pods, prefix
    for pod in pods:
        pod.stop()
    for pod, start in zip(pods, starts, strict=True):  # every request got its API's answer
        assert "request failed" not in pod.log()[start:], pod.log_path


def _create_topic(pod: Pod, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=15)


def _listed(pod: Pod) -> list[str]:
    """The group ids one pod's ListGroups answers (the newest version)."""
    version = LIST_GROUPS.max_version
    with RawKafka(pod.kafka_port) as raw:
        reply = raw.call(LIST_GROUPS, version, LIST_GROUPS.request[version]())
    assert reply.error_code == errors.NONE
    return [g.group_id for g in reply.groups]


def _coordinator_port(pod: Pod, group: str) -> int:
    with RawKafka(pod.kafka_port) as raw:
        body = FIND_COORDINATOR.request[3](key=group, key_type=0)
        reply = raw.call(FIND_COORDINATOR, 3, body)
    assert reply.error_code == errors.NONE
    return reply.port


def _consumer(pod: Pod, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **CONFLUENT})


def test_each_group_is_listed_by_its_coordinator_only(
    id_pods: tuple[list[Pod], str], topic: str
) -> None:
    """Kafka groups with live members, groups that only have committed offsets and V1-only
    groups: the two pods' ListGroups together name each exactly once, each on the pod
    FindCoordinator names; confluent-kafka's admin client (which asks every broker) too."""
    pods, _ = id_pods
    _create_topic(pods[0], topic)
    tag = topic[-6:]
    members = {f"live-{tag}-{i}": _consumer(pods[i % 2], f"live-{tag}-{i}") for i in range(3)}
    offset_only = [f"offsets-{tag}-{i}" for i in range(5)]
    v1_only = [f"v1-{tag}-{i}" for i in range(4)]
    try:
        for consumer in members.values():
            consumer.subscribe([topic])
        poll_until(
            [lambda: [c.poll(0.1) for c in members.values()]],
            lambda: all(owned(c) for c in members.values()),
        )
        for group in offset_only:
            assert commit_offsets(pods[1], group, topic, {0: 1}) == [errors.NONE]
        with pods[0].client() as v1:
            for group in v1_only:
                v1.join(group, topic, "c1")
        ours = {*members, *offset_only, *v1_only}

        listed = {pod.kafka_port: [g for g in _listed(pod) if g in ours] for pod in pods}
        counts = Counter(g for names in listed.values() for g in names)
        assert counts == dict.fromkeys(ours, 1)
        for group in ours:
            assert group in listed[_coordinator_port(pods[0], group)]

        admin = AdminClient({"bootstrap.servers": pods[1].bootstrap})
        result = admin.list_consumer_groups().result(timeout=15)
        assert not result.errors
        assert Counter(g.group_id for g in result.valid if g.group_id in ours) == dict.fromkeys(
            ours, 1
        )
    finally:
        for consumer in members.values():
            consumer.close()


def test_pods_behind_one_address_list_the_groups_of_that_broker(redis_url: str, topic: str) -> None:
    """Two pods advertising one address are one broker: each answers that broker's groups
    (whichever of them a client reaches); with a third pod of its own address, every group
    is listed once across the two brokers."""
    shared = f"127.0.0.1:{free_port()}"  # nothing listens there: the test asks each pod
    pods = _start(redis_url, _prefix(), shared, shared, None)
    try:
        with pods[2].client() as v1:
            v1.produce(topic, "k", "v")  # the topic exists (auto-created)
            groups = [f"g-{topic[-6:]}-{i}" for i in range(10)]
            for group in groups[:5]:
                v1.join(group, topic, "c1")
        for group in groups[5:]:
            assert commit_offsets(pods[0], group, topic, {0: 1}) == [errors.NONE]
        first, second, third = (set(_listed(pod)) for pod in pods)
        assert first == second
        assert not first & third
        assert first | third == set(groups)
    finally:
        for pod in pods:
            pod.stop()


@pytest.mark.parametrize("group", ODD_GROUPS)
def test_a_group_id_of_any_characters(
    id_pods: tuple[list[Pod], str], topic: str, redis_url: str, group: str
) -> None:
    """A confluent-kafka consumer of such a group subscribes, consumes, commits and reads
    its commits back; ListGroups, DescribeGroups and inspect name the group exactly as
    written; its keys in Redis keep one well-formed hash tag each."""
    pods, prefix = id_pods
    _create_topic(pods[0], topic)
    produce(pods[0].bootstrap, topic, PARTITIONS, PER_PARTITION)
    consumer = _consumer(pods[1], group)
    got: list[bytes] = []

    def poll() -> None:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got.append(message.value())

    try:
        consumer.subscribe([topic])
        poll_until([poll], lambda: len(got) == PARTITIONS * PER_PARTITION)
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
        positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
        assert [tp.offset for tp in committed] == [tp.offset for tp in positions]
        assert all(tp.error is None and tp.offset > 0 for tp in committed)

        admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
        listed = admin.list_consumer_groups().result(timeout=15)
        assert [g.group_id for g in listed.valid].count(group) == 1
        described = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert (described.group_id, len(described.members)) == (group, 1)
        for pod in pods:
            with RawKafka(pod.kafka_port) as raw:
                body = DESCRIBE_GROUPS.request[5](groups=[group])
                (found,) = raw.call(DESCRIBE_GROUPS, 5, body).groups
            assert (found.group_id, found.error_code, found.group_state) == (
                group,
                errors.NONE,
                "Stable",
            )
    finally:
        consumer.close()
    # a new member of the group resumes where the first committed: nothing left to read
    again = _consumer(pods[0], group)
    try:
        again.subscribe([topic])
        poll_until([lambda: again.poll(0.1)], lambda: owned(again) == set(range(PARTITIONS)))
        assert again.poll(1.0) is None
    finally:
        again.close()

    client = redis.Redis.from_url(redis_url)
    try:
        assert (group, topic) in inspection.group_pairs(client, Keys(prefix))
        view = inspection.group(client, Keys(prefix), group, topic)
        assert view is not None and [p.lag for p in view.partitions] == [0] * PARTITIONS
        assert client.exists(Keys(prefix).kafka_group(group).meta)
        names = [k.decode() for k in client.scan_iter(match=f"{prefix}:*group:*")]
        for name in names:  # one hash tag, of the key part's characters only
            assert re.fullmatch(r"[^{}]*\{[A-Za-z0-9._%:-]+\}[^{}]*", name), name
    finally:
        client.close()


def test_committed_leader_epoch_comes_back(id_pods: tuple[list[Pod], str], topic: str) -> None:
    """OffsetCommit v6+ stores each partition's committed leader epoch with its offset;
    OffsetFetch v5+ answers it (-1 where none was committed, and after a V1 COMMIT of the
    partition); confluent-kafka's commit and committed() carry it too."""
    pods, _ = id_pods
    _create_topic(pods[0], topic)
    group = f"g-{topic}"
    assert commit_offsets(pods[0], group, topic, {0: 10, 1: 20}, epoch=7, metadata="m") == [0, 0]
    assert commit_offsets(pods[0], group, topic, {2: 30}) == [errors.NONE]  # no epoch
    for version in range(OFFSET_FETCH.min_version, OFFSET_FETCH.max_version + 1):
        answered = fetch_offsets(pods[1], group, topic, [0, 1, 2], version)
        assert [p.committed_offset for p in answered] == [10, 20, 30]
        if version >= 5:
            assert [p.committed_leader_epoch for p in answered] == [7, 7, -1]

    with pods[1].client() as v1:
        assignment = v1.join(group, topic, "c1")
        v1.commit(group, topic, "c1", assignment.generation, 1, 25)
        v1.leave(group, topic, "c1", assignment.generation)
    answered = fetch_offsets(pods[0], group, topic, [0, 1], OFFSET_FETCH.max_version)
    assert [(p.committed_offset, p.committed_leader_epoch, p.metadata) for p in answered] == [
        (10, 7, "m"),
        (25, -1, ""),  # a V1 COMMIT has neither
    ]

    consumer = _consumer(pods[1], f"c-{topic}")
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 3, leader_epoch=4), TopicPartition(topic, 1, 5)],
            asynchronous=False,
        )
        back = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], 10)
        assert [(tp.offset, tp.leader_epoch) for tp in back] == [(3, 4), (5, None)]
    finally:
        consumer.close()


def test_logical_offsets_are_committed_as_the_positions_they_name(
    id_pods: tuple[list[Pod], str], topic: str
) -> None:
    """Kafka's logical offsets in an OffsetCommit (kafkajs's resetOffsets sends them: -2 the
    earliest, -1 the latest) are stored as the positions they name at commit time, which V1
    and every consumer read as positions; any other negative offset is refused."""
    pods, _ = id_pods
    _create_topic(pods[0], topic)
    produce(pods[0].bootstrap, topic, 2, 3)  # partitions 0 and 1; partition 2 stays empty
    group = f"reset-{topic}"
    with pods[1].client() as v1:
        logs = {p: [o for o, _ in v1.consume(topic, p, 0).records] for p in range(PARTITIONS)}
        assert commit_offsets(pods[0], group, topic, {0: -2, 1: -1, 2: -2}) == [errors.NONE] * 3
        ends = {p: log[-1] + 1 for p, log in logs.items() if log}
        assert [v1.committed(group, topic, p) for p in range(PARTITIONS)] == [
            logs[0][0],
            ends[1],
            0,  # an empty partition: its start and its end are 0
        ]
        assert commit_offsets(pods[0], group, topic, {0: -1, 1: -2}) == [errors.NONE] * 2
        assert [v1.committed(group, topic, p) for p in (0, 1)] == [ends[0], logs[1][0]]
        assert commit_offsets(pods[0], group, topic, {0: -3}) == [errors.INVALID_COMMIT_OFFSET_SIZE]
        assert v1.committed(group, topic, 0) == ends[0]  # unchanged
