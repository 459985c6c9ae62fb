"""Kafka group offsets and group administration on the store V1 shares: commits in one
protocol read in the other, the commit checks, OffsetDelete, DeleteGroups, ListGroups,
DescribeGroups, and the per-protocol membership rule."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from mapping.core import kafka_errors as errors
from mapping.group import deletion as group_deletion
from mapping.kafka_group import NO_EPOCH, NO_OFFSET, CommittedOffset
from mapping.operations import inspection, retention
from tests.support.kafka_groups import join, pods, subscription


def _name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


def test_kafka_commit_is_v1_offset_and_back(redis_url: str) -> None:
    """A commit through the Kafka API (outside group management: generation -1) is what V1
    OFFSET answers, metadata kept beside it; a V1 member's COMMIT is what OffsetFetch
    answers; OffsetFetch of the whole group lists both; inspect shows the Kafka-committed
    group with lag, ignoring the metadata."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group, topic = _name("g"), _name("t")
            config = await a.topics.topic(topic)  # 3 partitions
            codes = await a.groups.commit_offsets(
                group, "", -1, {topic: {0: (42, "from kafka"), 1: (7, None)}}
            )
            assert codes == {topic: {0: errors.NONE, 1: errors.NONE}}
            assert await b.v1.committed(group, topic, 0) == 42
            assert await b.v1.committed(group, topic, 1) == 7

            member = "v1-consumer"
            membership = await b.v1.start_join(group, topic, config.partitions, member)
            await b.v1.start_commit(
                group, topic, config.partitions, member, membership.generation, 2, 99
            )
            fetched = await a.groups.fetch_offsets(group, {topic: [0, 1, 2, 3]})
            assert fetched == {
                topic: {
                    0: CommittedOffset(42, "from kafka"),
                    1: CommittedOffset(7, None),
                    2: CommittedOffset(99, None),
                    3: CommittedOffset(NO_OFFSET, None),
                }
            }
            everything = await a.groups.fetch_offsets(group)
            assert {p: c.offset for p, c in everything[topic].items()} == {0: 42, 1: 7, 2: 99}

        client = redis.Redis.from_url(redis_url)
        try:
            keys = a.topics.keys
            assert (group, topic) in inspection.group_pairs(client, keys)
            view = inspection.group(client, keys, group, topic)
            assert view is not None
            assert [p.committed for p in view.partitions] == [42, 7, 99]
        finally:
            client.close()

    asyncio.run(body())


def test_commit_checks_generation_and_member(redis_url: str) -> None:
    """OffsetCommit for a classic group: the member at the current generation commits;
    another generation gets ILLEGAL_GENERATION, a stranger UNKNOWN_MEMBER_ID, a commit from
    outside the group while it has members UNKNOWN_MEMBER_ID, a partition outside the topic
    UNKNOWN_TOPIC_OR_PARTITION, oversized metadata OFFSET_METADATA_TOO_LARGE."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, topic = _name("g"), _name("t")
            await pod.topics.topic(topic)
            member = await join(pod.groups, group)
            await pod.groups.sync(group, member.member_id, member.generation, {})

            async def commit(member_id: str, generation: int, p: int = 0, meta: str = "") -> int:
                codes = await pod.groups.commit_offsets(
                    group, member_id, generation, {topic: {p: (5, meta)}}
                )
                return codes[topic][p]

            assert await commit(member.member_id, member.generation) == errors.NONE
            assert await commit(member.member_id, member.generation + 1) == (
                errors.ILLEGAL_GENERATION
            )
            assert await commit("stranger", member.generation) == errors.UNKNOWN_MEMBER_ID
            assert await commit("", -1) == errors.UNKNOWN_MEMBER_ID
            assert await commit(member.member_id, member.generation, p=3) == (
                errors.UNKNOWN_TOPIC_OR_PARTITION
            )
            assert await commit(member.member_id, member.generation, meta="x" * 5000) == (
                errors.OFFSET_METADATA_TOO_LARGE
            )
            missing = await pod.groups.commit_offsets(
                group, "", -1, {"no-such-topic": {0: (1, "")}}
            )
            assert missing == {"no-such-topic": {0: errors.UNKNOWN_MEMBER_ID}}
            assert await pod.groups.leave(group, [(member.member_id, None)]) == [errors.NONE]
            assert await commit("", -1) == errors.NONE  # no members: simple commits again

    asyncio.run(body())


def test_offset_delete_refuses_subscribed_topics(redis_url: str) -> None:
    """OffsetDelete: a topic the live members subscribe to keeps its offsets
    (GROUP_SUBSCRIBED_TO_TOPIC); another topic's go; an unknown group GROUP_ID_NOT_FOUND."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, used, unused = _name("g"), _name("t"), _name("t")
            for topic in (used, unused):
                await pod.topics.topic(topic)
            await pod.groups.commit_offsets(
                group, "", -1, {used: {0: (3, "")}, unused: {0: (4, "")}}
            )
            await join(pod.groups, group, protocols=[("range", subscription(used))])
            error, codes = await pod.groups.delete_offsets(group, {used: [0], unused: [0]})
            assert error == errors.NONE
            assert codes == {used: {0: errors.GROUP_SUBSCRIBED_TO_TOPIC}, unused: {0: errors.NONE}}
            fetched = await pod.groups.fetch_offsets(group, {used: [0], unused: [0]})
            assert (fetched[used][0].offset, fetched[unused][0].offset) == (3, NO_OFFSET)
            assert (await pod.groups.delete_offsets(_name("g"), {used: [0]}))[0] == (
                errors.GROUP_ID_NOT_FOUND
            )

    asyncio.run(body())


def test_delete_groups(redis_url: str) -> None:
    """DeleteGroups: NON_EMPTY_GROUP while a member is live; once it left, the group's state
    and every committed offset go (V1 OFFSET reads 0 again, the group leaves inspect);
    GROUP_ID_NOT_FOUND for a group that never was."""

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            group, topic = _name("g"), _name("t")
            await a.topics.topic(topic)
            member = await join(a.groups, group)
            await a.groups.sync(group, member.member_id, member.generation, {})
            codes = await a.groups.commit_offsets(
                group, member.member_id, member.generation, {topic: {1: (10, "m")}}
            )
            assert codes[topic][1] == errors.NONE
            unknown = _name("g")
            assert await b.groups.delete_groups([group, unknown]) == {
                group: errors.NON_EMPTY_GROUP,
                unknown: errors.GROUP_ID_NOT_FOUND,
            }
            await a.groups.leave(group, [(member.member_id, None)])
            assert await b.groups.delete_groups([group]) == {group: errors.NONE}
            assert await a.v1.committed(group, topic, 1) == 0
            assert await a.groups.fetch_offsets(group) == {}
            assert (await a.groups.describe_group(group)).state == "Dead"
            assert group not in {g.group_id for g in await a.groups.list_groups()}

    asyncio.run(body())


def test_list_and_describe(redis_url: str) -> None:
    """ListGroups shows Kafka groups with state and protocol type, and offset-only (V1)
    groups as Empty with no protocol type; DescribeGroups shows members with metadata for
    the chosen protocol and their assignments."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, v1_group, topic = _name("g"), _name("v1g"), _name("t")
            config = await pod.topics.topic(topic)
            member = await join(pod.groups, group, protocols=[("range", b"meta")])
            await pod.groups.sync(
                group, member.member_id, member.generation, {member.member_id: b"asg"}
            )
            await pod.v1.start_join(v1_group, topic, config.partitions, "c1")
            listed = {g.group_id: g for g in await pod.groups.list_groups()}
            assert (listed[group].state, listed[group].protocol_type) == ("Stable", "consumer")
            assert (listed[v1_group].state, listed[v1_group].protocol_type) == ("Empty", "")
            stable = await pod.groups.list_groups(states={"Stable"})
            assert [g.group_id for g in stable] == [group]
            (described,) = await pod.groups.describe_groups([group])
            assert (described.state, described.protocol, described.generation) == (
                "Stable",
                "range",
                member.generation,
            )
            (m,) = described.members
            assert (m.member_id, m.client_id, m.metadata, m.assignment) == (
                member.member_id,
                "test-client",
                b"meta",
                b"asg",
            )

    asyncio.run(body())


def test_live_v1_members_refuse_kafka_joins(redis_url: str) -> None:
    """Memberships are per protocol: while a V1 member of the group name is live (on any
    topic), a Kafka join gets INCONSISTENT_GROUP_PROTOCOL; after it left, the join works."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, topic = _name("g"), _name("t")
            config = await pod.topics.topic(topic)
            membership = await pod.v1.start_join(group, topic, config.partitions, "c1")
            refused = await join(pod.groups, group)
            assert refused.error == errors.INCONSISTENT_GROUP_PROTOCOL
            await pod.v1.leave(group, topic, config.partitions, "c1", membership.generation)
            assert (await join(pod.groups, group)).error == errors.NONE

    asyncio.run(body())


def test_retention_and_spark_see_kafka_commits(redis_url: str) -> None:
    """Retention's slowest-group floor and the Spark source's group start read what a Kafka
    group committed (the commit metadata beside it does not disturb them)."""
    spark_offsets = pytest.importorskip("spark_connector.offsets")

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, topic = _name("g"), _name("t")
            await pod.topics.topic(topic)
            await pod.groups.commit_offsets(group, "", -1, {topic: {0: (11, "meta"), 2: (5, "")}})
            floors = await retention.group_floors(pod.topics, topic, 3)
            assert floors == {0: 11, 2: 5}  # a partition never committed holds nothing
            client = redis.Redis.from_url(redis_url)
            try:
                positions = spark_offsets.group_positions(client, pod.topics.keys, group, topic, 3)
            finally:
                client.close()
            assert positions == {0: 11, 1: 0, 2: 5}

    asyncio.run(body())


def _keys_of(client: redis.Redis, pod: Any, group: str, topic: str) -> list[str]:
    """Which of the group's keys exist (V1 state, offsets, metadata, Kafka state)."""
    gk, kk = pod.topics.keys.group(group, topic), pod.topics.keys.kafka_group(group)
    names = [gk.meta, gk.members, gk.assignment, gk.offsets, gk.offset_metadata, kk.meta]
    return [name for name in names if client.exists(name)]


def test_v1_group_delete_removes_kafka_state_and_commit_metadata(redis_url: str) -> None:
    """``adapter group delete GROUP`` (mapping.group.deletion.delete_groups without a topic) is the
    same path as DeleteGroups: V1 state, offsets, commit metadata and the Kafka state go."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, topic = _name("g"), _name("t")
            await pod.topics.topic(topic)
            member = await join(pod.groups, group)
            await pod.groups.sync(group, member.member_id, member.generation, {})
            await pod.groups.commit_offsets(
                group, member.member_id, member.generation, {topic: {0: (3, "meta")}}
            )
            client = redis.Redis.from_url(redis_url)
            try:
                assert len(_keys_of(client, pod, group, topic)) == 4  # meta offsets md kmeta
                refused = await group_deletion.delete_groups(
                    pod.topics, group, None, force=False, session_timeout_ms=10_000
                )
                assert [(r.topic, r.outcome) for r in refused] == [
                    (topic, group_deletion.DELETED),
                    (group_deletion.KAFKA_STATE, group_deletion.NON_EMPTY),
                ]
                await pod.groups.leave(group, [(member.member_id, None)])
                await pod.groups.commit_offsets(group, "", -1, {topic: {0: (3, "meta")}})
                deleted = await group_deletion.delete_groups(
                    pod.topics, group, None, force=False, session_timeout_ms=10_000
                )
                assert [(r.topic, r.outcome) for r in deleted] == [
                    (topic, group_deletion.DELETED),
                    (group_deletion.KAFKA_STATE, group_deletion.DELETED),
                ]
                assert _keys_of(client, pod, group, topic) == []
                assert group not in {g.group_id for g in await pod.groups.list_groups()}
            finally:
                client.close()

    asyncio.run(body())


def test_offsets_retention_expires_idle_kafka_groups_and_keeps_live_ones(
    redis_url: str,
) -> None:
    """expire_groups: a Kafka group's offsets (and metadata) expire like a V1 group's once
    idle for the retention time, with its Empty Kafka state; while a Kafka consumer of the
    group name is live they stay, however old the last commit."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            idle, busy, topic = _name("g"), _name("g"), _name("t")
            await pod.topics.topic(topic)
            client = redis.Redis.from_url(redis_url)
            try:
                for group in (idle, busy):
                    member = await join(pod.groups, group)
                    await pod.groups.sync(group, member.member_id, member.generation, {})
                    await pod.groups.commit_offsets(
                        group, member.member_id, member.generation, {topic: {0: (7, "m")}}
                    )
                    if group == idle:
                        await pod.groups.leave(group, [(member.member_id, None)])
                # retention -1 ms: anything not live has been idle long enough
                expired = await group_deletion.expire_groups(
                    pod.topics, retention_ms=-1, session_timeout_ms=10_000
                )
                assert (idle, topic) in expired
                assert (busy, topic) not in expired
                assert _keys_of(client, pod, idle, topic) == []
                assert await pod.v1.committed(busy, topic, 0) == 7
                assert (await pod.groups.fetch_offsets(busy))[topic][0].metadata == "m"
            finally:
                client.close()

    asyncio.run(body())


# Kafka group ids of any characters; the second is the first's key part written out, so the
# two would collide under a mapping that did not escape '%'
ODD_GROUPS = ["roundrobin,range", "roundrobin%2Crange", "a b{c}:d é", "x:y"]


def test_group_ids_of_any_characters(redis_url: str) -> None:
    """Kafka accepts any non-empty group id: each such group joins, commits and fetches its
    own offsets (none sees another's), is listed, described, inspected and held by
    retention under its exact id, and is deleted alone."""
    spark_offsets = pytest.importorskip("spark_connector.offsets")

    async def body() -> None:
        async with pods(redis_url, 2) as (a, b):
            topic = _name("t")
            await a.topics.topic(topic)
            suffix = uuid.uuid4().hex[:6]
            groups = [f"{g}-{suffix}" for g in ODD_GROUPS]
            for n, group in enumerate(groups):
                member = await join(a.groups, group)
                assert member.error == errors.NONE, group
                await a.groups.sync(group, member.member_id, member.generation, {})
                codes = await b.groups.commit_offsets(
                    group, member.member_id, member.generation, {topic: {0: (10 + n, "m")}}
                )
                assert codes == {topic: {0: errors.NONE}}
                await a.groups.leave(group, [(member.member_id, None)])
            for n, group in enumerate(groups):
                fetched = await b.groups.fetch_offsets(group, {topic: [0]})
                assert fetched[topic][0].offset == 10 + n, group
                assert {
                    p: c.offset for p, c in (await a.groups.fetch_offsets(group))[topic].items()
                } == {0: 10 + n}
            listed = {g.group_id: g for g in await b.groups.list_groups()}
            assert all(listed[g].state == "Empty" for g in groups)
            described = await a.groups.describe_groups(groups)
            assert [(d.group_id, d.error, d.state) for d in described] == [
                (g, errors.NONE, "Empty") for g in groups
            ]
            assert (await retention.group_floors(a.topics, topic, 3)) == {0: 10}
            client = redis.Redis.from_url(redis_url)
            try:
                keys = a.topics.keys
                pairs = inspection.group_pairs(client, keys)
                assert all((g, topic) in pairs for g in groups)
                views = [inspection.group(client, keys, g, topic) for g in groups]
                assert [v.partitions[0].committed for v in views if v] == [10, 11, 12, 13]
                positions = spark_offsets.group_positions(client, keys, groups[2], topic, 3)
                assert positions == {0: 12, 1: 0, 2: 0}
            finally:
                client.close()

            assert await b.groups.delete_groups([groups[0]]) == {groups[0]: errors.NONE}
            deleted = await group_deletion.delete_groups(
                a.topics, groups[2], None, force=False, session_timeout_ms=10_000
            )
            assert [(r.group, r.outcome) for r in deleted] == [
                (groups[2], group_deletion.DELETED),
                (groups[2], group_deletion.DELETED),  # its Kafka state
            ]
            left = {g.group_id for g in await a.groups.list_groups()}
            assert (groups[0] in left, groups[1] in left, groups[2] in left) == (
                False,
                True,
                False,
            )
            assert (await a.groups.fetch_offsets(groups[1]))[topic][0].offset == 11
            assert await a.groups.fetch_offsets(groups[0]) == {}

    asyncio.run(body())


def test_the_empty_group_id(redis_url: str) -> None:
    """Kafka's rule for "": OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups take
    it (its offsets are a group like any other, listed as ""), the membership APIs and
    OffsetDelete answer INVALID_GROUP_ID."""

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            topic = _name("t")
            await pod.topics.topic(topic)
            groups = pod.groups
            assert await groups.commit_offsets("", "", -1, {topic: {1: (4, "e")}}) == {
                topic: {1: errors.NONE}
            }
            assert await groups.fetch_offsets("", {topic: [1]}) == {
                topic: {1: CommittedOffset(4, "e")}
            }
            assert "" in {g.group_id for g in await groups.list_groups()}
            assert (await groups.describe_group("")).state == "Empty"
            assert (await join(groups, "")).error == errors.INVALID_GROUP_ID
            assert await groups.heartbeat("", "m", 1) == errors.INVALID_GROUP_ID
            assert (await groups.delete_offsets("", {topic: [1]}))[0] == errors.INVALID_GROUP_ID
            assert await groups.delete_groups([""]) == {"": errors.NONE}
            assert await groups.fetch_offsets("") == {}

    asyncio.run(body())


def _without_fences(fields: dict[str, str]) -> dict[str, str]:
    """``offset_metadata`` less the commit fences (``<p>.fence``, test_commit_fencing.py)."""
    return {f: v for f, v in fields.items() if not f.endswith(".fence")}


def test_committed_leader_epoch(redis_url: str) -> None:
    """A commit's leader epoch is stored with its offset (readable beside the metadata) and
    fetched back, per partition and for the whole group; a later commit without one, a V1
    COMMIT and a Spark commit leave none (-1), nor does OffsetDelete."""
    group_commit = pytest.importorskip("spark_connector.group_commit")

    async def body() -> None:
        async with pods(redis_url, 1) as (pod,):
            group, topic = _name("g"), _name("t")
            config = await pod.topics.topic(topic)
            groups = pod.groups
            commit = {0: (10, "m", 7), 1: (11, None, 3), 2: (12, "n")}
            await groups.commit_offsets(group, "", -1, {topic: commit})
            expected = {
                0: CommittedOffset(10, "m", errors.NONE, 7),
                1: CommittedOffset(11, None, errors.NONE, 3),
                2: CommittedOffset(12, "n", errors.NONE, NO_EPOCH),
            }
            assert await groups.fetch_offsets(group, {topic: [0, 1, 2]}) == {topic: expected}
            assert await groups.fetch_offsets(group) == {topic: expected}
            client = redis.Redis.from_url(redis_url, decode_responses=True)
            try:
                metadata_key = pod.topics.keys.group(group, topic).offset_metadata
                stored = _without_fences(client.hgetall(metadata_key))
                assert stored == {
                    "0": "m",
                    "0.leader_epoch": "7",
                    "1.leader_epoch": "3",
                    "2": "n",
                }

                await groups.commit_offsets(group, "", -1, {topic: {1: (15, None)}})
                membership = await pod.v1.start_join(group, topic, config.partitions, "c1")
                await pod.v1.start_commit(
                    group, topic, config.partitions, "c1", membership.generation, 0, 20
                )
                await pod.v1.leave(group, topic, config.partitions, "c1", membership.generation)
                group_commit.commit_group_offsets(client, pod.topics.keys, group, topic, {2: 30})
                fetched = await groups.fetch_offsets(group, {topic: [0, 1, 2]})
                assert fetched == {
                    topic: {
                        0: CommittedOffset(20, None),  # V1 COMMIT: no metadata, no epoch
                        1: CommittedOffset(15, None),  # a Kafka commit without an epoch
                        2: CommittedOffset(30, None),  # a Spark commit
                    }
                }
                await groups.commit_offsets(group, "", -1, {topic: {0: (21, None, 9)}})
                assert (await groups.delete_offsets(group, {topic: [0]}))[0] == errors.NONE
                assert _without_fences(client.hgetall(metadata_key)) == {}
            finally:
                client.close()

    asyncio.run(body())


def test_cli_names_a_group_of_any_characters(redis_url: str) -> None:
    """``adapter inspect groups``, ``inspect group GROUP TOPIC`` and ``group delete GROUP``
    take and show a Kafka group id of any characters as written."""
    group, topic = f"a b{{c}}:%é-{uuid.uuid4().hex[:6]}", _name("t")

    async def commit() -> str:
        async with pods(redis_url, 1) as (pod,):
            await pod.topics.topic(topic)
            await pod.groups.commit_offsets(group, "", -1, {topic: {0: (0, None)}})
            return pod.topics.keys.prefix

    prefix = asyncio.run(commit())

    def cli(*args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--redis-url", redis_url, "--key-prefix", prefix])
        assert result.exit_code == 0, result.output
        return result.output

    listed = json.loads(cli("inspect", "groups", "--json"))
    assert [(g["group"], g["topic"]) for g in listed] == [(group, topic)]
    assert json.loads(cli("inspect", "group", group, topic, "--json"))["group"] == group
    assert cli("group", "delete", group).splitlines() == [f"deleted group={group} topic={topic}"]
    assert json.loads(cli("inspect", "groups", "--json")) == []
