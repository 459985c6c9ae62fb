"""ListGroups, DescribeGroups and DeleteGroups data.

Groups Kafka clients see: every Kafka group (the ``kgroups`` set), and every group name that
only has committed offsets or V1 members (the groups set), shown as ``Empty`` with no
protocol type, so ``kafka-consumer-groups --list`` shows what ``adapter inspect`` shows.
Names come back from Redis through ``mapping.core.keys.group_name``: a group id of any characters
is listed as the client wrote it. The empty group id (offsets committed under "") is one
too, as in Kafka, which accepts it for DescribeGroups and DeleteGroups.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from mapping.core import kafka_errors as errors
from mapping.core.codec import to_str
from mapping.core.keys import group_name, parse_group_entry
from mapping.group.deletion import NON_EMPTY, delete_groups
from mapping.kafka_group.base import (
    GroupsBase,
    kafka_group_consumer_describe_call,
    kafka_group_describe_call,
    raw,
)

DEAD = "Dead"  # a group with no state at all (Kafka's name)
EMPTY = "Empty"


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"  # ListGroups v5: "classic" or "consumer" (KIP-848)


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes  # for the group's chosen protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: int
    state: str  # DEAD for an unknown group (DescribeGroups v6+ answers GROUP_ID_NOT_FOUND)
    protocol_type: str = ""
    protocol: str = ""
    generation: int = -1
    members: list[MemberDescription] = field(default_factory=list)


class GroupAdmin(GroupsBase):
    async def _listing(self, group: str) -> GroupListing:
        """The group under the classic protocol, else under KIP-848 (state DEAD: neither)."""
        gk = self.keys.kafka_group(group)
        classic, consumer = await asyncio.gather(
            self.call_group_script(kafka_group_describe_call(gk, True)),
            self.call_group_script(kafka_group_consumer_describe_call(gk)),
        )
        if int(classic[0]) == 0 and int(consumer[0]) == 1:
            return GroupListing(group, "consumer", to_str(consumer[1]), "consumer")
        return GroupListing(group, to_str(classic[2]), to_str(classic[1]))

    async def list_groups(
        self,
        states: set[str] | None = None,
        types: set[str] | None = None,
        coordinated: Callable[[str], bool] | None = None,
    ) -> list[GroupListing]:
        """Every group, optionally only those in ``states`` / of protocol ``types``
        (ListGroups v4 and v5 filters; empty or None: no filter) and those ``coordinated``
        says yes to (a pod's ListGroups: the groups it is the coordinator of)."""
        kafka_names = {
            group_name(n) for n in await self.batcher.call("SMEMBERS", self.keys.kafka_groups)
        }
        pairs = await self.batcher.call("SMEMBERS", self.keys.groups)
        offset_only = {pair[0] for pair in map(parse_group_entry, pairs) if pair is not None}
        if coordinated is not None:
            kafka_names = {g for g in kafka_names if coordinated(g)}
            offset_only = {g for g in offset_only if coordinated(g)}
        found = await asyncio.gather(*(self._listing(g) for g in sorted(kafka_names)))
        listings = {g.group_id: g for g in found if g.state != DEAD}
        for group in offset_only - listings.keys():
            listings[group] = GroupListing(group, "", EMPTY)
        return [
            g
            for _, g in sorted(listings.items())
            if (not states or g.state in states) and (not types or g.protocol_type in types)
        ]

    async def describe_group(self, group: str) -> GroupDescription:
        reply = await self.call_group_script(
            kafka_group_describe_call(self.keys.kafka_group(group), False)
        )
        if int(reply[0]) == 0:
            state = EMPTY if await self.topics_of(group) else DEAD
            return GroupDescription(group, errors.NONE, state)
        members = [
            MemberDescription(
                to_str(reply[i]),
                to_str(reply[i + 1]) or None,
                to_str(reply[i + 2]),
                to_str(reply[i + 3]),
                raw(reply[i + 4]),
                raw(reply[i + 5]),
            )
            for i in range(5, len(reply), 6)
        ]
        return GroupDescription(
            group,
            errors.NONE,
            to_str(reply[1]),
            to_str(reply[2]),
            to_str(reply[3]),
            int(reply[4]),
            sorted(members, key=lambda m: m.member_id),
        )

    async def describe_groups(self, groups: list[str]) -> list[GroupDescription]:
        return list(await asyncio.gather(*(self.describe_group(g) for g in groups)))

    async def delete_group(self, group: str) -> int:
        """DeleteGroups for one group: ``mapping.admin.delete_groups``, the one path of
        every group deletion (V1's ``adapter group delete`` too): its Kafka state, its V1
        groups' state and every committed offset go; NON_EMPTY_GROUP while members of
        either protocol are live (checked first, so nothing is half deleted)."""
        topics = await self.topics_of(group)
        exists = await self.kafka_state_exists(group)
        if not topics and not exists:
            return errors.GROUP_ID_NOT_FOUND
        if await self.v1_members_live(group) or await self.kafka_members_live(group):
            return errors.NON_EMPTY_GROUP
        results = await delete_groups(
            self,
            group,
            None,
            force=False,
            session_timeout_ms=self.v1_session_timeout_ms,
            mirror=self.mirror,
        )
        if any(r.outcome == NON_EMPTY for r in results):
            return errors.NON_EMPTY_GROUP
        return errors.NONE

    async def delete_groups(self, groups: list[str]) -> dict[str, int]:
        codes = await asyncio.gather(*(self.delete_group(g) for g in groups))
        return dict(zip(groups, codes, strict=True))
