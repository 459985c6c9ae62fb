"""What every part of ``KafkaGroups`` shares: settings, the batcher, script calls (and the
scripts more than one part calls)."""

from __future__ import annotations

import asyncio
from typing import Any

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.connection.waits import Channel, Waits
from mapping.core.kafka_group_settings import KafkaGroupSettings  # (imports nothing: settings.py)
from mapping.core.keys import KafkaGroupKeys, Keys, group_part, is_valid_name, parse_group_entry
from mapping.group.groups import kafka_members_live
from mapping.group.offsets_mirror import OffsetsMirror

KAFKA_GROUP_V1_LIVE = scripts.load("kafka_group/v1_live")
KAFKA_GROUP_DESCRIBE = scripts.load("kafka_group/describe")
KAFKA_GROUP_CONSUMER_DESCRIBE = scripts.load("kafka_group/consumer_describe")


def kafka_group_v1_live_call(v1_members: str, v1_session_timeout_ms: int) -> tuple:
    """kafka_group/v1_live.lua on a V1 group's members hash: how many are live."""
    return KAFKA_GROUP_V1_LIVE.command([v1_members], [v1_session_timeout_ms])


def kafka_group_describe_call(keys: KafkaGroupKeys, summary: bool) -> tuple:
    """kafka_group/describe.lua (``summary``: ListGroups' fields only)."""
    return KAFKA_GROUP_DESCRIBE.command(keys.script_keys(), ["1" if summary else "0"])


def kafka_group_consumer_describe_call(keys: KafkaGroupKeys) -> tuple:
    return KAFKA_GROUP_CONSUMER_DESCRIBE.command(keys.script_keys(), [])


def raw(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


class GroupsBase:
    def __init__(
        self,
        batcher: RedisBatcher,
        waits: Waits[str, Channel],
        keys: Keys,
        settings: KafkaGroupSettings | None = None,
        *,
        v1_session_timeout_ms: int,
    ) -> None:
        self.batcher = batcher
        self.waits = waits  # on groups' events channels: JoinGroup and SyncGroup wait there
        self.keys = keys
        self.settings = settings or KafkaGroupSettings()
        # V1 groups' session timeout (``Groups``'): whether a V1 member is live
        self.v1_session_timeout_ms = v1_session_timeout_ms
        # KIP-848: each group's subscribed topics as this pod last saw them
        self.consumer_topics: dict[str, set[str]] = {}
        # __consumer_offsets' writer (mapping/group/offsets_mirror.py): commits and deletions of
        # offsets are mirrored there; None: not mirrored
        self.mirror: OffsetsMirror | None = None

    async def call_group_script(self, command: tuple) -> Any:
        """The reply of a ``kafka_group/*`` script call on a group's keys (the one way they
        are sent: tests hook it)."""
        return await self.batcher.call(*command)

    async def topics_of(self, group: str) -> list[str]:
        """The topics ``group`` has a V1 group or committed offsets on (the groups set holds
        "<group part> <topic>" entries; a part is ``[A-Za-z0-9._%-]``: no glob escaping)."""
        topics: set[str] = set()
        cursor: int | bytes = 0
        pattern = f"{group_part(group)} *"
        while True:
            cursor, found = await self.batcher.call(
                "SSCAN", self.keys.groups, cursor, "MATCH", pattern, "COUNT", 1000
            )
            for entry in found:
                pair = parse_group_entry(entry)
                if pair is not None:
                    topics.add(pair[1])
            if int(cursor) == 0:
                return sorted(topics)

    async def v1_members_live(self, group: str) -> bool:
        """Whether any V1 member of ``group`` (on any topic) is live now."""
        topics = await self.topics_of(group)
        counts = await asyncio.gather(
            *(
                self.batcher.call(
                    *kafka_group_v1_live_call(
                        self.keys.group(group, topic).members, self.v1_session_timeout_ms
                    )
                )
                for topic in topics
            )
        )
        return any(int(count) > 0 for count in counts)

    async def partition_counts(self, topics: list[str]) -> dict[str, int | None]:
        """Each topic's partition count; None for a topic that does not exist."""
        counts = await asyncio.gather(
            *(
                self.batcher.call("HGET", self.keys.topic(t), "partitions")
                if is_valid_name(t)
                else asyncio.sleep(0, None)
                for t in topics
            )
        )
        return {t: int(c) if c is not None else None for t, c in zip(topics, counts, strict=True)}

    async def kafka_state_exists(self, group: str) -> bool:
        """Whether ``group`` has state under either Kafka protocol (classic or KIP-848)."""
        gk = self.keys.kafka_group(group)
        return int(await self.batcher.call("EXISTS", gk.meta, gk.consumer_meta)) > 0

    async def kafka_members_live(self, group: str) -> bool:
        """Whether ``group`` has live Kafka members (either protocol): V1 JOIN's check."""
        return await kafka_members_live(self.batcher, self.keys, group)
