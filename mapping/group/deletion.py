"""The end of a group's life: deleting a group (``adapter group delete``, Kafka's
DeleteGroups, a topic's deletion) and expiring idle ones (the pods' retention task).

A group (keyed by (group, topic)) is deleted by ``group/delete.lua`` atomically, Kafka
commit metadata included; then its entry leaves the groups set (another slot: a separate
call). A group with live members is refused with NON_EMPTY_GROUP unless forced, as Kafka
does. Deleting a whole group name (``delete_groups`` without a topic; Kafka's DeleteGroups
too) also deletes its Kafka consumer-group state (``kafka_group/delete.lua``).

Offsets retention (Kafka's ``offsets.retention.minutes``): a group with no live member and
no activity (heartbeat, commit, LEAVE, Spark commit) for the retention time is deleted,
committed offsets included, by ``group/expire.lua``; the retention task runs it.

Deleted offsets get their tombstones in ``__consumer_offsets`` when a ``mirror`` is given
(mapping/group/offsets_mirror.py): the scripts answer the partitions that had an offset and the
time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.errors import NON_EMPTY_GROUP, BrokerError
from mapping.core.keys import KafkaGroupKeys, Keys, group_entry, group_part, parse_group_entry
from mapping.group.groups import GroupHead, kafka_members_live
from mapping.group.offsets_mirror import OffsetsMirror


class GroupStore(Protocol):
    """What deleting and expiring groups needs: ``Topics``, or Kafka's ``KafkaGroups``."""

    batcher: RedisBatcher
    keys: Keys


DELETED = "deleted"
NOT_FOUND = "not_found"
NON_EMPTY = "non_empty"
KAFKA_STATE = "(kafka)"  # GroupDeletion.topic of a group name's Kafka consumer-group state

GROUP_DELETE = scripts.load("group/delete")
GROUP_EXPIRE = scripts.load("group/expire")
KAFKA_GROUP_DELETE = scripts.load("kafka_group/delete")


def group_delete_call(head: GroupHead, force: bool) -> tuple:
    return head.command(GROUP_DELETE, [int(force)])


def group_expire_call(head: GroupHead, retention_ms: int, kafka_live: bool) -> tuple:
    """group/expire.lua; ``kafka_live``: the group name has live Kafka consumers."""
    return head.command(GROUP_EXPIRE, [retention_ms, "1" if kafka_live else "0"])


def kafka_group_delete_call(keys: KafkaGroupKeys) -> tuple:
    return KAFKA_GROUP_DELETE.command(keys.script_keys(), [])


@dataclass(frozen=True, slots=True)
class GroupDeletion:
    group: str
    topic: str
    outcome: str  # DELETED, NOT_FOUND or NON_EMPTY
    message: str = ""


async def group_pairs(store: GroupStore) -> list[tuple[str, str]]:
    """Every (group, topic) of the groups set."""
    pairs = []
    for raw in await store.batcher.call("SMEMBERS", store.keys.groups):
        pair = parse_group_entry(raw)
        if pair is not None:
            pairs.append(pair)
    return sorted(pairs)


def _group_head(store: GroupStore, group: str, topic: str, session_timeout_ms: int) -> GroupHead:
    """What a group script takes first: deleting and expiring need no partition count."""
    return GroupHead(store.keys.group(group, topic), session_timeout_ms, 0)


async def _unlist(store: GroupStore, group: str, topic: str) -> None:
    """Remove the group's entry from the groups set, and put it back if a JOIN made the
    group again between its deletion and now (a listed group is one retention respects)."""
    gk = store.keys.group(group, topic)
    entry = group_entry(group, topic)
    await store.batcher.call("SREM", store.keys.groups, entry)
    if await store.batcher.call("EXISTS", gk.meta, gk.members, gk.offsets):
        await store.batcher.call("SADD", store.keys.groups, entry)


async def delete_group(
    store: GroupStore, group: str, topic: str, *, force: bool, session_timeout_ms: int,
    mirror: OffsetsMirror | None = None,
) -> GroupDeletion:  # fmt: skip
    """Delete ``group`` of ``topic`` (members, assignment, meta, offsets, set entry).
    Refused (NON_EMPTY) while a member's session (``session_timeout_ms``) has not run out,
    unless ``force``. The deleted offsets' tombstones are noted in ``mirror``."""
    call = group_delete_call(_group_head(store, group, topic, session_timeout_ms), force)
    try:
        reply = await store.batcher.call(*call)
    except BrokerError as exc:
        if exc.code != NON_EMPTY_GROUP:
            raise
        return GroupDeletion(group, topic, NON_EMPTY, exc.message)
    deleted = _note_deleted(mirror, group, topic, reply)
    await _unlist(store, group, topic)
    return GroupDeletion(group, topic, DELETED if deleted else NOT_FOUND)


def _note_deleted(mirror: OffsetsMirror | None, group: str, topic: str, reply: Any) -> int:
    """group/delete.lua's or group/expire.lua's outcome code, its tombstones noted in
    ``mirror``: {1, time, the partitions that had an offset...} when it deleted, else a code."""
    if not isinstance(reply, list):
        return int(reply)
    if mirror is not None:
        mirror.note_deleted(group, topic, [int(p) for p in reply[2:]], int(reply[1]))
    return int(reply[0])


async def delete_groups(
    store: GroupStore, group: str, topic: str | None, *, force: bool, session_timeout_ms: int,
    mirror: OffsetsMirror | None = None,
) -> list[GroupDeletion]:  # fmt: skip
    """Delete ``group`` of ``topic``, or the whole group name: its group of every topic (per
    the groups set) and its Kafka consumer-group state (``KAFKA_STATE`` in the results).
    The one path of ``adapter group delete`` and Kafka's DeleteGroups. Live Kafka consumers
    refuse the whole-name delete even when forced (they would only join again). The deleted
    offsets' tombstones are written into ``mirror`` before it returns."""
    if topic is not None:
        topics = [topic]
    else:
        topics = [t for g, t in await group_pairs(store) if g == group]
    results = [
        await delete_group(
            store, group, t, force=force, session_timeout_ms=session_timeout_ms, mirror=mirror
        )
        for t in topics
    ]
    if mirror is not None:
        await mirror.settle()
    if topic is not None or any(r.outcome == NON_EMPTY for r in results):
        return results
    # pending transactional offsets (TxnOffsetCommit) go with the committed ones, as Kafka's
    # tombstones remove both; the producers' epochs stay (they fence zombies)
    await store.batcher.call("DEL", store.keys.kafka_group(group).txn_offsets)
    kafka = await delete_kafka_state(store, group)
    return results + ([kafka] if kafka.outcome != NOT_FOUND else [])


async def delete_kafka_state(store: GroupStore, group: str) -> GroupDeletion:
    """The group name's Kafka consumer-group state (either protocol); NON_EMPTY while its
    Kafka consumers are live."""
    gk = store.keys.kafka_group(group)
    call = store.batcher.call
    if not int(await call("EXISTS", gk.meta, gk.consumer_meta)):
        await call("SREM", store.keys.kafka_groups, group_part(group))
        return GroupDeletion(group, KAFKA_STATE, NOT_FOUND)
    reply = await call(*kafka_group_delete_call(gk))
    if int(reply[0]) != 0:
        return GroupDeletion(group, KAFKA_STATE, NON_EMPTY, "live Kafka consumers")
    await call("SREM", store.keys.kafka_groups, group_part(group))
    return GroupDeletion(group, KAFKA_STATE, DELETED)


async def expire_groups(
    store: GroupStore, *, retention_ms: int, session_timeout_ms: int,
    mirror: OffsetsMirror | None = None,
) -> list[tuple[str, str]]:  # fmt: skip
    """Offsets retention: delete every listed group idle for ``retention_ms`` (see
    ``group/expire.lua``) and drop set entries of groups that no longer exist. A group name
    with live Kafka consumers keeps its offsets; one whose every (group, topic) expired loses
    its idle Kafka state too, as Kafka expires an empty group with its offsets. Returns the
    (group, topic) pairs expired; their offsets' tombstones are noted in ``mirror``."""
    pairs = await group_pairs(store)
    names = sorted({g for g, _ in pairs})
    live = await asyncio.gather(*(kafka_members_live(store.batcher, store.keys, g) for g in names))
    # a group with pending transactional offsets keeps its offsets, as Kafka's expiry skips
    # partitions with pending transactional offsets (and keeps a group with open ones)
    pending = await asyncio.gather(
        *(store.batcher.call("EXISTS", store.keys.kafka_group(g).txn_offsets) for g in names)
    )
    kafka_live = {
        g: bool(is_live) or int(has_pending) > 0
        for g, is_live, has_pending in zip(names, live, pending, strict=True)
    }
    replies = await asyncio.gather(
        *(
            store.batcher.call(
                *group_expire_call(
                    _group_head(store, g, t, session_timeout_ms), retention_ms, kafka_live[g]
                )
            )
            for g, t in pairs
        )
    )
    expired = []
    for (group, topic), reply in zip(pairs, replies, strict=True):
        outcome = _note_deleted(mirror, group, topic, reply)
        if outcome == 0:
            continue
        await _unlist(store, group, topic)
        if outcome == 1:
            expired.append((group, topic))
    remaining = {g for g, _ in await group_pairs(store)}
    for group in sorted({g for g, _ in expired} - remaining):
        await delete_kafka_state(store, group)
    return expired
