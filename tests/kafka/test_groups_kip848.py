"""KIP-848 (``group.protocol=consumer``) with confluent-kafka over three pods: the pods
assign, members on different pods split the partitions, a leaving member's partitions
move, commits resume; a regex subscription takes the topics it matches, later ones too; a
static member (``group.instance.id``) comes back to its partitions; a rolling restart
moves a classic group to KIP-848 without stopping it."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from adapter.kafka.versions import CONSUMER_GROUP_DESCRIBE
from tests.kafka.group_helpers import (
    KIP848,
    SESSION_MS,
    AioMember,
    owned,
    poll_until,
    poller,
    produce,
)
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


def _described(pod: Pod, group: str) -> object:
    body = CONSUMER_GROUP_DESCRIBE.request[0](
        group_ids=[group], include_authorized_operations=False
    )
    with RawKafka(pod.kafka_port) as raw:
        [described] = raw.call(CONSUMER_GROUP_DESCRIBE, 0, body).groups
    return described


def _keep_polling(poll: Callable[[], None], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        poll()


def _static(pod: Pod, group: str, instance: str) -> Consumer:
    """librdkafka sends the instance id and rack with its full heartbeats only."""
    return Consumer(
        {
            "bootstrap.servers": pod.bootstrap,
            "group.id": group,
            "group.instance.id": instance,
            "client.rack": f"rack-{instance}",
        }
        | KIP848
    )


def test_kip848_static_member_comes_back_to_its_partitions(
    group_pods: list[Pod], group_topic: str
) -> None:
    """librdkafka's static member under ``group.protocol=consumer``: closing it sends the
    temporary leave (epoch -2), and it stays in the group with its partitions, which the
    other member does not get; a new consumer with its instance id gets them back under a
    new member id, without a new group epoch, and reads on from the commits; a consumer
    whose instance id is in use fails with UNRELEASED_INSTANCE_ID. (The group's session
    is 45 s, so that the one coming back is in time whatever the machine's load.)"""
    group = f"g848s-{group_topic}"
    admin = AdminClient({"bootstrap.servers": group_pods[0].bootstrap})
    longer = ConfigEntry(
        "consumer.session.timeout.ms", "45000", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[longer])
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)
    members = [_static(group_pods[0], group, "a"), _static(group_pods[1], group, "b")]
    got: list[set[bytes]] = [set(), set()]

    def poll_all() -> None:
        for member, into in zip(members, got, strict=True):
            poller(member, into)()

    def state() -> object:
        return [owned(m) for m in members], [len(g) for g in got]

    twin = None
    try:
        for member in members:
            member.subscribe([group_topic])
        poll_until(
            [poll_all],
            lambda: (
                all(owned(m) for m in members)
                and len(got[0] | got[1]) == PARTITIONS * PER_PARTITION
            ),
            state=state,
        )
        kept = owned(members[0])
        assert kept | owned(members[1]) == set(range(PARTITIONS)) and kept
        for member in members:
            member.commit(asynchronous=False)
        before = _described(group_pods[2], group)
        first_id = {m.instance_id: m.member_id for m in before.members}["a"]
        assert {m.instance_id: m.rack_id for m in before.members} == {"a": "rack-a", "b": "rack-b"}

        members[0].close()  # the temporary leave
        away = _described(group_pods[2], group)
        assert away.group_epoch == before.group_epoch
        assert {m.instance_id: m.member_epoch for m in away.members} == {
            "a": -2,
            "b": before.members[0].member_epoch,
        }
        produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="late")
        others = {f"{p}-late0".encode() for p in set(range(PARTITIONS)) - kept}
        got[1].clear()
        poll_other = poller(members[1], got[1])
        poll_until([poll_other], lambda: got[1] >= others, state=state)
        _keep_polling(poll_other, 1.0)  # a few of the other member's heartbeats
        assert owned(members[1]) == set(range(PARTITIONS)) - kept
        assert got[1] == others  # none of the away member's records

        members[0] = _static(group_pods[2], group, "a")
        members[0].subscribe([group_topic])
        got[0].clear()
        poll_until(
            [poll_all],
            lambda: len(got[0]) == len(kept),
            state=state,
        )
        assert owned(members[0]) == kept
        assert got[0] == {f"{p}-late0".encode() for p in kept}  # on from the commits
        back = _described(group_pods[1], group)
        assert back.group_epoch == before.group_epoch
        ids = {m.instance_id: m.member_id for m in back.members}
        assert set(ids) == {"a", "b"} and ids["a"] != first_id

        twin = _static(group_pods[0], group, "b")
        twin.subscribe([group_topic])
        failure = None
        deadline = time.monotonic() + 20
        while failure is None and time.monotonic() < deadline:
            message = twin.poll(0.2)
            if message is not None and message.error() is not None:
                failure = message.error()
            poll_all()
        # librdkafka raises it as its fatal error: UNRELEASED_INSTANCE_ID (111) by its text
        assert failure is not None and failure.code() == KafkaError._FATAL, failure
        assert "instance ID is still used by another member" in failure.str()
        assert owned(members[1]) == set(range(PARTITIONS)) - kept
    finally:
        for member in (*members, *([twin] if twin else [])):
            try:
                member.close()
            except (KafkaException, RuntimeError):  # the twin, fatally failed, or closed
                pass


def test_kip848_static_member_not_back_within_its_session_is_removed(
    group_pods: list[Pod], group_topic: str
) -> None:
    """The pods' KIP-848 session here is 3 s: a closed static member's partitions stay
    unassigned while it runs, then go to the member left."""
    group = f"g848x-{group_topic}"
    static = _static(group_pods[0], group, "x")
    other = protocol_member(group_pods[1], group, "consumer")
    try:
        for member in (static, other):
            member.subscribe([group_topic])

        def poll_both() -> None:
            static.poll(0.1)
            other.poll(0.1)

        poll_until([poll_both], lambda: bool(owned(static)) and bool(owned(other)))
        kept = owned(static)
        static.close()
        closed = time.monotonic()
        _keep_polling(lambda: other.poll(0.1), 1.0)
        assert not owned(other) & kept
        poll_until([lambda: other.poll(0.1)], lambda: owned(other) == set(range(PARTITIONS)))
        assert time.monotonic() - closed >= SESSION_MS / 1000 - 0.5
        [left] = _described(group_pods[2], group).members
        assert left.instance_id is None
    finally:
        other.close()


def test_rolling_upgrade_from_classic_members_to_kip848_and_back(
    group_pods: list[Pod], group_topic: str
) -> None:
    """Kafka's online migration, as a rolling restart does it: two classic members read the
    topic; one is replaced by a KIP-848 member (the group becomes a consumer group, the
    classic member keeps reading), then the other; an aiokafka member (a classic-only
    client) joins afterwards, as a rollback would, and once the KIP-848 members are gone it
    forms a classic group again. Each step ends with every partition owned by exactly one
    member and the step's new records read."""
    group = f"g848m-{group_topic}"
    everything = set(range(PARTITIONS))
    members = {f"classic{i}": protocol_member(group_pods[i], group, "classic") for i in range(2)}
    got: dict[str, set[bytes]] = {name: set() for name in members}
    aio: AioMember | None = None

    def poll_all() -> None:
        for name, member in members.items():
            poller(member, got[name])()

    def owners() -> list[set[int]]:
        return [owned(m) for m in members.values()] + ([aio.owned] if aio else [])

    def read(tag: str) -> set[bytes]:
        return {v for name in got for v in got[name] if b"-" + tag.encode() in v} | {
            v for v in (aio.got if aio else []) if b"-" + tag.encode() in v
        }

    def settled(tag: str) -> Callable[[], bool]:
        def check() -> bool:
            shares = owners()
            return (
                all(shares)
                and sum(len(s) for s in shares) == PARTITIONS
                and set().union(*shares) == everything
                and len(read(tag)) == PARTITIONS
            )

        return check

    def state() -> object:
        return {name: sorted(owned(m)) for name, m in members.items()}, aio and aio.owned

    try:
        for member in members.values():
            member.subscribe([group_topic])
        for step, (leaving, joining) in enumerate(
            [(None, None), ("classic0", "kip848a"), ("classic1", "kip848b")]
        ):
            if leaving is not None and joining is not None:
                members.pop(leaving).close()
                members[joining] = protocol_member(group_pods[step], group, "consumer")
                members[joining].subscribe([group_topic])
                got[joining] = set()
            produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag=f"step{step}")
            poll_until([poll_all], settled(f"step{step}"), timeout=45, state=state)
        described = AdminClient({"bootstrap.servers": group_pods[2].bootstrap})
        [group_state] = described.describe_consumer_groups([group]).values()
        assert group_state.result(timeout=15).type == ConsumerGroupType.CONSUMER

        aio = AioMember(group_pods[1].bootstrap, group, group_topic)
        aio.start()
        produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="step3")
        poll_until([poll_all], settled("step3"), timeout=45, state=state)

        # the rollback's end: the KIP-848 members go, the classic one forms a classic group
        for name in list(members):
            members.pop(name).close()
        produce(group_pods[0].bootstrap, group_topic, PARTITIONS, 1, tag="step4")
        poll_until([lambda: time.sleep(0.1)], settled("step4"), timeout=45, state=state)
        listed = described.list_consumer_groups().result(timeout=15).valid
        assert {g.group_id: g.type for g in listed}[group] == ConsumerGroupType.CLASSIC
    finally:
        for member in members.values():
            member.close()
        if aio is not None:
            aio.leave()
