"""Consumer groups in Redis: JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET.

A group is keyed by (group, topic) and lives in five hashes under one hash tag (see
``Keys.group`` and ``mapping/lua/_group.lua``), readable with ``redis-cli HGETALL``:

    meta        generation, assignor, partitions, active_ms (last activity of a member that
                left or expired, or of a Spark commit: offsets retention, mapping/admin.py)
    members     consumer id -> last heartbeat (ms since the epoch, Redis clock)
    assignment  consumer id -> its partitions, e.g. "0 3 6"
    offsets     partition -> committed offset (the next offset to read)
    offset_metadata  Kafka commit metadata and leader epochs (mapping/kafka_groups/offsets.py):
                a COMMIT removes its partition's, it carries neither

Every change is one Lua script (``group_*.lua``) that reads the clock with ``TIME`` and first
removes members whose session ran out, so expiry needs no reaper and no pod clock. The
generation-check failures come back from the scripts as ``GENERATION_MISMATCH`` errors.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping import scripts
from mapping.batcher import Pending, RedisBatcher
from mapping.codec import to_str
from mapping.keys import Keys, group_entry


@dataclass(frozen=True, slots=True)
class Membership:
    generation: int
    assigned: list[int]


async def kafka_members_live(batcher: RedisBatcher, keys: Keys, group: str) -> bool:
    """Whether ``group`` has live Kafka members (either protocol), read only: V1 JOIN
    refuses such a group name (memberships are per protocol), and offsets retention keeps
    its offsets (mapping/admin.py)."""
    command = scripts.load("kgroup_live").command(keys.kafka_group(group).script_keys(), [])
    return int(await batcher.call(*command)) > 0


def _partitions(assigned: bytes | str) -> list[int]:
    return [int(p) for p in to_str(assigned).split()]


class Groups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, *, session_timeout_ms: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.session_timeout_ms = session_timeout_ms

    def script_call(self, name: str, group: str, topic: str, partitions: int, args: list) -> tuple:
        """The EVALSHA command of the group script ``name`` (the benchmark's baseline sends
        the same commands straight to Redis)."""
        gk = self.keys.group(group, topic)
        return scripts.load(name).command(
            [gk.meta, gk.members, gk.assignment, gk.offsets, gk.offset_metadata],
            [self.session_timeout_ms, partitions, *args],
        )

    def start_join(
        self, group: str, topic: str, partitions: int, member: str, assignor: str | None = None
    ) -> Pending[Membership]:
        """Queue a JOIN: add or refresh ``member``;
        ``assignor=None`` keeps the group's (new: round_robin)."""
        call = self.script_call("group_join", group, topic, partitions, [member, assignor or ""])
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
        call = self.script_call("group_sync", group, topic, partitions, [member, generation])
        reply = await self.batcher.call(*call)
        return Membership(int(reply[0]), _partitions(reply[1]))

    def start_heartbeat(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> Pending[int]:
        """Queue a heartbeat; its generation when done."""
        call = self.script_call("group_heartbeat", group, topic, partitions, [member, generation])
        return Pending(self.batcher.submit(*call), int)

    async def leave(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> int:
        """Returns the group's new generation."""
        call = self.script_call("group_leave", group, topic, partitions, [member, generation])
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
        """Queue a commit of ``offset`` (the next to read) for ``partition``."""
        args = [member, generation, partition, offset]
        call = self.script_call("group_commit", group, topic, partitions, args)
        return Pending(self.batcher.submit(*call), lambda _: None)

    async def committed(self, group: str, topic: str, partition: int) -> int:
        """The committed offset (next to read) of ``partition``; 0 when nothing is committed.
        One HGET is atomic and changes nothing, so it needs no script."""
        value = await self.batcher.call("HGET", self.keys.group(group, topic).offsets, partition)
        return 0 if value is None else int(value)
