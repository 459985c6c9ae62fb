"""TxnOffsetCommit (API 28) over the wire, with a raw client: every offered version stores
the offsets as pending (OffsetFetch answers the committed ones, and UNSTABLE_OFFSET_COMMIT
with require_stable, v7+), v3+ checks the consumer's membership, and ApiVersions offers it.
How pending offsets end (EndTxn) is tested at mapping level
(tests/mapping/kafka_group/test_txn_offsets.py) and end to end in test_exactly_once.py."""

from __future__ import annotations

from typing import Any

import pytest

from adapter.kafka import errors
from adapter.kafka.versions import API_VERSIONS, OFFSET_FETCH, TXN_OFFSET_COMMIT
from tests.support.kafka import RawKafka, commit_offsets, fetch_offsets
from tests.support.pods import Pod

PRODUCER_ID = 777


def _txn_commit(
    pod: Pod,
    group: str,
    topic: str,
    offsets: dict[int, int],
    version: int,
    *,
    producer_epoch: int = 0,
    member_id: str = "",
    generation: int = -1,
) -> list[int]:
    """A raw TxnOffsetCommit of ``version``; the partitions' error codes."""
    request = TXN_OFFSET_COMMIT.request[version]
    topic_type = request.TxnOffsetCommitRequestTopic
    fields: dict[str, Any] = {}
    if version >= 3:
        fields = {"generation_id": generation, "member_id": member_id, "group_instance_id": None}
    body = request(
        transactional_id="txn-raw",
        group_id=group,
        producer_id=PRODUCER_ID,
        producer_epoch=producer_epoch,
        topics=[
            topic_type(
                name=topic,
                partitions=[
                    topic_type.TxnOffsetCommitRequestPartition(
                        partition_index=p,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata=None,
                    )
                    for p, offset in offsets.items()
                ],
            )
        ],
        **fields,
    )
    with RawKafka(pod.kafka_port) as raw:
        reply = raw.call(TXN_OFFSET_COMMIT, version, body)
    return [p.error_code for t in reply.topics for p in t.partitions]


def _stable_fetch(pod: Pod, group: str, topic: str, partitions: list[int], version: int) -> Any:
    request = OFFSET_FETCH.request[version]
    with RawKafka(pod.kafka_port) as raw:
        if version >= 8:
            asked = request.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
                name=topic, partition_indexes=partitions
            )
            body = request(
                groups=[request.OffsetFetchRequestGroup(group_id=group, topics=[asked])],
                require_stable=True,
            )
            (answered,) = raw.call(OFFSET_FETCH, version, body).groups
            return [p for t in answered.topics for p in t.partitions]
        topics = [request.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)]
        body = request(group_id=group, topics=topics, require_stable=True)
        return [p for t in raw.call(OFFSET_FETCH, version, body).topics for p in t.partitions]


@pytest.mark.parametrize(
    "version", range(TXN_OFFSET_COMMIT.min_version, TXN_OFFSET_COMMIT.max_version + 1)
)
def test_txn_offsets_are_pending(pod: Pod, topic: str, version: int) -> None:
    with pod.client() as v1:
        v1.produce(topic, "k", "v")  # the topic exists (3 partitions)
    group = f"g-{topic}"
    assert commit_offsets(pod, group, topic, {0: 5}) == [errors.NONE]
    assert _txn_commit(pod, group, topic, {0: 10, 1: 20}, version) == [0, 0]

    for fetch_version in (6, OFFSET_FETCH.max_version):  # without require_stable
        answered = fetch_offsets(pod, group, topic, [0, 1, 2], fetch_version)
        assert [(p.committed_offset, p.error_code) for p in answered] == [
            (5, 0),
            (-1, 0),
            (-1, 0),
        ]
    for fetch_version in range(7, OFFSET_FETCH.max_version + 1):
        answered = _stable_fetch(pod, group, topic, [0, 1, 2], fetch_version)
        assert [(p.committed_offset, p.error_code) for p in answered] == [
            (-1, errors.UNSTABLE_OFFSET_COMMIT),
            (-1, errors.UNSTABLE_OFFSET_COMMIT),
            (-1, errors.NONE),
        ]


def test_membership_and_errors(pod: Pod, topic: str) -> None:
    """v3+: a member the group does not know is UNKNOWN_MEMBER_ID, a generation of a group
    that does not exist ILLEGAL_GENERATION; an unknown partition UNKNOWN_TOPIC_OR_PARTITION;
    the empty group id INVALID_GROUP_ID. The connection stays usable throughout."""
    with pod.client() as v1:
        v1.produce(topic, "k", "v")
    group = f"g-{topic}"
    latest = TXN_OFFSET_COMMIT.max_version
    assert _txn_commit(pod, group, topic, {0: 1}, latest, generation=3) == [
        errors.ILLEGAL_GENERATION
    ]
    assert _txn_commit(pod, group, topic, {0: 1, 9: 1}, latest) == [
        errors.NONE,
        errors.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert _txn_commit(pod, "", topic, {0: 1}, latest) == [errors.INVALID_GROUP_ID]


def test_api_versions_offer_txn_offset_commit(pod: Pod) -> None:
    with RawKafka(pod.kafka_port) as raw:
        reply = raw.call(API_VERSIONS, 3, API_VERSIONS.request[3](
            client_software_name="test", client_software_version="1"
        ))  # fmt: skip
    offered = {a.api_key: (a.min_version, a.max_version) for a in reply.api_keys}
    assert offered[TXN_OFFSET_COMMIT.key] == (0, 4)
