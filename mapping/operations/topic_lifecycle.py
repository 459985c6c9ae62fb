"""The end of a topic's life, and its growth: deleting a topic (its groups with it) and
growing its partition count.

Used by the command line (``adapter topic delete``, ``adapter group delete``), the pods'
retention task (offsets retention) and, later, the Kafka front door (DeleteTopics,
DeleteGroups). A topic's own keys (its hash, the topics set, the id index) are written by
mapping/topic/topics.py (``Topics``); the partitions' and groups' keys here.

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

A deleted topic's groups' offsets get their
tombstones in ``__consumer_offsets`` when a ``mirror`` is given (mapping/group/offsets_mirror.py):
the scripts answer the partitions that had an offset and the time.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping.connection import scripts
from mapping.group.deletion import delete_group, group_pairs
from mapping.group.offsets_mirror import OffsetsMirror
from mapping.topic.topic_config import MAX_PARTITIONS, MAX_REPLICATION_FACTOR
from mapping.topic.topics import Topics

# How long a deleted topic's partitions refuse writes (their tombstones live). A pod hears of
# the deletion within moments (pub/sub; a reconnect forgets every topic); this only has to
# outlast a pod cut off from its pub/sub connection.
TOMBSTONE_MS = 3_600_000
# Follower replica streams deleted with a partition: every replica id a topic may have,
# whatever the topic hash says.
MAX_REPLICAS = MAX_REPLICATION_FACTOR - 1

PARTITION_DELETE = scripts.load("partition/delete")


def partition_delete_call(owned: list[str], tombstone_ms: int, topic_id: str) -> tuple:
    """partition/delete.lua: ``owned`` (log, state, then every other key of the partition)
    go, the state becomes topic ``topic_id``'s tombstone for ``tombstone_ms``."""
    return PARTITION_DELETE.command(owned, [tombstone_ms, topic_id])


@dataclass(frozen=True, slots=True)
class TopicDeletion:
    topic: str
    partitions: int
    groups: list[str]  # the topic's groups, deleted with it
    topic_id: str = ""  # the deleted topic's id ("": a name listed with no topic)


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
