"""The two partition assignors, as pure functions.

The authoritative assignment is computed inside the group scripts (``mapping/lua/lib/group.lua``),
atomically with the membership it is computed from; these functions are the specification
the scripts are tested against, and what a client may use to predict an assignment.

Both work over the member ids sorted (byte order; names are ASCII ``[A-Za-z0-9._-]``, so this
is also Python's ``str`` order) and the partitions ``0..P-1``:

- ``round_robin``: partition ``p`` goes to ``members[p % n]``;
- ``range``: contiguous runs in member order, ``P // n`` each, the first ``P % n`` members one
  extra.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

ROUND_ROBIN = "round_robin"
RANGE = "range"
DEFAULT_ASSIGNOR = ROUND_ROBIN

Assignment = dict[str, list[int]]


def round_robin(members: Iterable[str], partitions: int) -> Assignment:
    ordered = sorted(set(members))
    assignment: Assignment = {member: [] for member in ordered}
    if ordered:
        for partition in range(partitions):
            assignment[ordered[partition % len(ordered)]].append(partition)
    return assignment


def range_assignor(members: Iterable[str], partitions: int) -> Assignment:
    ordered = sorted(set(members))
    assignment: Assignment = {member: [] for member in ordered}
    if not ordered:
        return assignment
    base, extra = divmod(partitions, len(ordered))
    start = 0
    for index, member in enumerate(ordered):
        count = base + (1 if index < extra else 0)
        assignment[member] = list(range(start, start + count))
        start += count
    return assignment


ASSIGNORS: dict[str, Callable[[Iterable[str], int], Assignment]] = {
    ROUND_ROBIN: round_robin,
    RANGE: range_assignor,
}


def assign(assignor: str, members: Iterable[str], partitions: int) -> Assignment:
    """Member id -> its partitions (ascending) under the named assignor."""
    try:
        function = ASSIGNORS[assignor]
    except KeyError:
        raise ValueError(f"unknown assignor {assignor!r}") from None
    return function(members, partitions)
