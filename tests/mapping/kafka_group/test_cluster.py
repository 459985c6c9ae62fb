"""Kafka groups on a real 3-node Redis Cluster: every kafka_group/* script touches one slot (the
group's ``{<group>}`` keys, or a (group, topic)'s ``{<group>:<topic>}`` offsets), the
join/sync waits wake on pub/sub across nodes, and a commit held between its check and its
write (two slots, two nodes) never goes backwards (tests/mapping/kafka_group/fencing.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from mapping.core import kafka_errors as errors
from tests.mapping.kafka_group.fencing import SCENARIOS
from tests.support.kafka_groups import join, pods

pytestmark = pytest.mark.slow


def test_kafka_group_lifecycle_on_a_cluster(cluster_url: str) -> None:
    async def body() -> None:
        async with pods(cluster_url, 2) as (a, b):
            # several groups, so their slots land on different nodes
            for group in (f"g-{uuid.uuid4().hex[:8]}" for _ in range(3)):
                topic = f"t-{uuid.uuid4().hex[:8]}"
                await a.topics.topic(topic)
                first, second = await asyncio.gather(join(a.groups, group), join(b.groups, group))
                assert first.generation == second.generation == 1
                leader, follower = (
                    (first, second) if first.leader == first.member_id else (second, first)
                )
                waiting = asyncio.create_task(b.groups.sync(group, follower.member_id, 1))
                shares = {leader.member_id: b"L", follower.member_id: b"F"}
                assert (await a.groups.sync(group, leader.member_id, 1, shares)).assignment == b"L"
                assert (await waiting).assignment == b"F"
                codes = await b.groups.commit_offsets(
                    group, follower.member_id, 1, {topic: {0: (5, "meta")}}
                )
                assert codes == {topic: {0: errors.NONE}}
                assert await a.v1.committed(group, topic, 0) == 5
                left = await a.groups.leave(
                    group, [(first.member_id, None), (second.member_id, None)]
                )
                assert left == [errors.NONE, errors.NONE]
                assert await a.groups.delete_groups([group]) == {group: errors.NONE}
                assert await b.groups.fetch_offsets(group) == {}

    asyncio.run(body())


def test_kip848_group_on_a_cluster(cluster_url: str) -> None:
    """ConsumerGroupHeartbeat's scripts (target computed in a pod, stored only for its
    epoch) run on a cluster too: two members split a topic."""

    async def body() -> None:
        async with pods(cluster_url, 2) as (a, b):
            group, topic = f"g-{uuid.uuid4().hex[:8]}", f"t-{uuid.uuid4().hex[:8]}"
            await a.topics.topic(topic)
            first = await a.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
            assert first.assignment == {topic: [0, 1, 2]}
            second = await b.groups.consumer_heartbeat(group, "", 0, subscribed_topic_names=[topic])
            assert second.error == errors.NONE
            # the first gives up what is no longer its own, then the second gets it
            shrunk = await a.groups.consumer_heartbeat(
                group, first.member_id, first.member_epoch, owned={topic: [0, 1, 2]}
            )
            kept = shrunk.assignment or first.assignment
            released = await a.groups.consumer_heartbeat(
                group, first.member_id, shrunk.member_epoch, owned=kept
            )
            taken = await b.groups.consumer_heartbeat(
                group, second.member_id, second.member_epoch, owned={}
            )
            mine = set((released.assignment or kept)[topic])
            theirs = set((taken.assignment or {}).get(topic, []))
            assert mine | theirs == {0, 1, 2} and not mine & theirs and theirs

    asyncio.run(body())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_commit_held_after_its_check_never_goes_backwards_on_a_cluster(
    cluster_url: str, scenario: Callable[[str], Awaitable[None]]
) -> None:
    """The commit fence works across nodes: the check's token comes from the group's node,
    the write is decided on the offsets' node alone."""
    asyncio.run(scenario(cluster_url))
