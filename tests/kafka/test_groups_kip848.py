"""KIP-848 (``group.protocol=consumer``) with confluent-kafka over three pods: the pods
assign, members on different pods split the partitions, a leaving member's partitions
move, commits resume; a regex subscription takes the topics it matches, later ones too."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka.versions import CONSUMER_GROUP_DESCRIBE
from tests.kafka.group_helpers import owned, poll_until, produce
from tests.kafka.test_groups import (
    PARTITIONS,
    PER_PARTITION,
    group_pods,
    group_topic,
    protocol_member,
)
from tests.support.kafka import RawKafka
from tests.support.pods import Pod

__all__ = ["group_pods", "group_topic"]  # the fixtures, shared with test_groups.py


def test_kip848_members_split_hand_over_and_resume(group_pods: list[Pod], group_topic: str) -> None:
    group = f"g848-{group_topic}"
    members = [protocol_member(group_pods[i], group, "consumer") for i in range(2)]
    got: list[list[bytes]] = [[], []]

    def poll_all() -> None:
        for i, member in enumerate(members):
            message = member.poll(0.1)
            if message is not None and message.error() is None:
                got[i].append(message.value())

    def state() -> object:
        return [owned(m) for m in members], [len(g) for g in got]

    try:
        for member in members:
            member.subscribe([group_topic])
        # KIP-848 has no initial rebalance delay: the first member may own, and read, every
        # partition before the second joins; uncommitted, the moved ones are read again
        poll_until(
            [poll_all],
            lambda: (
                all(owned(m) for m in members)
                and len(set(got[0]) | set(got[1])) == PARTITIONS * PER_PARTITION
            ),
            state=state,
        )
        shares = [owned(m) for m in members]
        assert shares[0] | shares[1] == set(range(PARTITIONS))
        assert not shares[0] & shares[1]
        members[0].commit(asynchronous=False)
        members[1].commit(asynchronous=False)
        # one leaves: the other gets every partition, and resumes after the commits
        members.pop(0).close()
        got.pop(0)
        produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="late")
        got[0].clear()
        poll_until(
            [poll_all],
            lambda: owned(members[0]) == set(range(PARTITIONS)) and len(got[0]) >= PARTITIONS,
            state=state,
        )
        assert sorted(got[0]) == sorted(f"{p}-late0".encode() for p in range(PARTITIONS))
    finally:
        for member in members:
            member.close()


def test_kip848_group_described_by_the_admin_client(
    group_pods: list[Pod], group_topic: str
) -> None:
    group = f"g848d-{group_topic}"
    member = protocol_member(group_pods[1], group, "consumer")
    admin = AdminClient({"bootstrap.servers": group_pods[2].bootstrap})
    try:
        member.subscribe([group_topic])
        poll_until([lambda: member.poll(0.1)], lambda: owned(member) == set(range(PARTITIONS)))
        described = admin.describe_consumer_groups([group])[group].result(timeout=15)
        assert described.group_id == group
        assert described.type == ConsumerGroupType.CONSUMER
        [one] = described.members
        assigned = one.assignment.topic_partitions
        assert {(tp.topic, tp.partition) for tp in assigned} == {
            (group_topic, p) for p in range(PARTITIONS)
        }
        assert group in {g.group_id for g in admin.list_consumer_groups().result(15).valid}
    finally:
        member.close()


def test_kip848_regex_subscription_takes_matching_topics_and_later_ones(
    group_pods: list[Pod], group_topic: str
) -> None:
    """librdkafka sends a ``^`` subscription as SubscribedTopicRegex: the member gets every
    partition of the topics the regex matches (not of the others), a matching topic created
    later joins its assignment, and ConsumerGroupDescribe reports the regex."""
    prefix = f"rx{group_topic}"
    group = f"g848rx-{group_topic}"
    admin = AdminClient({"bootstrap.servers": group_pods[0].bootstrap})

    def create(name: str, partitions: int) -> None:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)
        produce(group_pods[0].bootstrap, name, partitions, 1, tag=name)

    create(f"{prefix}-a", 2)
    create(f"{prefix}-b", 1)
    member = protocol_member(group_pods[1], group, "consumer")
    got: set[bytes] = set()

    def poll() -> None:
        message = member.poll(0.1)
        if message is not None and message.error() is None:
            got.add(message.value())

    def assigned() -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in member.assignment()}

    try:
        member.subscribe([f"^{prefix}-.*"])
        poll_until([poll], lambda: len(got) == 3, state=lambda: (assigned(), got))
        assert assigned() == {(f"{prefix}-a", 0), (f"{prefix}-a", 1), (f"{prefix}-b", 0)}
        assert got == {f"{p}-{prefix}-a0".encode() for p in range(2)} | {f"0-{prefix}-b0".encode()}
        create(f"{prefix}-c", 2)  # after the member joined: its next heartbeat matches it
        poll_until([poll], lambda: len(got) == 5, state=lambda: (assigned(), got))
        assert {(f"{prefix}-c", 0), (f"{prefix}-c", 1)} <= assigned()
        assert all(topic.startswith(f"{prefix}-") for topic, _ in assigned())
        body = CONSUMER_GROUP_DESCRIBE.request[0](
            group_ids=[group], include_authorized_operations=False
        )
        with RawKafka(group_pods[2].kafka_port) as raw:
            [described] = raw.call(CONSUMER_GROUP_DESCRIBE, 0, body).groups
        [one] = described.members
        # librdkafka sends its patterns joined as (p1)|(p2)...: here the one
        assert one.subscribed_topic_regex == f"(^{prefix}-.*)"
        assert one.subscribed_topic_names == []
    finally:
        member.close()
