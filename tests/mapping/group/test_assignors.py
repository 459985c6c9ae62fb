"""The assignors as specified: round_robin p -> members[p % n]; range contiguous runs."""

from __future__ import annotations

import itertools

import pytest

from mapping.group.assignors import RANGE, ROUND_ROBIN, assign, range_assignor, round_robin


def test_round_robin_examples() -> None:
    assert round_robin(["b", "a"], 5) == {"a": [0, 2, 4], "b": [1, 3]}
    assert round_robin(["a", "b", "c"], 2) == {"a": [0], "b": [1], "c": []}
    assert round_robin([], 4) == {}


def test_range_examples() -> None:
    assert range_assignor(["b", "a"], 5) == {"a": [0, 1, 2], "b": [3, 4]}
    assert range_assignor(["c", "a", "b"], 7) == {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}
    assert range_assignor(["a", "b", "c"], 2) == {"a": [0], "b": [1], "c": []}
    assert range_assignor([], 4) == {}


def test_members_sorted_by_id() -> None:
    assert list(round_robin(["m2", "m10", "m1"], 3)) == ["m1", "m10", "m2"]
    assert round_robin(["m2", "m10", "m1"], 3) == {"m1": [0], "m10": [1], "m2": [2]}


@pytest.mark.parametrize("assignor", [ROUND_ROBIN, RANGE])
def test_every_partition_exactly_once_and_balanced(assignor: str) -> None:
    for n, partitions in itertools.product(range(1, 9), range(0, 20)):
        members = [f"c{i}" for i in range(n)]
        result = assign(assignor, members, partitions)
        assert sorted(result) == sorted(members)
        owned = sorted(p for ps in result.values() for p in ps)
        assert owned == list(range(partitions))
        sizes = [len(result[m]) for m in sorted(members)]
        assert max(sizes) - min(sizes) <= 1
        # The first P % n members (in id order) get the extra partition.
        assert sizes == [partitions // n + (1 if i < partitions % n else 0) for i in range(n)]


def test_range_runs_are_contiguous_in_member_order() -> None:
    result = range_assignor([f"c{i}" for i in range(4)], 11)
    flat = [p for member in sorted(result) for p in result[member]]
    assert flat == list(range(11))


def test_round_robin_rule() -> None:
    members = ["x", "y", "z"]
    result = round_robin(members, 12)
    for member, partitions in result.items():
        assert all(sorted(members)[p % 3] == member for p in partitions)


def test_unknown_assignor() -> None:
    with pytest.raises(ValueError, match="unknown assignor"):
        assign("sticky", ["a"], 3)
