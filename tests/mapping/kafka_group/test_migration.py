"""Classic members of a KIP-848 consumer group (Kafka's online migration) across "pods" on a
real Redis: a consumer's join upgrades a Stable classic group, the classic members keep their
partitions and give them up by rejoining, a classic consumer joins a consumer group, commits
check the member epoch as the generation, leaving and the rejoin deadline remove members."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from mapping.core import kafka_errors as errors
from mapping.kafka_group import KafkaGroups
from mapping.kafka_group.consumer_protocol import assignment
from mapping.kafka_group.consumer_protocol import subscription as read_subscription
from mapping.operations.group_overview import CLASSIC, CONSUMER, overview
from tests.mapping.kafka_group.test_consumer_protocol import SETTINGS, Consumer
from tests.support.kafka_groups import join, pods, subscription


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def _partitions(data: bytes) -> dict[str, list[int]]:
    """A ConsumerProtocolAssignment's partitions (its layout is a subscription's v1 owned
    part, after the topics list: read it so)."""
    reread = read_subscription(data[:2] + b"\x00\x00\x00\x00\xff\xff\xff\xff" + data[2:-4])
    assert reread is not None
    return reread.owned


@dataclass
class Classic:
    """What a classic cooperative client keeps: its member id, generation and partitions."""

    groups: KafkaGroups
    group: str
    topic: str
    member_id: str = ""
    generation: int = -1
    owned: dict[str, list[int]] = field(default_factory=dict)
    rebalance_ms: int = 10_000

    async def join(self) -> int:
        result = await join(
            self.groups,
            self.group,
            member_id=self.member_id,
            rebalance_ms=self.rebalance_ms,
            protocols=[("cooperative-sticky", subscription(self.topic, owned=self.owned))],
        )
        if result.error == errors.NONE:
            self.member_id, self.generation = result.member_id, result.generation
            assert result.leader == "" and result.members == []  # the pods assign
            assert result.protocol_name == "cooperative-sticky"
        return result.error

    async def sync(self) -> int:
        result = await self.groups.sync(
            self.group, self.member_id, self.generation, {}, protocol_type="consumer"
        )
        if result.error == errors.NONE:
            self.owned = _partitions(result.assignment)
        return result.error

    async def heartbeat(self) -> int:
        return await self.groups.heartbeat(self.group, self.member_id, self.generation)

    async def rejoin(self) -> None:
        """Join and sync until the group lets it be (as a client after REBALANCE_IN_PROGRESS)."""
        for _ in range(10):
            assert await self.join() == errors.NONE
            code = await self.sync()
            if code == errors.NONE and await self.heartbeat() == errors.NONE:
                return
        raise AssertionError("never settled")


def test_a_consumer_upgrades_a_stable_classic_group(redis_url: str) -> None:
    """A KIP-848 join waits (COORDINATOR_LOAD_IN_PROGRESS) while the classic group
    rebalances, then upgrades it: the classic member keeps its partitions under its
    generation, is told to rejoin, gives up what the new member's share is, and the new
    member gets it only then; commits check the member epoch as the generation; when the
    classic member leaves, the consumer gets everything."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)  # 3 partitions
            first = await join(a.groups, group, protocols=[("range", subscription(topic))])
            consumer = Consumer(b.groups, group, [topic])
            assert await consumer.heartbeat() == errors.COORDINATOR_LOAD_IN_PROGRESS
            everything = {topic: [0, 1, 2]}
            synced = await a.groups.sync(
                group,
                first.member_id,
                first.generation,
                {first.member_id: assignment(everything, 0)},
            )
            assert synced.error == errors.NONE

            assert await consumer.heartbeat() == errors.NONE
            assert consumer.partitions() == set()  # the classic member holds them all
            classic = Classic(a.groups, group, topic, first.member_id, first.generation, everything)
            assert await classic.heartbeat() == errors.REBALANCE_IN_PROGRESS
            # its commit under its generation still counts until it rejoined
            committed = await a.groups.commit_offsets(
                group, classic.member_id, classic.generation, {topic: {0: (7, "")}}
            )
            assert committed == {topic: {0: errors.NONE}}

            await classic.rejoin()
            for _ in range(3):
                assert await consumer.heartbeat() == errors.NONE
            mine, theirs = consumer.partitions(), {(topic, p) for p in classic.owned[topic]}
            assert mine and theirs and not mine & theirs
            assert mine | theirs == {(topic, p) for p in range(3)}
            stale = await a.groups.commit_offsets(
                group, classic.member_id, first.generation, {topic: {0: (8, "")}}
            )
            assert stale == {topic: {0: errors.ILLEGAL_GENERATION}}
            described = await b.groups.consumer_describe(group)
            assert {m.member_id: m.classic for m in described.members} == {
                classic.member_id: True,
                consumer.member_id: False,
            }
            shown = await overview(a.groups, group, 10, offsets=False)  # the CLI's, the console's
            assert shown is not None
            assert {m.member_id: m.protocol for m in shown.members} == {
                classic.member_id: CLASSIC,
                consumer.member_id: CONSUMER,
            }

            assert await a.groups.leave(group, [(classic.member_id, None)]) == [errors.NONE]
            for _ in range(3):
                assert await consumer.heartbeat() == errors.NONE
            assert consumer.partitions() == {(topic, p) for p in range(3)}

    asyncio.run(body())


def test_a_group_of_another_protocol_type_is_not_upgraded(redis_url: str) -> None:
    """A classic group whose members are not consumers (a Connect group) has no
    subscriptions to carry over: a KIP-848 join gets INCONSISTENT_GROUP_PROTOCOL."""

    async def body() -> None:
        async with pods(redis_url, 1, SETTINGS) as (pod,):
            group, topic = _name("g"), _name("t")
            await pod.topics.topic(topic)
            worker = await pod.groups.join(
                group,
                "",
                protocol_type="connect",
                protocols=[("sessioned", b"\x00")],
                session_timeout_ms=60_000,
                require_known_member_id=False,
            )
            assert worker.error == errors.NONE
            await pod.groups.sync(
                group, worker.member_id, worker.generation, {worker.member_id: b""}
            )
            assert await Consumer(pod.groups, group, [topic]).heartbeat() == (
                errors.INCONSISTENT_GROUP_PROTOCOL
            )

    asyncio.run(body())


def test_a_classic_consumer_joins_a_consumer_group(redis_url: str) -> None:
    """A classic consumer's JoinGroup to a group with live KIP-848 members gets the member id
    round trip, then an answer at once with no leader; the consumer gives up partitions
    for it; a classic member that does not rejoin when told within its rebalance timeout
    is removed."""

    async def body() -> None:
        async with pods(redis_url, 2, SETTINGS) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            consumer = Consumer(a.groups, group, [topic])
            assert await consumer.heartbeat() == errors.NONE
            assert consumer.partitions() == {(topic, p) for p in range(3)}
            classic = Classic(b.groups, group, topic, rebalance_ms=300)
            await classic.rejoin()
            for _ in range(5):
                assert await consumer.heartbeat() == errors.NONE
                if await classic.heartbeat() == errors.REBALANCE_IN_PROGRESS:
                    await classic.rejoin()
            mine, theirs = consumer.partitions(), {(topic, p) for p in classic.owned[topic]}
            assert mine and theirs and not mine & theirs
            assert mine | theirs == {(topic, p) for p in range(3)}

            # a new member moves the group on; the classic one never rejoins
            newcomer = Consumer(a.groups, group, [topic])
            assert await newcomer.heartbeat() == errors.NONE
            assert await classic.heartbeat() == errors.REBALANCE_IN_PROGRESS
            await asyncio.sleep(0.4)  # its rebalance timeout
            assert await classic.heartbeat() == errors.UNKNOWN_MEMBER_ID
            described = await a.groups.consumer_describe(group)
            assert classic.member_id not in {m.member_id for m in described.members}

    asyncio.run(body())


def test_classic_members_form_a_classic_group_when_the_last_consumer_leaves(
    redis_url: str,
) -> None:
    """Once no member of the consumer protocol is left, the classic members' next request
    gets UNKNOWN_MEMBER_ID; they join again as a classic group (its leader assigns), which
    ListGroups shows as classic."""

    async def body() -> None:
        async with pods(redis_url, 1, SETTINGS) as (pod,):
            group, topic = _name("g"), _name("t")
            await pod.topics.topic(topic)
            consumer = Consumer(pod.groups, group, [topic])
            assert await consumer.heartbeat() == errors.NONE
            classic = Classic(pod.groups, group, topic)
            await classic.rejoin()
            assert await classic.heartbeat() in (errors.NONE, errors.REBALANCE_IN_PROGRESS)
            left = await pod.groups.consumer_heartbeat(group, consumer.member_id, -1)
            assert left.error == errors.NONE

            assert await classic.heartbeat() == errors.UNKNOWN_MEMBER_ID
            again = await join(pod.groups, group, protocols=[("range", subscription(topic))])
            assert again.error == errors.NONE
            assert again.leader == again.member_id and len(again.members) == 1
            listed = {g.group_id: g for g in await pod.groups.list_groups()}
            assert listed[group].group_type == "classic"
            # a KIP-848 member from before (say, back from a pause) is unknown: it joins anew
            stale = await pod.groups.consumer_heartbeat(group, consumer.member_id, consumer.epoch)
            assert stale.error == errors.UNKNOWN_MEMBER_ID

    asyncio.run(body())
