"""OffsetCommit, OffsetFetch, OffsetDelete on the committed offsets V1 uses.

One store for both protocols: ``Keys.group(group, topic).offsets`` (partition -> the next
offset to read), so V1 ``OFFSET`` answers what a Kafka consumer committed and a Kafka
consumer resumes from a V1 ``COMMIT``. Kafka's commit metadata goes beside it in
``offset_metadata`` (same hash tag, so one script call per topic writes both), and the
(group, topic) pair joins the groups set, so ``inspect``, lag metrics and retention's
slowest-group rule see Kafka groups as they see V1 ones.

The membership check of a commit runs first, on the Kafka group's keys (another slot, so it
cannot be the same script on Redis Cluster): a rebalance that starts between the check and
the write lets through a commit Kafka would have taken a moment earlier with the same
generation, which Kafka allows (commits stay valid during PreparingRebalance).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping import kafka_errors as errors
from mapping import scripts
from mapping.kafka_groups.base import GroupsBase, text
from mapping.kafka_groups.consumer_protocol import subscribed_topics
from mapping.keys import is_valid_name

NO_OFFSET = -1  # Kafka's "nothing committed": the consumer applies auto.offset.reset


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int  # the next offset to read; NO_OFFSET when nothing is committed
    metadata: str | None = None
    error: int = errors.NONE


class GroupOffsets(GroupsBase):
    async def commit_offsets(
        self,
        group: str,
        member_id: str,
        generation: int,
        offsets: dict[str, dict[int, tuple[int, str | None]]],
        group_instance_id: str | None = None,
    ) -> dict[str, dict[int, int]]:
        """OffsetCommit: ``offsets`` topic -> partition -> (next offset, metadata); the
        answer is an error code per partition. Generation -1 with an empty member id is a
        commit from outside group management, allowed while the group has no members."""

        def every(code: int) -> dict[str, dict[int, int]]:
            return {t: dict.fromkeys(ps, code) for t, ps in offsets.items()}

        if not is_valid_name(group):
            return every(errors.INVALID_GROUP_ID)
        args = [member_id, group_instance_id or "", generation]
        check, counts = await asyncio.gather(
            self.call_group_script("kgroup_commit_check", group, args),
            self.partition_counts(list(offsets)),
        )
        if int(check[0]) != errors.NONE:
            return every(int(check[0]))
        script = scripts.load("kgroup_offset_commit")
        answer: dict[str, dict[int, int]] = {}
        writes = []
        for topic, partitions in offsets.items():
            codes = answer[topic] = {}
            values: list = []
            for p, (offset, metadata) in partitions.items():
                count = counts[topic]
                if count is None or not 0 <= p < count:
                    codes[p] = errors.UNKNOWN_TOPIC_OR_PARTITION
                elif offset < 0:
                    codes[p] = errors.INVALID_COMMIT_OFFSET_SIZE  # V1 offsets are positions
                elif (
                    metadata is not None
                    and len(metadata.encode()) > self.settings.max_metadata_bytes
                ):
                    codes[p] = errors.OFFSET_METADATA_TOO_LARGE
                else:
                    codes[p] = errors.NONE
                    values += [p, offset, metadata or ""]
            if values:
                gk = self.keys.group(group, topic)
                writes.append(
                    self.batcher.call(
                        *script.command([gk.offsets, gk.offset_metadata, gk.meta], values)
                    )
                )
                writes.append(self.batcher.call("SADD", self.keys.groups, f"{group} {topic}"))
        await asyncio.gather(*writes)
        return answer

    async def fetch_offsets(
        self, group: str, topics: dict[str, list[int]] | None = None
    ) -> dict[str, dict[int, CommittedOffset]]:
        """OffsetFetch: the committed offset of each named partition (NO_OFFSET when none);
        ``topics`` None: every partition committed on every topic of the group."""
        if not is_valid_name(group):
            error = CommittedOffset(NO_OFFSET, None, errors.INVALID_GROUP_ID)
            return {t: dict.fromkeys(ps, error) for t, ps in (topics or {}).items()}
        if topics is None:
            names = await self.topics_of(group)
            stored = await asyncio.gather(*(self._stored(group, t) for t in names))
            return {
                t: {p: CommittedOffset(o, meta.get(p) or None) for p, o in sorted(offsets.items())}
                for t, (offsets, meta) in zip(names, stored, strict=True)
                if offsets
            }
        answer: dict[str, dict[int, CommittedOffset]] = {}
        for topic, partitions in topics.items():
            if not is_valid_name(topic) or not partitions:
                answer[topic] = {p: CommittedOffset(NO_OFFSET) for p in partitions}
                continue
            gk = self.keys.group(group, topic)
            offsets, meta = await asyncio.gather(
                self.batcher.call("HMGET", gk.offsets, *partitions),
                self.batcher.call("HMGET", gk.offset_metadata, *partitions),
            )
            answer[topic] = {
                p: CommittedOffset(
                    int(o) if o is not None else NO_OFFSET, text(m) if m is not None else None
                )
                for p, o, m in zip(partitions, offsets, meta, strict=True)
            }
        return answer

    async def _stored(self, group: str, topic: str) -> tuple[dict[int, int], dict[int, str]]:
        gk = self.keys.group(group, topic)
        offsets, meta = await asyncio.gather(
            self.batcher.call("HGETALL", gk.offsets),
            self.batcher.call("HGETALL", gk.offset_metadata),
        )
        return (
            {int(p): int(o) for p, o in offsets.items()},
            {int(p): text(m) for p, m in meta.items()},
        )

    async def subscribed(self, group: str) -> set[str]:
        """Topics the group's live members consume: Kafka consumers' subscriptions, and the
        topics of live V1 members."""
        reply = await self.call_group_script("kgroup_describe", group, ["0"])
        topics: set[str] = set()
        if int(reply[0]) == 1 and text(reply[2]) == "consumer":
            for i in range(5, len(reply), 6):
                topics |= subscribed_topics(bytes(reply[i + 4]))
        script = scripts.load("kgroup_v1_live")
        for topic in await self.topics_of(group):
            members = self.keys.group(group, topic).members
            command = script.command([members], [self.settings.v1_session_timeout_ms])
            if int(await self.batcher.call(*command)) > 0:
                topics.add(topic)
        return topics

    async def delete_offsets(
        self, group: str, topics: dict[str, list[int]]
    ) -> tuple[int, dict[str, dict[int, int]]]:
        """OffsetDelete: (group error, topic -> partition -> error). A topic the group's
        live members consume keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC)."""
        if not is_valid_name(group):
            return errors.INVALID_GROUP_ID, {}
        known = await self.topics_of(group)
        exists = await self.kafka_state_exists(group)
        if not known and not exists:
            return errors.GROUP_ID_NOT_FOUND, {}
        subscribed = await self.subscribed(group)
        script = scripts.load("kgroup_offset_delete")
        answer: dict[str, dict[int, int]] = {}
        for topic, partitions in topics.items():
            if topic in subscribed:
                answer[topic] = dict.fromkeys(partitions, errors.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            answer[topic] = dict.fromkeys(partitions, errors.NONE)
            if is_valid_name(topic) and partitions:
                gk = self.keys.group(group, topic)
                await self.batcher.call(
                    *script.command([gk.offsets, gk.offset_metadata], list(partitions))
                )
        return errors.NONE, answer
