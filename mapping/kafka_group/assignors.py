"""The server-side assignors of the KIP-848 consumer protocol (``ServerAssignor``): they run
in the pod that found the group's target assignment behind its epoch, on the data the script
handed over, and the result is stored only if the epoch did not move meanwhile.

Both take members (member id -> subscribed topics), partition counts and the previous target
assignment, and return member id -> topic -> sorted partitions; every partition of a
subscribed topic goes to exactly one member subscribed to it.
"""

from __future__ import annotations

from collections.abc import Mapping

Assignment = dict[str, dict[str, list[int]]]
DEFAULT_ASSIGNOR = "uniform"  # Kafka's default (group.consumer.assignors: uniform, range)


def _maps(owner: Mapping[tuple[str, int], str], ids: list[str]) -> Assignment:
    result: Assignment = {m: {} for m in ids}
    for (topic, p), member in sorted(owner.items()):
        result[member].setdefault(topic, []).append(p)
    return result


def range_assignor(
    members: Mapping[str, list[str]], counts: Mapping[str, int], previous: Assignment
) -> Assignment:
    """Per topic, its subscribers sorted by id get contiguous runs; the first ``P % n`` of
    them one partition more (Kafka's range assignor, co-partitioning topics)."""
    ids = sorted(members)
    owner: dict[tuple[str, int], str] = {}
    for topic in sorted({t for subscribed in members.values() for t in subscribed}):
        subscribers = [m for m in ids if topic in members[m]]
        base, extra = divmod(counts.get(topic, 0), len(subscribers))
        p = 0
        for i, member in enumerate(subscribers):
            for _ in range(base + (1 if i < extra else 0)):
                owner[(topic, p)] = member
                p += 1
    return _maps(owner, ids)


def uniform_assignor(
    members: Mapping[str, list[str]], counts: Mapping[str, int], previous: Assignment
) -> Assignment:
    """Balanced and sticky: every member keeps up to its fair share of what it had (``P //
    n``, one more for ``P % n`` of them), the rest goes to the least loaded subscriber (ties
    by member id). With the same subscription everywhere the counts differ by at most one;
    with different subscriptions the balance is best effort."""
    ids = sorted(members)
    subscribed = {m: set(members[m]) for m in ids}
    topics = sorted({t for s in subscribed.values() for t in s})
    partitions = [(t, p) for t in topics for p in range(counts.get(t, 0))]
    if not ids:
        return {}
    base, extra = divmod(len(partitions), len(ids))
    valid = set(partitions)
    had = {
        m: sorted(
            (t, p)
            for t, ps in previous.get(m, {}).items()
            for p in ps
            if t in subscribed[m] and (t, p) in valid
        )
        for m in ids
    }
    owner: dict[tuple[str, int], str] = {}
    load = dict.fromkeys(ids, 0)
    for m in ids:
        for tp in had[m][:base]:
            if tp not in owner:
                owner[tp], load[m] = m, load[m] + 1
    extras = extra
    for m in ids:
        for tp in had[m][base:]:
            if extras == 0:
                break
            if tp not in owner:
                owner[tp], load[m], extras = m, load[m] + 1, extras - 1
                break
    for tp in partitions:
        if tp in owner:
            continue
        candidates = [m for m in ids if tp[0] in subscribed[m]]
        chosen = min(candidates, key=lambda m: (load[m], m))
        owner[tp], load[chosen] = chosen, load[chosen] + 1
    return _maps(owner, ids)


ASSIGNORS = {"uniform": uniform_assignor, "range": range_assignor}


def choose(preferences: list[str]) -> str:
    """The group's assignor: the one most members asked for (ties by name), else the
    default."""
    asked = [p for p in preferences if p in ASSIGNORS]
    if not asked:
        return DEFAULT_ASSIGNOR
    return min(set(asked), key=lambda name: (-asked.count(name), name))
