"""The KIP-848 server-side assignors (pure functions)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mapping.kafka_group.assignors import choose, range_assignor, uniform_assignor


def _owned(assignment: dict) -> list[tuple[str, int]]:
    return sorted((t, p) for topics in assignment.values() for t, ps in topics.items() for p in ps)


def test_range_gives_contiguous_runs_per_topic() -> None:
    members = {"a": ["t", "u"], "b": ["t", "u"], "c": ["t"]}
    result = range_assignor(members, {"t": 7, "u": 3}, {})
    assert result == {
        "a": {"t": [0, 1, 2], "u": [0, 1]},
        "b": {"t": [3, 4], "u": [2]},
        "c": {"t": [5, 6]},
    }


def test_uniform_keeps_what_members_had() -> None:
    """A third member joining takes only what the two others must give up to balance."""
    before = uniform_assignor({"a": ["t"], "b": ["t"]}, {"t": 6}, {})
    assert sorted(len(v["t"]) for v in before.values()) == [3, 3]
    after = uniform_assignor({"a": ["t"], "b": ["t"], "c": ["t"]}, {"t": 6}, before)
    assert sorted(len(v["t"]) for v in after.values()) == [2, 2, 2]
    for m in ("a", "b"):
        assert set(after[m]["t"]) <= set(before[m]["t"])


@given(
    st.integers(1, 6),
    st.dictionaries(st.sampled_from("tuvw"), st.integers(0, 9), min_size=1),
    st.data(),
)
def test_uniform_assigns_every_partition_once_balanced(members_count, counts, data) -> None:
    topics = sorted(counts)
    ids = [f"m{i}" for i in range(members_count)]
    members = {m: topics for m in ids}
    previous = {
        m: {t: data.draw(st.lists(st.integers(0, 12), max_size=4)) for t in topics} for m in ids
    }
    result = uniform_assignor(members, counts, previous)
    owned = _owned(result)
    assert owned == sorted((t, p) for t in topics for p in range(counts[t]))
    loads = [sum(len(ps) for ps in result[m].values()) for m in ids]
    assert max(loads) - min(loads) <= 1


def test_choose_the_most_asked_assignor() -> None:
    assert choose([]) == "uniform"
    assert choose(["range", "", "range", "uniform"]) == "range"
    assert choose(["nonsense"]) == "uniform"
