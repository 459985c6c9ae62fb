"""The group scripts against a real Redis: generations, expiry, assignors, commit checks."""

from __future__ import annotations

import itertools
import uuid
from contextlib import AbstractContextManager
from typing import Any

import pytest
import redis

from mapping.connection import scripts
from mapping.core.keys import Keys
from mapping.group import assignors
from mapping.group.groups import (
    GroupHead,
    group_commit_call,
    group_heartbeat_call,
    group_join_call,
    group_leave_call,
    group_sync_call,
)
from tests.support.waiting import wait_until

LONG_SESSION_MS = 60_000


class Group:
    """One (group, topic) driven through the scripts with EVAL (as a pod does by EVALSHA)."""

    def __init__(self, client: redis.Redis, partitions: int = 6) -> None:
        self.client = client
        self.partitions = partitions
        self.session_ms = LONG_SESSION_MS
        self.keys = Keys(f"test-{uuid.uuid4().hex[:8]}").group("g", "t")

    def head(self) -> GroupHead:
        return GroupHead(self.keys, self.session_ms, self.partitions)

    def run(self, command: tuple) -> Any:
        return self.client.execute_command(*scripts.as_eval(command))

    def join(self, member: str, assignor: str = "") -> tuple[int, list[int]]:
        generation, assigned = self.run(group_join_call(self.head(), member, assignor))
        return generation, [int(p) for p in assigned.split()]

    def sync(self, member: str, generation: int) -> tuple[int, list[int]]:
        generation, assigned = self.run(group_sync_call(self.head(), member, generation))
        return generation, [int(p) for p in assigned.split()]

    def heartbeat(self, member: str, generation: int) -> int:
        return self.run(group_heartbeat_call(self.head(), member, generation))

    def leave(self, member: str, generation: int) -> int:
        return self.run(group_leave_call(self.head(), member, generation))

    def commit(self, member: str, generation: int, partition: int, offset: int) -> int:
        return self.run(group_commit_call(self.head(), member, generation, partition, offset))

    def generation(self) -> int:
        return int(self.client.hget(self.keys.meta, "generation") or 0)

    def members(self) -> list[str]:
        return sorted(m.decode() for m in self.client.hkeys(self.keys.members))

    def assignment(self) -> dict[str, list[int]]:
        raw = self.client.hgetall(self.keys.assignment)
        return {m.decode(): [int(p) for p in v.split()] for m, v in raw.items()}

    def backdate(self, member: str, ms: int) -> None:
        """Pretend ``member``'s last heartbeat was ``ms`` earlier (time passing, for tests)."""
        last = int(self.client.hget(self.keys.members, member))
        self.client.hset(self.keys.members, member, last - ms)


def mismatch(message: str) -> AbstractContextManager[object]:
    return pytest.raises(redis.ResponseError, match=f"^GENERATION_MISMATCH {message}$")


@pytest.fixture
def group(redis_client: redis.Redis) -> Group:
    return Group(redis_client)


def test_first_join_is_generation_1_and_rejoin_does_not_bump(group: Group) -> None:
    assert group.generation() == 0  # an empty group
    assert group.join("a") == (1, [0, 1, 2, 3, 4, 5])
    assert group.join("a") == (1, [0, 1, 2, 3, 4, 5])  # current member, same assignor
    assert group.join("a", "round_robin") == (1, [0, 1, 2, 3, 4, 5])
    assert group.client.hget(group.keys.meta, "assignor") == b"round_robin"


def test_join_leave_sequence(group: Group) -> None:
    assert group.join("b")[0] == 1
    generation, assigned = group.join("a")
    assert generation == 2 and assigned == [0, 2, 4]  # sorted ids: a, b
    assert group.sync("b", 2) == (2, [1, 3, 5])
    assert group.join("c")[0] == 3
    assert group.assignment() == {"a": [0, 3], "b": [1, 4], "c": [2, 5]}
    assert group.leave("b", 3) == 4
    assert group.members() == ["a", "c"]
    assert group.assignment() == {"a": [0, 2, 4], "c": [1, 3, 5]}
    assert group.sync("a", 4) == (4, [0, 2, 4])
    assert group.leave("a", 4) == 5
    assert group.leave("c", 5) == 6
    assert group.members() == [] and group.assignment() == {}
    # The generation keeps counting: a member of the group's earlier life stays stale.
    assert group.join("a") == (7, [0, 1, 2, 3, 4, 5])


def test_assignor_changes(group: Group) -> None:
    group.join("a")
    group.join("b")
    assert group.assignment() == {"a": [0, 2, 4], "b": [1, 3, 5]}
    assert group.join("a", "range") == (3, [0, 1, 2])  # changed assignor: bump
    assert group.join("b") == (3, [3, 4, 5])  # no assignor=: keeps range, no bump
    assert group.client.hget(group.keys.meta, "assignor") == b"range"
    # A new member that also changes the assignor: one bump.
    assert group.join("c", "round_robin") == (4, [2, 5])
    assert group.assignment() == {"a": [0, 3], "b": [1, 4], "c": [2, 5]}


def test_new_group_with_range(group: Group) -> None:
    assert group.join("z", "range") == (1, [0, 1, 2, 3, 4, 5])
    assert group.join("y") == (2, [0, 1, 2])


def test_stale_generation_unknown_member_group_not_found(group: Group) -> None:
    with mismatch("group not found"):
        group.sync("a", 1)
    with mismatch("group not found"):
        group.heartbeat("a", 1)
    with mismatch("group not found"):
        group.leave("a", 1)
    with mismatch("group not found"):
        group.commit("a", 1, 0, 5)
    group.join("a")
    group.join("b")  # generation 2
    for stale in (1, 3, -1, 0):
        with mismatch("stale generation"):
            group.sync("a", stale)
        with mismatch("stale generation"):
            group.heartbeat("a", stale)
        with mismatch("stale generation"):
            group.leave("a", stale)
        with mismatch("stale generation"):
            group.commit("a", stale, 0, 5)
    with mismatch("unknown member"):
        group.sync("x", 2)
    with mismatch("unknown member"):
        group.heartbeat("x", 2)
    with mismatch("unknown member"):
        group.commit("x", 2, 0, 5)
    assert group.generation() == 2 and group.members() == ["a", "b"]
    # The client's answer to a mismatch: JOIN again (no bump for a current member).
    assert group.join("a") == (2, [0, 2, 4])
    assert group.heartbeat("a", 2) == 2


def test_commit_checks_ownership(group: Group) -> None:
    group.join("a")
    group.join("b")

    def heartbeat(member: str) -> int:
        return int(group.client.hget(group.keys.members, member))

    # a commit answers its time (Redis' clock, the offsets mirror's record time), which is
    # also the committing member's heartbeat
    assert group.commit("a", 2, 2, 41) == heartbeat("a")
    with mismatch("partition not assigned to member"):
        group.commit("a", 2, 1, 17)  # b's partition
    assert group.client.hgetall(group.keys.offsets) == {b"2": b"41"}
    group.leave("b", 2)
    assert group.commit("a", 3, 1, 17) == heartbeat("a")  # a owns everything now
    big = (1 << 63) - 1  # stored as sent: exact beyond what a Lua number holds
    assert group.commit("a", 3, 1, big) == heartbeat("a")
    assert group.client.hgetall(group.keys.offsets) == {b"2": b"41", b"1": str(big).encode()}


def test_expiry_is_applied_by_the_next_script(group: Group) -> None:
    group.join("a")
    group.join("b")
    group.join("c")
    group.backdate("b", LONG_SESSION_MS + 1000)
    group.backdate("c", LONG_SESSION_MS + 1000)
    # Nothing runs until a script touches the group: b and c are still listed.
    assert group.members() == ["a", "b", "c"]
    with mismatch("stale generation"):
        group.heartbeat("a", 3)  # expiry of b and c: one new generation
    assert group.members() == ["a"] and group.generation() == 4
    assert group.assignment() == {"a": [0, 1, 2, 3, 4, 5]}
    with mismatch("unknown member"):
        group.commit("b", 3, 1, 10)
    assert group.join("a") == (4, [0, 1, 2, 3, 4, 5])
    group.backdate("a", LONG_SESSION_MS - 5000)  # not yet expired
    assert group.heartbeat("a", 4) == 4


def test_expiry_with_a_short_session_timeout(group: Group) -> None:
    group.session_ms = 300
    group.join("a")
    generation, _ = group.join("b")
    # Only a heartbeats (in a tight loop); b's session runs out on Redis's clock.

    def b_expired() -> bool:
        nonlocal generation
        try:
            group.heartbeat("a", generation)
        except redis.ResponseError as exc:
            assert str(exc) == "GENERATION_MISMATCH stale generation"
            generation = group.join("a")[0]
        return group.members() == ["a"]

    wait_until(b_expired, timeout=30, interval=0.01)
    assert group.assignment() == {"a": [0, 1, 2, 3, 4, 5]}
    assert group.generation() == 3


@pytest.mark.parametrize("assignor", ["round_robin", "range"])
def test_assignors_match_the_specification(redis_client: redis.Redis, assignor: str) -> None:
    for members, partitions in itertools.product(range(1, 6), range(1, 13)):
        group = Group(redis_client, partitions)
        ids = [f"m{i}" for i in range(members)]
        for member in ids:
            generation, _ = group.join(member, assignor)
        expected = assignors.assign(assignor, ids, partitions)
        got = {m: group.sync(m, generation)[1] for m in ids}
        assert got == expected, (members, partitions)
        assert group.assignment() == expected
        owned = sorted(p for ps in got.values() for p in ps)
        assert owned == list(range(partitions))  # no gap, no overlap


def test_members_sorted_by_id_not_by_join_order(group: Group) -> None:
    for member in ("c", "a", "B", "b-2", "a.1"):
        group.join(member, "range")
    expected = assignors.range_assignor(["c", "a", "B", "b-2", "a.1"], 6)
    assert group.assignment() == expected
    assert list(expected) == ["B", "a", "a.1", "b-2", "c"]  # byte order, as Lua sorts
