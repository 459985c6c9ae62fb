"""A group's whole life with real pods: `adapter group delete` (refused with live members
unless --force, per topic or for every topic), offsets retention applied by the pods'
retention task, and retention not held by partitions a group never committed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner

from adapter.cli import main
from adapter.client import RequestFailed
from mapping.core.keys import Keys
from spark_connector.group_commit import commit_group_offsets
from tests.support.cli import CliTarget
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"glife{uuid.uuid4().hex[:8]}"), client)
    client.close()


def _pod(start_pod, target: CliTarget, *args: str) -> Pod:
    return start_pod(target.url, "--key-prefix", target.keys.prefix, *RF1, *args)


def _cli_fails(target: CliTarget, *args: str) -> str:
    base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
    result = CliRunner().invoke(main, [*args, *base])
    assert result.exit_code == 1, result.output
    return result.output


def _group_keys(target: CliTarget, group: str, topic: str) -> list[str]:
    gk = target.keys.group(group, topic)
    keys = [gk.meta, gk.members, gk.assignment, gk.offsets]
    return [k for k in keys if target.client.exists(k)]


def _listed(target: CliTarget) -> set[str]:
    return {m.decode() for m in target.client.smembers(target.keys.groups)}


def test_delete_refuses_live_members_unless_forced(
    target: CliTarget, topic: str, start_pod
) -> None:
    pod = _pod(start_pod, target)
    with pod.client() as client:
        generation = client.join("g", topic, "c1").generation
        client.commit("g", topic, "c1", generation, 0, 7)
        out = _cli_fails(target, "group", "delete", "g", "--topic", topic)
        assert "refused group=g" in out and "1 live member(s)" in out
        assert "NON_EMPTY_GROUP" in out
        assert client.committed("g", topic, 0) == 7  # untouched
        client.heartbeat("g", topic, "c1", generation)

        assert target.cli("group", "delete", "g", "--topic", topic, "--force") == (
            f"deleted group=g topic={topic}\n"
        )
        assert _group_keys(target, "g", topic) == []
        assert f"g {topic}" not in _listed(target)
        assert client.committed("g", topic, 0) == 0
        with pytest.raises(RequestFailed) as failure:
            client.heartbeat("g", topic, "c1", generation)
        assert (failure.value.code, failure.value.message) == (
            "GENERATION_MISMATCH",
            "group not found",
        )
        # The member joins again: a new group from generation 1.
        assert client.join("g", topic, "c1").generation == 1


def test_delete_without_topic_deletes_the_group_of_every_topic(
    target: CliTarget, start_pod
) -> None:
    pod = _pod(start_pod, target)
    topics = [f"t-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with pod.client() as client:
        for t in topics:
            generation = client.join("g", t, "c1").generation
            client.commit("g", t, "c1", generation, 0, 3)
            client.leave("g", t, "c1", generation)  # empty: no --force needed
        client.join("other", topics[0], "c1")
    out = target.cli("group", "delete", "g")
    assert out == "".join(f"deleted group=g topic={t}\n" for t in sorted(topics))
    for t in topics:
        assert _group_keys(target, "g", t) == []
    assert _listed(target) == {f"other {topics[0]}"}
    assert _group_keys(target, "other", topics[0]) != []
    assert "no group g" in _cli_fails(target, "group", "delete", "g")


def test_idle_groups_expire_and_stop_holding_retention(
    target: CliTarget, topic: str, start_pod
) -> None:
    """A group that left (no member, no commit) expires after --offsets-retention-minutes:
    its offsets and listing go and topic retention trims past its old commit. A group
    with a live member is kept, and holds."""
    target.cli("topic", "create", topic, "--partitions", "1", "--replication-factor", "1",
               "--min-insync-replicas", "1", "--retention-ms", "0")  # fmt: skip
    pod = _pod(start_pod, target, "--retention-interval-ms", "100",
               "--offsets-retention-minutes", "0.005", "--no-replicator")  # fmt: skip
    with pod.client() as client:
        offsets = [client.produce(topic, "k", f"v{i}").offset for i in range(6)]
        gone = client.join("gone", topic, "c1").generation
        client.commit("gone", topic, "c1", gone, 0, offsets[1])
        client.leave("gone", topic, "c1", gone)
        live = client.join("live", topic, "c2").generation
        client.commit("live", topic, "c2", live, 0, offsets[4])

        wait_until(lambda: _group_keys(target, "gone", topic) == [], timeout=8)
        assert f"gone {topic}" not in _listed(target)
        # Now only the live group holds: trimmed up to its commit, not the old one's.
        log = target.keys.partition(topic, 0).log
        wait_until(lambda: int(target.client.xlen(log)) == 2, timeout=8)
        assert [r[0] for r in client.consume(topic, 0, 0).records] == offsets[4:]
        assert client.committed("live", topic, 0) == offsets[4]
        assert f"live {topic}" in _listed(target)
        client.heartbeat("live", topic, "c2", live)
    assert "offsets retention: group gone of topic" in pod.log()


def test_spark_commits_count_as_activity(target: CliTarget, topic: str) -> None:
    """A Spark job is no member: its commits record the group's last activity (active_ms),
    which offsets retention counts from; an expired Spark group is removed like any."""
    committed = commit_group_offsets(target.client, target.keys, "spark", topic, {0: 5})
    assert committed == {0: 5}
    meta = target.keys.group("spark", topic).meta
    seconds, micros = target.client.time()
    now_ms = seconds * 1000 + micros // 1000
    active = int(target.client.hget(meta, "active_ms"))
    assert now_ms - 5000 <= active <= now_ms
    # Pushed into the past, the group is idle for an hour: a 1-minute retention expires it.
    target.client.hset(meta, "active_ms", now_ms - 3_600_000)
    from adapter.cli.local_pod import run_on_redis
    from adapter.cli.options import RedisTarget
    from mapping.group.deletion import expire_groups

    expired = run_on_redis(
        RedisTarget(target.url, target.keys),
        lambda partitions: expire_groups(
            partitions, retention_ms=60_000, session_timeout_ms=10_000
        ),
    )
    assert expired == [("spark", topic)]
    assert _group_keys(target, "spark", topic) == []
    assert _listed(target) == set()


def test_a_partition_a_group_never_committed_is_not_held(
    target: CliTarget, topic: str, start_pod
) -> None:
    target.cli("topic", "create", topic, "--partitions", "2", "--replication-factor", "1",
               "--min-insync-replicas", "1", "--retention-ms", "0")  # fmt: skip
    pod = _pod(start_pod, target, "--retention-interval-ms", "0")
    with pod.client() as client:
        written: dict[int, list[int]] = {0: [], 1: []}
        for i in range(40):
            reply = client.produce(topic, f"key{i}", f"v{i}")
            written[reply.partition].append(reply.offset)
        assert len(written[0]) >= 2 and len(written[1]) >= 1
        generation = client.join("g", topic, "c1").generation
        client.commit("g", topic, "c1", generation, 0, written[0][1])  # only partition 0
        out = target.cli("topic", "trim", topic)
        assert f"partition=1 trimmed={len(written[1])} first_offset=-1" in out
        assert [r[0] for r in client.consume(topic, 0, 0).records] == written[0][1:]
        assert client.consume(topic, 1, 0).records == []


def _now_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def _expire(target: CliTarget, group: str, topic: str, retention_ms: int) -> int:
    """``group/expire.lua`` on one group: 1 expired, 0 kept, 2 no such group."""
    from mapping.connection import scripts
    from mapping.group.deletion import group_expire_call
    from mapping.group.groups import GroupHead

    head = GroupHead(target.keys.group(group, topic), 10_000, 0)
    call = group_expire_call(head, retention_ms, kafka_live=False)
    reply = target.client.execute_command(*scripts.as_eval(call))
    # an expiry answers {1, its time, the partitions that had an offset...}
    return int(reply[0]) if isinstance(reply, list) else int(reply)


def test_offsets_retention_counts_from_the_last_activity(target: CliTarget, topic: str) -> None:
    """Session timeout 10 s, retention 60 s; heartbeats and active_ms written in the past."""
    c, now = target.client, _now_ms(target.client)
    hour = 3_600_000

    def group(name: str, heartbeats: dict[str, int], active: int | None) -> None:
        gk = target.keys.group(name, topic)
        c.hset(gk.offsets, "0", 5)
        if heartbeats:
            c.hset(gk.members, mapping=heartbeats)
        if active is not None:
            c.hset(gk.meta, "active_ms", active)

    group("live", {"m": now - 1000}, now - hour)  # a live member: kept whatever else
    group("dead", {"m": now - hour}, now - 2 * hour)  # last member seen an hour ago
    group("recent", {"m": now - hour}, now - 1000)  # a commit/LEAVE a second ago
    group("legacy", {}, None)  # from before active_ms: its clock starts now
    results = {g: _expire(target, g, topic, 60_000) for g in ("live", "dead", "recent", "legacy")}
    assert results == {"live": 0, "dead": 1, "recent": 0, "legacy": 0}
    assert _group_keys(target, "dead", topic) == []
    assert now - 1000 <= int(c.hget(target.keys.group("legacy", topic).meta, "active_ms"))
    assert _expire(target, "never", topic, 60_000) == 2


def test_delete_counts_only_live_members(target: CliTarget, topic: str) -> None:
    """Members whose session ran out do not make a group NON_EMPTY."""
    gk = target.keys.group("g", topic)
    target.client.hset(gk.members, "gone", _now_ms(target.client) - 60_000)
    target.client.sadd(target.keys.groups, f"g {topic}")
    assert target.cli("group", "delete", "g") == f"deleted group=g topic={topic}\n"
    assert _group_keys(target, "g", topic) == []
