"""Every version of every group API the pod announces, through the raw client: each gets
a decodable answer with the expected error (requests that need no live group), so every
version's response encodes (the kafka_pods fixture also checks no request fell back to
"request failed")."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.kafka import errors
from adapter.kafka.versions import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    Api,
)
from tests.support.kafka import RawKafka
from tests.support.pods import Pod

UNKNOWN_GROUP = "never-used-group"
# Kafka's only invalid group id (for the membership APIs and OffsetDelete; OffsetCommit,
# OffsetFetch, DescribeGroups and DeleteGroups accept it)
EMPTY_GROUP = ""
ODD_GROUP = "never used, {odd} group!"  # any characters make a group id


def _versions(api: Api) -> list[int]:
    return list(range(api.min_version, api.max_version + 1))


@pytest.mark.parametrize("version", _versions(FIND_COORDINATOR))
def test_find_coordinator(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = FIND_COORDINATOR.request[version]
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        if version < 4:
            reply = raw.call(FIND_COORDINATOR, version, request(key="g1", key_type=0))
            found = [(reply.error_code, reply.port)]
            again = raw.call(FIND_COORDINATOR, version, request(key="g1", key_type=0)).port
            assert again == reply.port  # stable
        else:
            body = request(coordinator_keys=["g1", "g2"], key_type=0)
            reply = raw.call(FIND_COORDINATOR, version, body)
            assert [c.key for c in reply.coordinators] == ["g1", "g2"]
            found = [(c.error_code, c.port) for c in reply.coordinators]
    ports = {pod.kafka_port for pod in kafka_pods}
    assert all(code == errors.NONE and port in ports for code, port in found)


def test_find_coordinator_of_transactions(kafka_pods: tuple[Pod, Pod]) -> None:
    """Key type 1 (a transactional id) names a live pod; share groups (2) are refused."""
    ports = {pod.kafka_port for pod in kafka_pods}
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        reply = raw.call(FIND_COORDINATOR, 3, FIND_COORDINATOR.request[3](key="tx", key_type=1))
        assert (reply.error_code, reply.port in ports) == (errors.NONE, True)
        empty = FIND_COORDINATOR.request[3](key="", key_type=1)
        assert raw.call(FIND_COORDINATOR, 3, empty).error_code == errors.INVALID_REQUEST
        share = FIND_COORDINATOR.request[3](key="sg", key_type=2)
        assert raw.call(FIND_COORDINATOR, 3, share).error_code == errors.INVALID_REQUEST


@pytest.mark.parametrize("version", _versions(JOIN_GROUP))
def test_join_group_with_a_bad_group_id(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = JOIN_GROUP.request[version]
    body = request(
        group_id=EMPTY_GROUP,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[request.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        assert raw.call(JOIN_GROUP, version, body).error_code == errors.INVALID_GROUP_ID


def _unknown_member(api: Api, version: int, **fields: Any) -> Any:
    return api.request[version](group_id=UNKNOWN_GROUP, generation_id=1, member_id="m", **fields)


@pytest.mark.parametrize(
    ("api", "version"),
    [(SYNC_GROUP, v) for v in _versions(SYNC_GROUP)]
    + [(HEARTBEAT, v) for v in _versions(HEARTBEAT)],
)
def test_sync_and_heartbeat_of_an_unknown_member(
    kafka_pods: tuple[Pod, Pod], api: Api, version: int
) -> None:
    body = _unknown_member(api, version, **({"assignments": []} if api is SYNC_GROUP else {}))
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        assert raw.call(api, version, body).error_code == errors.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", _versions(LEAVE_GROUP))
def test_leave_group_of_an_unknown_member(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = LEAVE_GROUP.request[version]
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        if version < 3:
            reply = raw.call(LEAVE_GROUP, version, request(group_id=UNKNOWN_GROUP, member_id="m"))
            assert reply.error_code == errors.UNKNOWN_MEMBER_ID
            return
        members = [request.MemberIdentity(member_id="m"), request.MemberIdentity(member_id="n")]
        reply = raw.call(LEAVE_GROUP, version, request(group_id=UNKNOWN_GROUP, members=members))
    assert reply.error_code == errors.NONE
    assert [(m.member_id, m.error_code) for m in reply.members] == [
        ("m", errors.UNKNOWN_MEMBER_ID),
        ("n", errors.UNKNOWN_MEMBER_ID),
    ]


@pytest.mark.parametrize("version", _versions(OFFSET_COMMIT))
def test_offset_commit_to_an_unknown_topic(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = OFFSET_COMMIT.request[version]
    topic = request.OffsetCommitRequestTopic
    body = request(
        group_id="commit-versions",
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            topic(
                name="no-such-topic",
                partitions=[
                    topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
                ],
            )
        ],
    )
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        reply = raw.call(OFFSET_COMMIT, version, body)
    codes = [p.error_code for t in reply.topics for p in t.partitions]
    assert codes == [errors.UNKNOWN_TOPIC_OR_PARTITION]


@pytest.mark.parametrize("version", _versions(OFFSET_FETCH))
def test_offset_fetch_of_nothing_committed(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = OFFSET_FETCH.request[version]
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        if version >= 8:
            groups = [
                request.OffsetFetchRequestGroup(group_id=UNKNOWN_GROUP, topics=None),
                request.OffsetFetchRequestGroup(group_id=ODD_GROUP, topics=None),
            ]
            reply = raw.call(OFFSET_FETCH, version, request(groups=groups))
            assert [(g.group_id, g.error_code, g.topics) for g in reply.groups] == [
                (UNKNOWN_GROUP, errors.NONE, []),
                (ODD_GROUP, errors.NONE, []),
            ]
            return
        topics = [request.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]
        reply = raw.call(OFFSET_FETCH, version, request(group_id=UNKNOWN_GROUP, topics=topics))
    [partition] = [p for t in reply.topics for p in t.partitions]
    assert (partition.committed_offset, partition.error_code) == (-1, errors.NONE)


def test_offset_delete_of_an_unknown_group(kafka_pods: tuple[Pod, Pod]) -> None:
    request = OFFSET_DELETE.request[0]
    topic = request.OffsetDeleteRequestTopic
    body = request(
        group_id=UNKNOWN_GROUP,
        topics=[
            topic(name="t", partitions=[topic.OffsetDeleteRequestPartition(partition_index=0)])
        ],
    )
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        assert raw.call(OFFSET_DELETE, 0, body).error_code == errors.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("version", _versions(LIST_GROUPS))
def test_list_groups(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        reply = raw.call(LIST_GROUPS, version, LIST_GROUPS.request[version]())
    assert reply.error_code == errors.NONE
    assert UNKNOWN_GROUP not in {g.group_id for g in reply.groups}


@pytest.mark.parametrize("version", _versions(DESCRIBE_GROUPS))
def test_describe_an_unknown_group(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    body = DESCRIBE_GROUPS.request[version](groups=[UNKNOWN_GROUP, ODD_GROUP])
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        reply = raw.call(DESCRIBE_GROUPS, version, body)
    unknown = errors.GROUP_ID_NOT_FOUND if version >= 6 else errors.NONE
    assert [(g.group_id, g.error_code, g.group_state) for g in reply.groups] == [
        (UNKNOWN_GROUP, unknown, "Dead"),
        (ODD_GROUP, unknown, "Dead"),
    ]


@pytest.mark.parametrize("version", _versions(DELETE_GROUPS))
def test_delete_an_unknown_group(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    body = DELETE_GROUPS.request[version](groups_names=[UNKNOWN_GROUP])
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        reply = raw.call(DELETE_GROUPS, version, body)
    assert [(r.group_id, r.error_code) for r in reply.results] == [
        (UNKNOWN_GROUP, errors.GROUP_ID_NOT_FOUND)
    ]


@pytest.mark.parametrize("version", _versions(CONSUMER_GROUP_HEARTBEAT))
def test_consumer_group_heartbeat_errors(kafka_pods: tuple[Pod, Pod], version: int) -> None:
    request = CONSUMER_GROUP_HEARTBEAT.request[version]
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        bad = request(
            group_id=EMPTY_GROUP, member_id="", member_epoch=0, subscribed_topic_names=["t"]
        )
        assert raw.call(CONSUMER_GROUP_HEARTBEAT, version, bad).error_code == (
            errors.INVALID_GROUP_ID
        )
        unknown = request(group_id=UNKNOWN_GROUP, member_id="m", member_epoch=3)
        reply = raw.call(CONSUMER_GROUP_HEARTBEAT, version, unknown)
        assert reply.error_code == errors.UNKNOWN_MEMBER_ID
        neither = request(group_id=UNKNOWN_GROUP, member_id="", member_epoch=0)
        reply = raw.call(CONSUMER_GROUP_HEARTBEAT, version, neither)
        assert reply.error_code == errors.INVALID_REQUEST  # a join names what it reads
        if version >= 1:
            # Kafka compiles the regex (RE2/J) before it admits the member
            bad = request(
                group_id=UNKNOWN_GROUP, member_id="", member_epoch=0, subscribed_topic_regex="t(."
            )
            reply = raw.call(CONSUMER_GROUP_HEARTBEAT, version, bad)
            assert reply.error_code == errors.INVALID_REGULAR_EXPRESSION
            assert reply.error_message == (
                "SubscribedTopicRegex `t(.` is not a valid regular expression: missing ): t(.."
            )
            # lookaround is Java's, not RE2/J's: refused as Kafka refuses it
            ahead = request(
                group_id=UNKNOWN_GROUP, member_id="", member_epoch=0, subscribed_topic_regex="(?=t)"
            )
            reply = raw.call(CONSUMER_GROUP_HEARTBEAT, version, ahead)
            assert reply.error_code == errors.INVALID_REGULAR_EXPRESSION


@pytest.mark.parametrize("version", _versions(CONSUMER_GROUP_DESCRIBE))
def test_consumer_group_describe_of_an_unknown_group(
    kafka_pods: tuple[Pod, Pod], version: int
) -> None:
    body = CONSUMER_GROUP_DESCRIBE.request[version](
        group_ids=[UNKNOWN_GROUP], include_authorized_operations=False
    )
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        reply = raw.call(CONSUMER_GROUP_DESCRIBE, version, body)
    assert [(g.group_id, g.error_code) for g in reply.groups] == [
        (UNKNOWN_GROUP, errors.GROUP_ID_NOT_FOUND)
    ]
