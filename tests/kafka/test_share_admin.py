"""Share groups' admin side (KIP-932) on two pods sharing one Redis: ShareGroupDescribe,
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets as raw
requests (confluent-kafka's AdminClient has none of them), share consumers reading where
the admin APIs put their share-partitions, and ListGroups / DescribeGroups / DeleteGroups
seeing share groups as Kafka shows them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import ConsumerGroupState, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
)

from adapter.kafka import errors
from adapter.kafka.versions import (
    ALTER_SHARE_GROUP_OFFSETS,
    API_VERSIONS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_GROUPS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    LIST_GROUPS,
    SHARE_GROUP_DESCRIBE,
)
from mapping.core.codec import entry_offset
from mapping.core.keys import Keys
from tests.kafka.group_helpers import produce
from tests.support.kafka import RawKafka
from tests.support.pods import RF1, Pod, start_all
from tests.support.share_groups import earliest, share_consumer

PREFIX = "shareadmin"
PARTITIONS = 3
PER_PARTITION = 10
BITS = 10
ACCEPT = 1


@pytest.fixture(scope="module")
def pods(redis_url: str) -> Iterator[list[Pod]]:
    started = [Pod(redis_url, *RF1, "--key-prefix", PREFIX) for _ in range(2)]
    start_all(started)
    yield started
    for pod in started:
        pod.stop()


def _topic(pods: list[Pod], partitions: int = PARTITIONS) -> str:
    topic = f"sa-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)[topic].result(15)
    produce(pods[0].bootstrap, topic, partitions, PER_PARTITION)
    return topic


def _read(consumer: ShareConsumer, wanted: int, rounds: int = 60) -> list[Any]:
    """Poll until ``wanted`` records came (implicitly accepted by the next poll), then a few
    more polls, so their acknowledgements are sent."""
    got: list[Any] = []
    for _ in range(rounds):
        got += [m for m in consumer.poll(0.5) if m.error() is None]
        if len(got) >= wanted:
            break
    for _ in range(2):
        got += [m for m in consumer.poll(0.3) if m.error() is None]
    return got


def _offsets(redis_url: str, topic: str, partition: int) -> list[int]:
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(Keys(PREFIX).partition(topic, partition).log)
    finally:
        client.close()
    return [entry_offset(e[0], BITS) for e in entries]


def _call(pod: Pod, api: Any, version: int, body: Any) -> Any:
    with RawKafka(pod.kafka_port) as raw:
        return raw.call(api, version, body)


def _describe_offsets(
    pod: Pod, group: str, topics: dict[str, list[int]] | None, version: int = 1
) -> Any:
    request = DESCRIBE_SHARE_GROUP_OFFSETS.request
    Group = request.DescribeShareGroupOffsetsRequestGroup
    Topic = Group.DescribeShareGroupOffsetsRequestTopic
    asked = (
        None if topics is None else [Topic(topic_name=t, partitions=ps) for t, ps in topics.items()]
    )
    body = request[version](groups=[Group(group_id=group, topics=asked)])
    (answer,) = _call(pod, DESCRIBE_SHARE_GROUP_OFFSETS, version, body).groups
    return answer


def _start_offsets(answer: Any) -> dict[tuple[str, int], tuple[int, int, int]]:
    """(topic, partition) -> (start offset, lag, error code)."""
    return {
        (t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


def _alter_body(group: str, offsets: dict[tuple[str, int], int]) -> Any:
    request = ALTER_SHARE_GROUP_OFFSETS.request
    Topic = request.AlterShareGroupOffsetsRequestTopic
    Partition = Topic.AlterShareGroupOffsetsRequestPartition
    topics: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append(Partition(partition_index=p, start_offset=o))
    return request[0](
        group_id=group, topics=[Topic(topic_name=t, partitions=ps) for t, ps in topics.items()]
    )


def _alter(pod: Pod, group: str, offsets: dict[tuple[str, int], int]) -> Any:
    return _call(pod, ALTER_SHARE_GROUP_OFFSETS, 0, _alter_body(group, offsets))


def _delete_offsets(pod: Pod, group: str, topics: list[str]) -> Any:
    request = DELETE_SHARE_GROUP_OFFSETS.request
    Topic = request.DeleteShareGroupOffsetsRequestTopic
    body = request[0](group_id=group, topics=[Topic(topic_name=t) for t in topics])
    return _call(pod, DELETE_SHARE_GROUP_OFFSETS, 0, body)


def _describe_group(pod: Pod, *groups: str, operations: bool = False) -> list[Any]:
    request = SHARE_GROUP_DESCRIBE.request
    body = request[1](group_ids=list(groups), include_authorized_operations=operations)
    return list(_call(pod, SHARE_GROUP_DESCRIBE, 1, body).groups)


def _until(check: Callable[[], Any], seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.3)


def _consumed_group(pods: list[Pod], topic: str) -> str:
    """A share group that read (and accepted) every record of ``topic``, its member gone."""
    group = f"g-{topic}"
    earliest(pods[0], group)
    consumer = share_consumer(pods[0], group)
    try:
        consumer.subscribe([topic])
        got = _read(consumer, PARTITIONS * PER_PARTITION)
    finally:
        consumer.close()
    assert len({m.value() for m in got}) == PARTITIONS * PER_PARTITION
    return group


def test_start_offsets_move_as_records_are_acknowledged(pods: list[Pod], redis_url: str) -> None:
    topic = _topic(pods)
    group = f"g-{topic}"
    earliest(pods[0], group)
    every = {topic: list(range(PARTITIONS))}
    before = _describe_offsets(pods[1], group, every)
    assert before.error_code == errors.NONE
    assert _start_offsets(before) == {(topic, p): (-1, -1, 0) for p in range(PARTITIONS)}

    group = _consumed_group(pods, topic)
    for pod in pods:  # any pod answers alike
        answer = _describe_offsets(pod, group, None)  # null topics: all with state
        assert answer.error_code == errors.NONE
        ends = {(topic, p): _offsets(redis_url, topic, p)[-1] + 1 for p in range(PARTITIONS)}
        assert _start_offsets(answer) == {tp: (end, 0, 0) for tp, end in ends.items()}
        assert {t.topic_id for t in answer.topics} != {None}
    v0 = _describe_offsets(pods[0], group, every, version=0)  # v0: no lag on the wire
    assert {p.lag for t in v0.topics for p in t.partitions} == {-1}
    assert {p.start_offset for t in v0.topics for p in t.partitions} == set(ends.values())


def test_alter_to_earlier_then_a_new_consumer_reads_from_there(
    pods: list[Pod], redis_url: str
) -> None:
    topic = _topic(pods)
    group = _consumed_group(pods, topic)
    first = _offsets(redis_url, topic, 0)
    answer = _alter(pods[1], group, {(topic, 0): first[4]})
    assert answer.error_code == errors.NONE
    (result,) = answer.responses
    assert [(p.partition_index, p.error_code) for p in result.partitions] == [(0, errors.NONE)]
    assert _start_offsets(_describe_offsets(pods[0], group, {topic: [0]})) == {
        (topic, 0): (first[4], PER_PARTITION - 4, 0)
    }
    consumer = share_consumer(pods[1], group)
    try:
        consumer.subscribe([topic])
        got = _read(consumer, PER_PARTITION - 4, rounds=40)
    finally:
        consumer.close()
    assert sorted((m.partition(), m.offset()) for m in got) == [(0, o) for o in first[4:]]


def test_alter_and_delete_refused_while_the_group_has_members(pods: list[Pod]) -> None:
    topic = _topic(pods)
    group = f"g-{topic}"
    earliest(pods[0], group)
    consumer = share_consumer(pods[0], group)
    try:
        consumer.subscribe([topic])
        assert _read(consumer, 1)
        altered = _alter(pods[1], group, {(topic, 0): 0})
        assert altered.error_code == errors.NON_EMPTY_GROUP
        deleted = _delete_offsets(pods[1], group, [topic])
        assert deleted.error_code == errors.NON_EMPTY_GROUP
        (described,) = _describe_group(pods[1], group)
        assert described.group_state == "Stable"
    finally:
        consumer.close()
    assert _until(lambda: _describe_group(pods[1], group)[0].group_state == "Empty")


def test_deleted_offsets_start_again_by_auto_offset_reset(pods: list[Pod], redis_url: str) -> None:
    topic = _topic(pods)
    group = _consumed_group(pods, topic)
    answer = _delete_offsets(pods[1], group, [topic, "sa-no-such-topic"])
    assert answer.error_code == errors.NONE
    assert {(t.topic_name, t.error_code) for t in answer.responses} == {
        (topic, errors.NONE),
        ("sa-no-such-topic", errors.UNKNOWN_TOPIC_OR_PARTITION),
    }
    after = _describe_offsets(pods[0], group, {topic: list(range(PARTITIONS))})
    assert {v for v in _start_offsets(after).values()} == {(-1, -1, 0)}
    assert _describe_offsets(pods[0], group, None).topics == []
    consumer = share_consumer(pods[1], group)  # earliest: every record again
    try:
        consumer.subscribe([topic])
        got = _read(consumer, PARTITIONS * PER_PARTITION)
    finally:
        consumer.close()
    assert len({m.value() for m in got}) == PARTITIONS * PER_PARTITION


def test_share_group_describe_shows_two_members_and_their_assignment(
    pods: list[Pod],
) -> None:
    spread, shared = _topic(pods), _topic(pods, partitions=1)
    group = f"g-{spread}"
    consumers = [
        share_consumer(pod, group, **{"client.id": f"reader-{i}"}) for i, pod in enumerate(pods)
    ]
    try:
        for consumer in consumers:
            consumer.subscribe([spread, shared])

        def two_members() -> Any:
            for consumer in consumers:
                consumer.poll(0.2)
            (found,) = _describe_group(pods[0], group, operations=True)
            return found if len(found.members) == 2 else None

        described = _until(two_members)
        assert described is not None and described.error_code == errors.NONE
        assert (described.group_state, described.assignor_name) == ("Stable", "simple")
        assert described.group_epoch >= 2 and described.assignment_epoch == described.group_epoch
        assert described.authorized_operations > 0  # the group's operations, not -2^31
        assigned: dict[str, list[set[int]]] = {spread: [], shared: []}
        # who each member is: the client id its join carried, the host it came from
        assert sorted(m.client_id for m in described.members) == ["reader-0", "reader-1"]
        assert {m.client_host for m in described.members} == {"/127.0.0.1"}
        for member in described.members:
            assert sorted(member.subscribed_topic_names) == sorted([spread, shared])
            assert member.member_epoch > 0
            for tp in member.assignment.topic_partitions:
                assert tp.topic_id is not None and tp.topic_id.int
                assigned[tp.topic_name].append(set(tp.partitions))
        first, second = assigned[spread]  # fewer members than partitions: disjoint
        assert not first & second and first | second == set(range(PARTITIONS))
        assert assigned[shared] == [{0}, {0}]  # more members than partitions: shared
    finally:
        for consumer in consumers:
            consumer.close()


def test_unknown_groups_and_names_of_other_group_types(pods: list[Pod]) -> None:
    unknown, empty = _describe_group(pods[0], "sa-no-such-group", "")
    assert unknown.error_code == errors.GROUP_ID_NOT_FOUND
    assert unknown.error_message == "Group sa-no-such-group not found."
    assert empty.error_code == errors.INVALID_GROUP_ID
    topic = _topic(pods, partitions=1)
    assert _alter(pods[0], "sa-no-such-group", {(topic, 0): 0}).error_code == (
        errors.GROUP_ID_NOT_FOUND
    )
    assert _delete_offsets(pods[0], "sa-no-such-group", [topic]).error_code == (
        errors.GROUP_ID_NOT_FOUND
    )
    assert _alter(pods[0], "", {(topic, 0): 0}).error_code == errors.INVALID_GROUP_ID
    # Kafka answers offsets of named topics without state as uninitialised, without error
    answer = _describe_offsets(pods[0], "sa-no-such-group", {topic: [0], "sa-nothing": [0]})
    assert answer.error_code == errors.NONE
    assert set(_start_offsets(answer).values()) == {(-1, -1, 0)}


def test_bad_input_gets_its_error_and_the_connection_stays_usable(pods: list[Pod]) -> None:
    topic = _topic(pods, partitions=1)
    group = _consumed_group_one(pods, topic)
    with RawKafka(pods[0].kafka_port) as raw:
        body = _alter_body(group, {(topic, 0): -5, (topic, 7): 0, ("sa-nothing", 0): 0})
        answer = raw.call(ALTER_SHARE_GROUP_OFFSETS, 0, body)
        assert answer.error_code == errors.NONE
        codes = {
            (t.topic_name, p.partition_index): p.error_code
            for t in answer.responses
            for p in t.partitions
        }
        assert codes == {
            (topic, 0): errors.INVALID_REQUEST,
            (topic, 7): errors.UNKNOWN_TOPIC_OR_PARTITION,
            ("sa-nothing", 0): errors.UNKNOWN_TOPIC_OR_PARTITION,
        }
        versions = raw.call(API_VERSIONS, 3, API_VERSIONS.request[3](
            client_software_name="t", client_software_version="1"
        ))  # fmt: skip
        assert versions.error_code == errors.NONE
        by_key = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
        assert by_key[77] == (1, 1) and by_key[90] == (0, 1)
        assert by_key[91] == (0, 0) and by_key[92] == (0, 0)
        assert [(f.name, f.min_version_level, f.max_version_level)
                for f in versions.finalized_features] == [("share.version", 1, 1)]  # fmt: skip


def _consumed_group_one(pods: list[Pod], topic: str) -> str:
    group = f"g-{topic}"
    earliest(pods[0], group)
    consumer = share_consumer(pods[0], group)
    try:
        consumer.subscribe([topic])
        assert len(_read(consumer, PER_PARTITION)) >= PER_PARTITION
    finally:
        consumer.close()
    return group


def _listed(pods: list[Pod], version: int, types: list[str] | None = None) -> dict[str, Any]:
    request = LIST_GROUPS.request
    found: dict[str, Any] = {}
    for pod in pods:  # each pod lists the groups it coordinates
        body = request[version](states_filter=[], types_filter=types or [])
        for g in _call(pod, LIST_GROUPS, version, body).groups:
            found[g.group_id] = g
    return found


def test_list_describe_delete_groups_know_share_groups(pods: list[Pod]) -> None:
    topic = _topic(pods, partitions=1)
    group = _consumed_group_one(pods, topic)
    listed = _listed(pods, 5)[group]
    assert (listed.protocol_type, listed.group_state, listed.group_type) == (
        "share",
        "Empty",
        "share",
    )
    assert group in _listed(pods, 5, ["share"])
    assert group not in _listed(pods, 5, ["consumer", "classic"])
    assert _listed(pods, 4)[group].group_state == "Empty"  # no types filter: every type
    request = DESCRIBE_GROUPS.request
    (v6,) = _call(pods[1], DESCRIBE_GROUPS, 6, request[6](groups=[group])).groups
    assert (v6.error_code, v6.group_state) == (errors.GROUP_ID_NOT_FOUND, "Dead")
    assert v6.error_message == f"Group {group} is not a classic group."
    (v5,) = _call(pods[1], DESCRIBE_GROUPS, 5, request[5](groups=[group])).groups
    assert (v5.error_code, v5.group_state) == (errors.NONE, "Dead")

    admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
    # librdkafka lists groups of protocol type "" or "consumer" only, and describes a share
    # group as Kafka answers a group that is not classic (Dead, no members)
    listings = admin.list_consumer_groups().result(timeout=15).valid
    assert group not in {g.group_id for g in listings}
    described = admin.describe_consumer_groups([group])[group].result(timeout=15)
    assert (described.state, described.members) == (ConsumerGroupState.DEAD, [])

    consumer = share_consumer(pods[1], group)
    try:  # a member: not deleted
        consumer.subscribe([topic])
        _read(consumer, 1, rounds=6)
        with pytest.raises(Exception) as refused:
            admin.delete_consumer_groups([group])[group].result(timeout=15)
        assert "NON_EMPTY_GROUP" in str(refused.value)
    finally:
        consumer.close()
    _until(lambda: _describe_group(pods[0], group)[0].group_state == "Empty")
    admin.delete_consumer_groups([group])[group].result(timeout=15)
    (gone,) = _describe_group(pods[0], group)
    assert gone.error_code == errors.GROUP_ID_NOT_FOUND
    assert group not in _listed(pods, 5)
    assert (
        _describe_offsets(pods[0], group, {topic: [0]}).topics[0].partitions[0].start_offset == -1
    )
