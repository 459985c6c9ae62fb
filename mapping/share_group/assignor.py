"""Kafka's simple assignor for share groups, pure: every pod computes the same assignment
from the same members, subscriptions and partition counts.

A share group's partitions may go to several members at once (the records, not the
partitions, are handed out one member at a time). Per topic, with its subscribers sorted:
fewer subscribers than partitions spread the partitions round-robin; more subscribers than
partitions give each subscriber one partition, round-robin, so every member reads and
every partition is read."""

from __future__ import annotations


def assign(
    subscriptions: dict[str, list[str]], partition_counts: dict[str, int]
) -> dict[str, dict[str, list[int]]]:
    """member id -> topic -> partitions (sorted), for every member (an empty dict when it
    gets nothing)."""
    target: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    topics = sorted({t for ts in subscriptions.values() for t in ts})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if count <= 0 or not members:
            continue
        if len(members) <= count:
            for p in range(count):
                target[members[p % len(members)]].setdefault(topic, []).append(p)
        else:
            for i, member in enumerate(members):
                target[member].setdefault(topic, []).append(i % count)
    for assigned in target.values():
        for partitions in assigned.values():
            partitions.sort()
    return target
