"""The end of a topic's and a group's life: deleting them, and expiring idle groups; and
growing a topic's partition count.

Used by the command line (``adapter topic delete``, ``adapter group delete``), the pods'
retention task (offsets retention) and, later, the Kafka front door (DeleteTopics,
DeleteGroups). A topic's own keys (its hash, the topics set, the id index) are written by
mapping/topics.py (``Topics``); the partitions' and groups' keys here.

Deleting a topic, in this order so that no pod writes into a half-deleted topic:

1. every partition: its log, replica streams, idempotent producers' state and Spark sink
   markers are deleted and its state hash becomes a tombstone ``{deleted: 1, topic_id}``
   expiring after ``TOMBSTONE_MS`` (``partition/delete.lua``); from then on the partition
   scripts refuse it with UNKNOWN_TOPIC, even on a pod that still has the topic's settings
   cached. The tombstones are the only keys a deleted topic leaves, and they expire;
2. the topic hash goes (``topic/delete.lua``, which answers the count the topic had then:
   partitions added since step 1 read it get their tombstones too), then its entries in the
   topics set and the id index: lookups miss, and a pod with auto-creation on makes the
   topic anew with its own defaults and a new id (which removes the tombstones of the new
   topic's partitions: ``partition/revive.lua``, a tombstone of another id only, so a
   creation announced after this deletion of it leaves them);
3. the name is published on ``Keys.topics_deleted_channel``: every pod drops its cached
   settings (and its replicator stops playing the partitions);
4. the topic's groups are deleted (forced: their members JOIN again if they come back);
5. the name is published once more, for a pod whose lookup was in flight during 2.

Growing a topic (``add_partitions``: ``adapter topic alter --partitions``, Kafka
CreatePartitions): the new partitions first lose any tombstone an earlier topic of that name
left, then ``topic/grow.lua`` raises the count in the topic hash (only ever up), then the name
is published on ``Keys.topics_changed_channel``: every pod forgets the topic's cached
settings (partition count, produce builders, size marks, the replicator's partitions) and
reads them again, so V1 PRODUCE's key partitioning (FNV-1a mod the count) uses the new count,
as Kafka's default partitioner does. Until a pod hears the notice it keeps writing into the
old partitions, which still exist.

A group (keyed by (group, topic)) is deleted by ``group/delete.lua`` atomically, Kafka
commit metadata included; then its entry leaves the groups set (another slot: a separate
call). A group with live members is refused with NON_EMPTY_GROUP unless forced, as Kafka
does. Deleting a whole group name (``delete_groups`` without a topic; Kafka's DeleteGroups
too) also deletes its Kafka consumer-group state (``kafka_group/delete.lua``).

Offsets retention (Kafka's ``offsets.retention.minutes``): a group with no live member and
no activity (heartbeat, commit, LEAVE, Spark commit) for the retention time is deleted,
committed offsets included, by ``group/expire.lua``; the retention task runs it.

Deleted offsets (a group's deletion or expiry, and so a topic's deletion) get their
tombstones in ``__consumer_offsets`` when a ``mirror`` is given (mapping/offsets_mirror.py):
the scripts answer the partitions that had an offset and the time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from mapping import scripts
from mapping.batcher import RedisBatcher
from mapping.errors import NON_EMPTY_GROUP, BrokerError
from mapping.groups import GroupHead, kafka_members_live
from mapping.keys import KafkaGroupKeys, Keys, group_entry, group_part, parse_group_entry
from mapping.offsets_mirror import OffsetsMirror
from mapping.topic_config import MAX_PARTITIONS, MAX_REPLICATION_FACTOR
from mapping.topics import Topics


class GroupStore(Protocol):
    """What deleting and expiring groups needs: ``Topics``, or Kafka's ``KafkaGroups``."""

    batcher: RedisBatcher
    keys: Keys


# How long a deleted topic's partitions refuse writes (their tombstones live). A pod hears of
# the deletion within moments (pub/sub; a reconnect forgets every topic); this only has to
# outlast a pod cut off from its pub/sub connection.
TOMBSTONE_MS = 3_600_000
# Follower replica streams deleted with a partition: every replica id a topic may have,
# whatever the topic hash says.
MAX_REPLICAS = MAX_REPLICATION_FACTOR - 1

DELETED = "deleted"
NOT_FOUND = "not_found"
NON_EMPTY = "non_empty"
KAFKA_STATE = "(kafka)"  # GroupDeletion.topic of a group name's Kafka consumer-group state

PARTITION_DELETE = scripts.load("partition/delete")
GROUP_DELETE = scripts.load("group/delete")
GROUP_EXPIRE = scripts.load("group/expire")
KAFKA_GROUP_DELETE = scripts.load("kafka_group/delete")


def partition_delete_call(owned: list[str], tombstone_ms: int, topic_id: str) -> tuple:
    """partition/delete.lua: ``owned`` (log, state, then every other key of the partition)
    go, the state becomes topic ``topic_id``'s tombstone for ``tombstone_ms``."""
    return PARTITION_DELETE.command(owned, [tombstone_ms, topic_id])


def group_delete_call(head: GroupHead, force: bool) -> tuple:
    return head.command(GROUP_DELETE, [int(force)])


def group_expire_call(head: GroupHead, retention_ms: int, kafka_live: bool) -> tuple:
    """group/expire.lua; ``kafka_live``: the group name has live Kafka consumers."""
    return head.command(GROUP_EXPIRE, [retention_ms, "1" if kafka_live else "0"])


def kafka_group_delete_call(keys: KafkaGroupKeys) -> tuple:
    return KAFKA_GROUP_DELETE.command(keys.script_keys(), [])


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    topic: str
    partitions: int
    groups: list[str]  # the topic's groups, deleted with it
    topic_id: str = ""  # the deleted topic's id ("": a name listed with no topic)


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


def _delete_partitions(topics: Topics, name: str, topic_id: str, partitions: range) -> list:
    """partition/delete.lua calls for these partitions: every key of each goes, its state
    becomes the expiring tombstone of topic ``topic_id``."""
    keys = topics.keys
    calls = []
    for p in partitions:
        pk = keys.partition(name, p)
        owned = [pk.log, pk.state, pk.producers, pk.producer_times, keys.sink_markers(name, p)]
        owned += [*pk.compaction(), pk.segments]
        owned += [pk.txn_open, pk.txn_aborted]
        owned += [pk.replica(r) for r in range(1, MAX_REPLICAS + 1)]
        calls.append(topics.batcher.call(*partition_delete_call(owned, TOMBSTONE_MS, topic_id)))
    return calls


async def delete_topic(
    topics: Topics, name: str, topic_id: str = "", *, mirror: OffsetsMirror | None = None
) -> TopicDeletion | None:
    """Delete topic ``name`` with its data and groups (see the module's docstring for the
    order). None when there is no such topic, or when ``topic_id`` is given and the topic
    of that name has another id (Kafka's DeleteTopics by id)."""
    config, listed = await asyncio.gather(topics.read(name), topics.listed(name))
    if config is None and not listed:
        return None
    if topic_id and (config is None or config.topic_id != topic_id):
        return None
    partitions = config.partitions if config is not None else 0
    deleted_id = config.topic_id if config is not None else ""
    await asyncio.gather(*_delete_partitions(topics, name, deleted_id, range(partitions)))
    final = -1  # (a name listed with no topic hash: none to delete, nor one made since)
    if config is not None:
        final = await topics.delete_settings(name, deleted_id)
    if final == -2:
        # Made anew under us (another id): its partitions keep no tombstone of ours.
        again = await topics.read(name)
        if again is not None:
            await topics.revive(name, again.topic_id, range(again.partitions))
        topics.cache.forget(name)
        return None
    if final > partitions:  # grown since it was read (CreatePartitions meanwhile)
        more = range(partitions, final)
        await asyncio.gather(*_delete_partitions(topics, name, deleted_id, more))
        partitions = final
    await topics.unlist(name, deleted_id)
    await topics.announce_deleted(name)
    topics.cache.forget(name)
    groups = [g for g, t in await group_pairs(topics) if t == name]
    await asyncio.gather(
        *(
            delete_group(topics, g, name, force=True, session_timeout_ms=0, mirror=mirror)
            for g in groups
        )
    )
    if mirror is not None:
        await mirror.settle()
    await topics.announce_deleted(name)
    return TopicDeletion(name, partitions, groups, deleted_id)


@dataclass(frozen=True, slots=True)
class PartitionGrowth:
    topic: str
    before: int
    after: int


class InvalidPartitions(ValueError):
    """The count asked for is not above the topic's (partitions are never removed), or
    above MAX_PARTITIONS."""


def _check_growth(name: str, before: int, count: int) -> None:
    if count > MAX_PARTITIONS:
        raise InvalidPartitions(f"a topic has at most {MAX_PARTITIONS} partitions")
    if count <= before:
        raise InvalidPartitions(
            f"topic {name} has {before} partitions: the count can only grow, not to {count}"
        )


async def add_partitions(
    topics: Topics, name: str, count: int, *, validate_only: bool = False
) -> PartitionGrowth | None:
    """Grow topic ``name`` to ``count`` partitions (see the module's docstring); None when
    there is no such topic, InvalidPartitions when ``count`` is not above its count."""
    config = await topics.read(name)
    if config is None:
        return None
    before = config.partitions
    _check_growth(name, before, count)
    if validate_only:
        return PartitionGrowth(name, before, count)
    await topics.revive(name, config.topic_id, range(before, count))
    before = await topics.grow(name, count)
    if before < 0:  # deleted meanwhile
        return None
    _check_growth(name, before, count)  # grown meanwhile by someone else
    await topics.announce_changed(name)
    topics.cache.forget(name)
    return PartitionGrowth(name, before, count)


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
