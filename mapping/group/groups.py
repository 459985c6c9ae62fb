"""Consumer groups in Redis: JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET.

A group is keyed by (group, topic) and lives in five hashes under one hash tag (see
``Keys.group`` and ``mapping/lua/lib/group.lua``), readable with ``redis-cli HGETALL``:

    meta        generation, assignor, partitions, active_ms (last activity of a member that
                left or expired, or of a Spark commit: offsets retention, mapping/group/deletion.py)
    members     consumer id -> last heartbeat (ms since the epoch, Redis clock)
    assignment  consumer id -> its partitions, e.g. "0 3 6"
    offsets     partition -> committed offset (the next offset to read)
    offset_metadata  Kafka commit metadata and leader epochs (mapping/kafka_group/offsets.py):
                a COMMIT removes its partition's, it carries neither

Every change is one Lua script (``group/*.lua``) that reads the clock with ``TIME`` and first
removes members whose session ran out, so expiry needs no reaper and no pod clock. The
generation-check failures come back from the scripts as ``GENERATION_MISMATCH`` errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mapping.connection import scripts
from mapping.connection.batcher import Pending, RedisBatcher
from mapping.connection.scripts import Script
from mapping.core.codec import to_str
from mapping.core.keys import GroupKeys, KafkaGroupKeys, Keys, group_entry
from mapping.group.offsets_mirror import OffsetsMirror

GROUP_JOIN = scripts.load("group/join")
GROUP_SYNC = scripts.load("group/sync")
GROUP_HEARTBEAT = scripts.load("group/heartbeat")
GROUP_LEAVE = scripts.load("group/leave")
GROUP_COMMIT = scripts.load("group/commit")
KAFKA_GROUP_LIVE = scripts.load("kafka_group/live")


@dataclass(frozen=True, slots=True)
class Membership:
    generation: int
    assigned: list[int]


@dataclass(frozen=True, slots=True)
class GroupHead:
    """What every group script takes first (see lib/group.lua): the (group, topic)'s five
    hashes, then the session timeout and the topic's partition count."""

    keys: GroupKeys
    session_timeout_ms: int
    partition_count: int

    def command(self, script: Script, args: Sequence[Any]) -> tuple:
        k = self.keys
        return script.command(
            [k.meta, k.members, k.assignment, k.offsets, k.offset_metadata],
            [self.session_timeout_ms, self.partition_count, *args],
        )


def group_join_call(head: GroupHead, member: str, assignor: str) -> tuple:
    """group/join.lua; ``assignor`` "" keeps the group's (new: round_robin)."""
    return head.command(GROUP_JOIN, [member, assignor])


def group_sync_call(head: GroupHead, member: str, generation: int) -> tuple:
    return head.command(GROUP_SYNC, [member, generation])


def group_heartbeat_call(head: GroupHead, member: str, generation: int) -> tuple:
    return head.command(GROUP_HEARTBEAT, [member, generation])


def group_leave_call(head: GroupHead, member: str, generation: int) -> tuple:
    return head.command(GROUP_LEAVE, [member, generation])


def group_commit_call(
    head: GroupHead, member: str, generation: int, partition: int, offset: int
) -> tuple:
    return head.command(GROUP_COMMIT, [member, generation, partition, offset])


def kafka_group_live_call(keys: KafkaGroupKeys) -> tuple:
    """kafka_group/live.lua: how many members of the Kafka group are live (read only)."""
    return KAFKA_GROUP_LIVE.command(keys.script_keys(), [])


async def kafka_members_live(batcher: RedisBatcher, keys: Keys, group: str) -> bool:
    """Whether ``group`` has live Kafka members (either protocol), read only: V1 JOIN
    refuses such a group name (memberships are per protocol), and offsets retention keeps
    its offsets (mapping/group/deletion.py)."""
    return int(await batcher.call(*kafka_group_live_call(keys.kafka_group(group)))) > 0


def _nothing(_reply: Any) -> None:
    return None


def _partitions(assigned: bytes | str) -> list[int]:
    return [int(p) for p in to_str(assigned).split()]


class Groups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, *, session_timeout_ms: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.session_timeout_ms = session_timeout_ms
        # __consumer_offsets' writer (mapping/group/offsets_mirror.py); None: not mirrored
        self.mirror: OffsetsMirror | None = None

    def head(self, group: str, topic: str, partitions: int) -> GroupHead:
        return GroupHead(self.keys.group(group, topic), self.session_timeout_ms, partitions)

    def start_join(
        self, group: str, topic: str, partitions: int, member: str, assignor: str | None = None
    ) -> Pending[Membership]:
        """Queue a JOIN: add or refresh ``member``;
        ``assignor=None`` keeps the group's (new: round_robin)."""
        call = group_join_call(self.head(group, topic, partitions), member, assignor or "")
        # Sent in the same pipeline: the set lists every group for `redis-cli SMEMBERS`. It is
        # another slot, so it cannot be part of the script (Redis Cluster).
        both = asyncio.gather(
            self.batcher.submit(*call),
            self.batcher.submit("SADD", self.keys.groups, group_entry(group, topic)),
        )
        return Pending(both, lambda replies: Membership(int(replies[0][0]),
                                                        _partitions(replies[0][1])))  # fmt: skip

    async def sync(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> Membership:
        call = group_sync_call(self.head(group, topic, partitions), member, generation)
        reply = await self.batcher.call(*call)
        return Membership(int(reply[0]), _partitions(reply[1]))

    def start_heartbeat(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> Pending[int]:
        """Queue a heartbeat; its generation when done."""
        call = group_heartbeat_call(self.head(group, topic, partitions), member, generation)
        return Pending(self.batcher.submit(*call), int)

    async def leave(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> int:
        """Returns the group's new generation."""
        call = group_leave_call(self.head(group, topic, partitions), member, generation)
        return int(await self.batcher.call(*call))

    def start_commit(
        self,
        group: str,
        topic: str,
        partitions: int,
        member: str,
        generation: int,
        partition: int,
        offset: int,
    ) -> Pending[None]:
        """Queue a commit of ``offset`` (the next to read) for ``partition``; once done, the
        offsets mirror has it noted (its reply is the commit's time)."""
        head = self.head(group, topic, partitions)
        call = group_commit_call(head, member, generation, partition, offset)
        mirror = self.mirror
        if mirror is None:
            return Pending(self.batcher.submit(*call), _nothing)
        return Pending(
            self.batcher.submit(*call),
            lambda at: mirror.note_v1_commit(group, topic, partition, offset, at),
        )

    async def committed(self, group: str, topic: str, partition: int) -> int:
        """The committed offset (next to read) of ``partition``; 0 when nothing is committed.
        One HGET is atomic and changes nothing, so it needs no script."""
        value = await self.batcher.call("HGET", self.keys.group(group, topic).offsets, partition)
        return 0 if value is None else int(value)
