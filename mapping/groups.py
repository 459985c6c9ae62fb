"""Consumer groups in Redis: JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET.

A group is keyed by (group, topic) and lives in four hashes under one hash tag (see
``Keys.group`` and ``mapping/lua/_group.lua``), readable with ``redis-cli HGETALL``:

    meta        generation, assignor, partitions
    members     consumer id -> last heartbeat (ms since the epoch, Redis clock)
    assignment  consumer id -> its partitions, e.g. "0 3 6"
    offsets     partition -> committed offset (the next offset to read)

Every change is one Lua script (``group_*.lua``) that reads the clock with ``TIME`` and first
removes members whose session ran out, so expiry needs no reaper and no pod clock. The
generation-check failures come back from the scripts as ``GENERATION_MISMATCH`` errors.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping import scripts
from mapping.batcher import RedisBatcher
from mapping.keys import Keys


@dataclass(frozen=True, slots=True)
class Membership:
    generation: int
    assigned: list[int]


def _partitions(text: bytes | str) -> list[int]:
    if isinstance(text, bytes):
        text = text.decode()
    return [int(p) for p in text.split()]


class Groups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, *, session_timeout_ms: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.session_timeout_ms = session_timeout_ms

    def _call(self, name: str, group: str, topic: str, partitions: int, args: list) -> tuple:
        gk = self.keys.group(group, topic)
        return scripts.load(name).command(
            [gk.meta, gk.members, gk.assignment, gk.offsets],
            [self.session_timeout_ms, partitions, *args],
        )

    async def join(
        self, group: str, topic: str, partitions: int, member: str, assignor: str | None = None
    ) -> Membership:
        """Add or refresh ``member``; ``assignor=None`` keeps the group's (new: round_robin)."""
        call = self._call("group_join", group, topic, partitions, [member, assignor or ""])
        # Sent in the same pipeline: the set lists every group for `redis-cli SMEMBERS`. It is
        # another slot, so it cannot be part of the script (Redis Cluster).
        reply, _ = await asyncio.gather(
            self.batcher.call(*call),
            self.batcher.call("SADD", self.keys.groups, f"{group} {topic}"),
        )
        return Membership(int(reply[0]), _partitions(reply[1]))

    async def sync(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> Membership:
        call = self._call("group_sync", group, topic, partitions, [member, generation])
        reply = await self.batcher.call(*call)
        return Membership(int(reply[0]), _partitions(reply[1]))

    async def heartbeat(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> int:
        call = self._call("group_heartbeat", group, topic, partitions, [member, generation])
        return int(await self.batcher.call(*call))

    async def leave(
        self, group: str, topic: str, partitions: int, member: str, generation: int
    ) -> int:
        """Returns the group's new generation."""
        call = self._call("group_leave", group, topic, partitions, [member, generation])
        return int(await self.batcher.call(*call))

    async def commit(
        self,
        group: str,
        topic: str,
        partitions: int,
        member: str,
        generation: int,
        partition: int,
        offset: int,
    ) -> None:
        args = [member, generation, partition, offset]
        await self.batcher.call(*self._call("group_commit", group, topic, partitions, args))

    async def committed(self, group: str, topic: str, partition: int) -> int:
        """The committed offset (next to read) of ``partition``; 0 when nothing is committed.
        One HGET is atomic and changes nothing, so it needs no script."""
        value = await self.batcher.call("HGET", self.keys.group(group, topic).offsets, partition)
        return 0 if value is None else int(value)
