"""Atomic commits in V1 (issue 26, item 2). A V1 COMMIT is already one step: one script call
(``group/commit.lua``) checks generation, membership and ownership and writes the offset, on
the (group, topic)'s one slot (single Redis and Cluster alike), so no check can go stale
before its write. These tests hold that down, with the same story as the Kafka ones
(tests/mapping/kafka_group/fencing.py): after the group moved on through another pod and a newer
generation committed, a COMMIT of the old generation is refused and the offset stays."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

import pytest

from mapping.core.errors import GENERATION_MISMATCH, BrokerError
from mapping.group.groups import Groups
from tests.support.kafka_groups import pods

if TYPE_CHECKING:  # (imported here, pytest would try to collect it)
    from tests.support.kafka_groups import TestPod

OLD, NEWER = 20, 30


def _short_sessions(pod: TestPod, session_ms: int) -> Groups:
    return Groups(pod.v1.batcher, pod.v1.keys, session_timeout_ms=session_ms)


async def _refused(groups: Groups, *args: object, message: str) -> None:
    with pytest.raises(BrokerError) as refused:
        await groups.start_commit(*args)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.message) == (GENERATION_MISMATCH, message)


def test_a_commit_of_an_expired_member_never_goes_backwards(redis_url: str) -> None:
    """c1's session runs out; c2 joins through the other pod (a new generation, every
    partition its own) and commits NEWER: c1's COMMIT with its old generation is refused
    (unknown member) and NEWER stays."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group, topic = f"g-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
            partitions = (await a.topics.topic(topic)).partitions
            on_a, on_b = _short_sessions(a, 300), _short_sessions(b, 300)
            c1 = await on_a.start_join(group, topic, partitions, "c1")
            await on_a.start_commit(group, topic, partitions, "c1", c1.generation, 0, 10)
            await asyncio.sleep(0.5)
            c2 = await on_b.start_join(group, topic, partitions, "c2")
            assert c2.generation > c1.generation and c2.assigned == list(range(partitions))
            await on_b.start_commit(group, topic, partitions, "c2", c2.generation, 0, NEWER)
            args = (group, topic, partitions, "c1", c1.generation, 0, OLD)
            await _refused(on_a, *args, message="unknown member")
            assert await b.v1.committed(group, topic, 0) == NEWER

    asyncio.run(body())


def test_a_commit_of_an_old_generation_never_goes_backwards(redis_url: str) -> None:
    """c2 joins (a new generation: partition 1 goes to c2) and commits NEWER on it: c1's
    COMMIT of partition 1 with the old generation is refused (stale generation), and with
    the new one too (not its partition any more); NEWER stays."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group, topic = f"g-{uuid.uuid4().hex[:10]}", f"t-{uuid.uuid4().hex[:10]}"
            partitions = (await a.topics.topic(topic)).partitions
            c1 = await a.v1.start_join(group, topic, partitions, "c1")
            assert 1 in c1.assigned
            await a.v1.start_commit(group, topic, partitions, "c1", c1.generation, 1, 10)
            c2 = await b.v1.start_join(group, topic, partitions, "c2")
            assert c2.generation == c1.generation + 1 and 1 in c2.assigned
            await b.v1.start_commit(group, topic, partitions, "c2", c2.generation, 1, NEWER)
            await _refused(
                a.v1, group, topic, partitions, "c1", c1.generation, 1, OLD,
                message="stale generation",
            )  # fmt: skip
            await _refused(
                a.v1, group, topic, partitions, "c1", c2.generation, 1, OLD,
                message="partition not assigned to member",
            )  # fmt: skip
            assert await b.v1.committed(group, topic, 1) == NEWER

    asyncio.run(body())
