"""What admin clients see of share groups (KIP-932): their membership as the heartbeats left
it, and each share-partition's state, read from (and reset on) the Redis consumer group
``share:<group>`` the group keeps on the partition's log stream.

Kafka's share-partition start offset (SPSO) is the first offset not yet acknowledged or
archived: here the first entry of the consumer group's PEL (records acquired or released
and not yet accepted or rejected), else the position after the group's last-delivered id;
a share-partition without a consumer group is not initialised (-1). Offsets are the
entries' time-encoded ids (``mapping.core.codec``), so the lag, in records, is counted from
the stream, never computed from offsets: the records in flight plus those not yet
delivered.

Altering or deleting a share-partition's state needs a group with no live members (Kafka's
NON_EMPTY_GROUP); the membership lives under the group's hash tag and the state under each
partition's, so the check is read before the per-partition scripts run, not in one step."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass, field

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import entry_id, entry_offset, to_str
from mapping.core.keys import Keys, group_name, group_part, is_valid_name
from mapping.share_group.assignor import assign
from mapping.share_group.share_groups import partition_counts

SHARE_GROUP_OFFSETS_DESCRIBE = scripts.load("share_group/offsets_describe")
SHARE_GROUP_OFFSETS_ALTER = scripts.load("share_group/offsets_alter")
SHARE_GROUP_OFFSETS_DELETE = scripts.load("share_group/offsets_delete")

UNINITIALIZED = -1  # Kafka's start offset and lag of a share-partition without state
# The most records not yet delivered that a description counts itself (where Redis' lag is
# unknown); beyond, the lag is unknown (-1).
MAX_COUNTED = 100_000
EMPTY, STABLE = "Empty", "Stable"  # Kafka's ShareGroupState names
ASSIGNOR = "simple"


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One share-partition's consumer group as share_group/offsets_describe reads it."""

    last_delivered_id: bytes
    in_flight: int  # the PEL's size
    first_in_flight_id: bytes | None
    undelivered: int  # records after the last-delivered id; -1: unknown


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    subscribed_topics: list[str]
    member_epoch: int | None  # the group epoch of its last answer (None: not recorded)
    assignment: dict[str, list[int]] = field(default_factory=dict)
    client_id: str = ""
    client_host: str = ""
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class Membership:
    """A share group as its heartbeats left it: the group epoch and its live members."""

    group_epoch: int
    members: list[ShareMember]

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def parse_partition_state(reply: list) -> PartitionState | None:
    """share_group/offsets_describe's reply; None: the share-partition has no state."""
    if not reply:
        return None
    last_id, in_flight, first, undelivered = reply
    return PartitionState(
        last_delivered_id=_as_bytes(last_id),
        in_flight=int(in_flight),
        first_in_flight_id=_as_bytes(first) if first else None,
        undelivered=int(undelivered),
    )


def start_offset(state: PartitionState | None, bits: int) -> int:
    """The share-partition start offset: the first record in flight, else the position
    after the last record delivered; -1 when the share-partition is not initialised."""
    if state is None:
        return UNINITIALIZED
    if state.in_flight > 0 and state.first_in_flight_id:
        return entry_offset(state.first_in_flight_id, bits)
    if state.last_delivered_id in (b"0-0", b"0"):
        return 0
    return entry_offset(state.last_delivered_id, bits) + 1


def lag(state: PartitionState | None) -> int:
    """Records not yet acknowledged (in flight, or not delivered yet); -1: unknown."""
    if state is None or state.undelivered < 0:
        return UNINITIALIZED
    return state.in_flight + state.undelivered


def last_id_before(offset: int, bits: int) -> str:
    """The last-delivered id that makes ``offset`` the next position read: the id just
    below it ("0-0" for offset 0), so the next record at or after ``offset`` comes next
    (an offset between two records means the next record)."""
    if offset <= 0:
        return "0-0"
    return entry_id(offset - 1, bits)


def live_members(stored: dict[str, str], now_ms: int) -> list[ShareMember]:
    """The members hash's members whose session has not run out (the heartbeat script
    drops the others on its next run), by member id, without their assignment."""
    live: list[ShareMember] = []
    for member, raw in sorted(stored.items()):
        entry = json.loads(raw)
        if int(entry.get("expiry", 0)) >= now_ms:
            topics = entry.get("topics") or []
            epoch = entry.get("epoch")
            client = entry.get("client") or {}
            rack = client.get("rack")
            live.append(
                ShareMember(
                    member,
                    sorted(t for t in topics if isinstance(t, str)),
                    int(epoch) if epoch is not None else None,
                    client_id=str(client.get("client_id") or ""),
                    client_host=str(client.get("host") or ""),
                    rack=rack if isinstance(rack, str) else None,
                )
            )
    return live


def share_group_offsets_describe_call(keys: Keys, group: str, topic: str, partition: int) -> tuple:
    return SHARE_GROUP_OFFSETS_DESCRIBE.command(
        [keys.partition(topic, partition).log], [keys.share_consumer_group(group), MAX_COUNTED]
    )


def share_group_offsets_alter_call(
    keys: Keys, group: str, topic: str, partition: int, offset: int, bits: int
) -> tuple:
    return SHARE_GROUP_OFFSETS_ALTER.command(
        [keys.partition(topic, partition).log],
        [keys.share_consumer_group(group), last_id_before(offset, bits)],
    )


def share_group_offsets_delete_call(keys: Keys, group: str, topic: str, partition: int) -> tuple:
    return SHARE_GROUP_OFFSETS_DELETE.command(
        [keys.partition(topic, partition).log], [keys.share_consumer_group(group)]
    )


class ShareGroupState:
    def __init__(self, batcher: RedisBatcher, keys: Keys, sequence_bits: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.bits = sequence_bits

    async def exists(self, group: str) -> bool:
        """Whether share group ``group`` exists: a member joined once and it was not
        deleted (an empty group stays, as Kafka keeps it)."""
        return bool(await self.batcher.call("EXISTS", self.keys.share_group(group).meta))

    async def membership(self, group: str) -> Membership | None:
        """The group epoch and the live members with the simple assignor's assignment, as
        the heartbeat computes it; None when there is no such share group."""
        gk = self.keys.share_group(group)
        epoch, stored = await asyncio.gather(
            self.batcher.call("HGET", gk.meta, "group_epoch"),
            self.batcher.call("HGETALL", gk.members),
        )
        if epoch is None:
            return None
        members = live_members(
            {to_str(k): to_str(v) for k, v in stored.items()}, int(time.time() * 1000)
        )
        subscriptions = {m.member_id: m.subscribed_topics for m in members}
        topics = sorted({t for ts in subscriptions.values() for t in ts if is_valid_name(t)})
        target = assign(subscriptions, await partition_counts(self.batcher, self.keys, topics))
        return Membership(
            int(epoch),
            [dataclasses.replace(m, assignment=target.get(m.member_id, {})) for m in members],
        )

    async def group_names(self) -> list[str]:
        """Every share group: the share groups set's names whose group still exists."""
        parts = sorted(
            to_str(p) for p in await self.batcher.call("SMEMBERS", self.keys.share_groups)
        )
        names = [group_name(p) for p in parts]
        found = await asyncio.gather(*(self.exists(n) for n in names))
        return [n for n, exists in zip(names, found, strict=True) if exists]

    async def topics(self, group: str) -> list[str]:
        """Every topic a member of ``group`` subscribed to: where it may have state."""
        stored = await self.batcher.call("SMEMBERS", self.keys.share_group(group).topics)
        return sorted(to_str(t) for t in stored)

    async def partitions(self, group: str) -> list[tuple[str, int]]:
        """Every partition of the topics ``group`` subscribed to that exist now."""
        counts = await partition_counts(self.batcher, self.keys, await self.topics(group))
        return [(t, p) for t, n in sorted(counts.items()) for p in range(n)]

    async def describe(
        self, group: str, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], PartitionState | None]:
        """Each share-partition's state (None: not initialised), in one pipelined round."""
        replies = await asyncio.gather(
            *(
                self.batcher.call(*share_group_offsets_describe_call(self.keys, group, t, p))
                for t, p in partitions
            )
        )
        return {tp: parse_partition_state(r) for tp, r in zip(partitions, replies, strict=True)}

    async def alter(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Start each share-partition again at its offset, with nothing in flight (the
        caller checked that the group has no live members)."""
        await asyncio.gather(
            *(
                self.batcher.call(
                    *share_group_offsets_alter_call(self.keys, group, t, p, o, self.bits)
                )
                for (t, p), o in offsets.items()
            )
        )

    async def delete(self, group: str, partitions: list[tuple[str, int]]) -> int:
        """Forget the share-partitions' state; how many had some."""
        done = await asyncio.gather(
            *(
                self.batcher.call(*share_group_offsets_delete_call(self.keys, group, t, p))
                for t, p in partitions
            )
        )
        return sum(int(d) for d in done)

    async def delete_group(self, group: str) -> None:
        """DeleteGroups of an empty share group: its state on every partition it may have
        some, its membership keys, its name in the share groups set."""
        await self.delete(group, await self.partitions(group))
        gk = self.keys.share_group(group)
        await self.batcher.call("DEL", gk.meta, gk.members, gk.topics)
        await self.batcher.call("SREM", self.keys.share_groups, group_part(group))
