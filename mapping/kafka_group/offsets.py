"""OffsetCommit, OffsetFetch, OffsetDelete on the committed offsets V1 uses.

One store for both protocols: ``Keys.group(group, topic).offsets`` (partition -> the next
offset to read), so V1 ``OFFSET`` answers what a Kafka consumer committed and a Kafka
consumer resumes from a V1 ``COMMIT``. Kafka's commit metadata and committed leader epoch go
beside it in ``offset_metadata`` (fields ``<p>`` and ``<p>.leader_epoch``; same hash tag, so
one script call per topic writes all three at once); a V1 COMMIT or a Spark commit, which
carry neither, remove the partition's (OffsetFetch answers "" and -1). The (group, topic)
pair joins the groups set, so ``inspect``, lag metrics and retention's slowest-group rule
see Kafka groups as they see V1 ones.

Any non-empty group id is a Kafka group (``Keys`` maps it to its keys, ``group_part``); the
empty id is accepted where Kafka accepts it, OffsetCommit and OffsetFetch, and refused by
OffsetDelete with INVALID_GROUP_ID.

A commit is checked, then written, atomically in effect on single Redis and Cluster alike
(docs/kafka-groups-design.md, "Atomic commits"): the check (``kafka_group/commit_check``, on the
Kafka group's slot) answers a fence token, and the write (``kafka_group/offset_commit``, on the
(group, topic)'s slot: another one, so not the same script on Redis Cluster) refuses every
partition a newer token already read (``fetch_offsets``) or wrote (a partition's largest
token is field ``<p>.fence`` of ``offset_metadata``). A check that went stale while its pod
was paused thus never puts old offsets over those of the group's next generation; such
partitions are checked again and get Kafka's answer of now (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH), or are written with the new
token when the member is still entitled to commit. The common path is unchanged: one check
(with the partition counts), then one write per topic.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping.connection import scripts
from mapping.core import kafka_errors as errors
from mapping.core.codec import to_str
from mapping.core.keys import GroupKeys, KafkaGroupKeys, epoch_field, group_entry, is_valid_name
from mapping.kafka_group.base import (
    GroupsBase,
    kafka_group_describe_call,
    kafka_group_v1_live_call,
)
from mapping.kafka_group.consumer_protocol import subscribed_topics
from mapping.kafka_group.txn_offsets import pending_field_parts

NO_OFFSET = -1  # Kafka's "nothing committed": the consumer applies auto.offset.reset
NO_EPOCH = -1  # Kafka's "no committed leader epoch"
# Times a commit is written when fenced partitions are checked again and still allowed: the
# group's fence moves only on rebalances, so a second try normally settles it.
COMMIT_ATTEMPTS = 3
# What a commit stores per partition: (next offset, metadata) or (next offset, metadata,
# committed leader epoch); without an epoch, none (NO_EPOCH).
OffsetToCommit = tuple[int, str | None] | tuple[int, str | None, int]
# What a commit writes per partition: (next offset, metadata or "", leader epoch or NO_EPOCH).
OffsetWrite = tuple[int, str, int]

KAFKA_GROUP_COMMIT_CHECK = scripts.load("kafka_group/commit_check")
KAFKA_GROUP_FENCE = scripts.load("kafka_group/fence")
KAFKA_GROUP_OFFSET_COMMIT = scripts.load("kafka_group/offset_commit")
KAFKA_GROUP_OFFSET_FETCH = scripts.load("kafka_group/offset_fetch")
KAFKA_GROUP_OFFSET_DELETE = scripts.load("kafka_group/offset_delete")


def kafka_group_commit_check_call(
    keys: KafkaGroupKeys, member_id: str, instance_id: str | None, generation: int
) -> tuple:
    """kafka_group/commit_check.lua: may this member commit now (and with which token)?"""
    return KAFKA_GROUP_COMMIT_CHECK.command(
        keys.script_keys(), [member_id, instance_id or "", generation]
    )


def kafka_group_fence_call(keys: KafkaGroupKeys) -> tuple:
    """kafka_group/fence.lua: the group's commit fence now (an OffsetFetch's token)."""
    return KAFKA_GROUP_FENCE.command(keys.script_keys(), [])


def kafka_group_offset_commit_call(
    keys: GroupKeys, token: str, writes: dict[int, OffsetWrite]
) -> tuple:
    """kafka_group/offset_commit.lua: ``writes`` (partition -> what it stores) with the
    fence ``token``; a partition a newer token used is not written."""
    args: list = [token]
    for partition, (offset, metadata, epoch) in writes.items():
        args += [partition, offset, metadata, epoch]
    return KAFKA_GROUP_OFFSET_COMMIT.command([keys.offsets, keys.offset_metadata, keys.meta], args)


def kafka_group_offset_fetch_call(keys: GroupKeys, token: str, partitions: list[int]) -> tuple:
    """kafka_group/offset_fetch.lua: these partitions' offsets, their fences raised to
    ``token``."""
    return KAFKA_GROUP_OFFSET_FETCH.command(
        [keys.offsets, keys.offset_metadata], [token, *partitions]
    )


def kafka_group_offset_delete_call(keys: GroupKeys, partitions: list[int]) -> tuple:
    """kafka_group/offset_delete.lua: these partitions' offsets go (none: all of them)."""
    return KAFKA_GROUP_OFFSET_DELETE.command([keys.offsets, keys.offset_metadata], list(partitions))


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int  # the next offset to read; NO_OFFSET when nothing is committed
    metadata: str | None = None
    error: int = errors.NONE
    leader_epoch: int = NO_EPOCH  # the committed leader epoch; NO_EPOCH when none


def _split(value: OffsetToCommit) -> tuple[int, str | None, int]:
    if len(value) == 3:
        return value
    offset, metadata = value
    return offset, metadata, NO_EPOCH


class GroupOffsets(GroupsBase):
    async def commit_offsets(
        self,
        group: str,
        member_id: str,
        generation: int,
        offsets: dict[str, dict[int, OffsetToCommit]],
        group_instance_id: str | None = None,
    ) -> dict[str, dict[int, int]]:
        """OffsetCommit: ``offsets`` topic -> partition -> (next offset, metadata[, leader
        epoch]); the answer is an error code per partition. Generation -1 with an empty
        member id is a commit from outside group management, allowed while the group has no
        members (the empty group id too, as Kafka allows)."""

        def every(code: int) -> dict[str, dict[int, int]]:
            return {t: dict.fromkeys(ps, code) for t, ps in offsets.items()}

        check = kafka_group_commit_check_call(
            self.keys.kafka_group(group), member_id, group_instance_id, generation
        )
        (code, token), counts = await asyncio.gather(
            self._check_commit(check), self.partition_counts(list(offsets))
        )
        if code != errors.NONE:
            return every(code)
        answer: dict[str, dict[int, int]] = {}
        pending: dict[str, dict[int, OffsetWrite]] = {}
        for topic, partitions in offsets.items():
            codes = answer[topic] = {}
            for p, value in partitions.items():
                offset, metadata, epoch = _split(value)
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
                    write = (offset, metadata or "", max(epoch, NO_EPOCH))
                    pending.setdefault(topic, {})[p] = write
        for _ in range(COMMIT_ATTEMPTS):
            pending = await self._write_offsets(group, token, pending)
            if not pending:
                return answer
            # fenced: the group moved on since the check; Kafka's answer of now decides
            code, token = await self._check_commit(check)
            if code != errors.NONE:
                break
        else:
            code = errors.REBALANCE_IN_PROGRESS  # the fence kept moving: the client retries
        for topic, refused in pending.items():
            answer[topic].update(dict.fromkeys(refused, code))
        return answer

    async def _check_commit(self, check: tuple) -> tuple[int, str]:
        """(error code, fence token) of kafka_group/commit_check.lua's ``check``."""
        reply = await self.call_group_script(check)
        return int(reply[0]), to_str(reply[1]) if len(reply) > 1 else ""

    async def _write_offsets(
        self, group: str, token: str, pending: dict[str, dict[int, OffsetWrite]]
    ) -> dict[str, dict[int, OffsetWrite]]:
        """Write ``pending`` (topic -> partition -> what it stores) with ``token``, one
        script call per topic; answers the partitions refused (fenced), in the same shape."""
        topics = list(pending)
        calls = []
        for topic in topics:
            call = kafka_group_offset_commit_call(
                self.keys.group(group, topic), token, pending[topic]
            )
            calls.append(self.batcher.call(*call))
            calls.append(self.batcher.call("SADD", self.keys.groups, group_entry(group, topic)))
        replies = await asyncio.gather(*calls)
        refused: dict[str, dict[int, OffsetWrite]] = {}
        for topic, reply in zip(topics, replies[::2], strict=True):
            at, *not_written = reply  # the commit's time, then the partitions not written
            for p in map(int, not_written):
                refused.setdefault(topic, {})[p] = pending[topic][p]
            if self.mirror is not None:
                kept = refused.get(topic, {})
                written = {p: w for p, w in pending[topic].items() if p not in kept}
                self.mirror.note_commits(group, topic, written, int(at))
        return refused

    async def fetch_offsets(
        self,
        group: str,
        topics: dict[str, list[int]] | None = None,
        require_stable: bool = False,
    ) -> dict[str, dict[int, CommittedOffset]]:
        """OffsetFetch: the committed offset of each named partition (NO_OFFSET when none);
        ``topics`` None: every partition committed on every topic of the group.
        ``require_stable`` (OffsetFetch v7+): a partition with pending transactional offsets
        (TxnOffsetCommit, mapping/kafka_group/txn_offsets.py) answers UNSTABLE_OFFSET_COMMIT
        instead, as Kafka does; without it, the committed offset."""
        if not require_stable:
            return await self._fetch_committed(group, topics)
        found, pending = await asyncio.gather(
            self._fetch_committed(group, topics),
            self.batcher.call("HKEYS", self.keys.kafka_group(group).txn_offsets),
        )
        unstable = CommittedOffset(NO_OFFSET, None, errors.UNSTABLE_OFFSET_COMMIT)
        for field in pending:
            parts = pending_field_parts(field)
            if parts is not None and parts[2] in found.get(parts[1], {}):
                found[parts[1]][parts[2]] = unstable
        return found

    async def _fetch_committed(
        self, group: str, topics: dict[str, list[int]] | None
    ) -> dict[str, dict[int, CommittedOffset]]:
        if topics is None:
            names = await self.topics_of(group)
            stored = await asyncio.gather(*(self._stored(group, t) for t in names))
            return {t: offsets for t, offsets in zip(names, stored, strict=True) if offsets}
        answer = {t: {p: CommittedOffset(NO_OFFSET) for p in ps} for t, ps in topics.items()}
        asked = [t for t, ps in topics.items() if is_valid_name(t) and ps]
        if not asked:
            return answer
        # the fetcher may be a member of a new generation about to start from these
        # offsets: their fences go up to the group's token (see kafka_group/offset_fetch.lua)
        token = to_str(
            await self.call_group_script(kafka_group_fence_call(self.keys.kafka_group(group)))
        )

        async def fetch(topic: str) -> list:
            call = kafka_group_offset_fetch_call(
                self.keys.group(group, topic), token, topics[topic]
            )
            return await self.batcher.call(*call)

        replies = await asyncio.gather(*(fetch(t) for t in asked))
        for topic, (offsets, details, epochs) in zip(asked, replies, strict=True):
            answer[topic] = {
                p: _committed(o, m, e)
                for p, o, m, e in zip(topics[topic], offsets, details, epochs, strict=True)
            }
        return answer

    async def _stored(self, group: str, topic: str) -> dict[int, CommittedOffset]:
        gk = self.keys.group(group, topic)
        offsets, details = await asyncio.gather(
            self.batcher.call("HGETALL", gk.offsets),
            self.batcher.call("HGETALL", gk.offset_metadata),
        )
        found = {to_str(f): v for f, v in details.items()}
        return {
            int(p): _committed(o, found.get(to_str(p)), found.get(epoch_field(to_str(p))))
            for p, o in sorted(offsets.items(), key=lambda item: int(item[0]))
        }

    async def _forget_pending(self, group: str, topic: str, partitions: list[int]) -> None:
        """OffsetDelete removes the partitions' pending transactional offsets too (Kafka's
        tombstone removes both)."""
        key = self.keys.kafka_group(group).txn_offsets
        doomed = [
            field
            for field in await self.batcher.call("HKEYS", key)
            if (parts := pending_field_parts(field)) is not None
            and parts[1] == topic
            and parts[2] in partitions
        ]
        if doomed:
            await self.batcher.call("HDEL", key, *doomed)

    async def subscribed(self, group: str) -> set[str]:
        """Topics the group's live members consume: Kafka consumers' subscriptions, and the
        topics of live V1 members."""
        reply = await self.call_group_script(
            kafka_group_describe_call(self.keys.kafka_group(group), False)
        )
        topics: set[str] = set()
        if int(reply[0]) == 1 and to_str(reply[2]) == "consumer":
            for i in range(5, len(reply), 6):
                topics |= subscribed_topics(bytes(reply[i + 4]))
        for topic in await self.topics_of(group):
            members = self.keys.group(group, topic).members
            command = kafka_group_v1_live_call(members, self.v1_session_timeout_ms)
            if int(await self.batcher.call(*command)) > 0:
                topics.add(topic)
        return topics

    async def delete_offsets(
        self, group: str, topics: dict[str, list[int]]
    ) -> tuple[int, dict[str, dict[int, int]]]:
        """OffsetDelete: (group error, topic -> partition -> error). A topic the group's
        live members consume keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC)."""
        if not group:  # Kafka refuses the empty id here (it accepts it for commits)
            return errors.INVALID_GROUP_ID, {}
        known = await self.topics_of(group)
        exists = await self.kafka_state_exists(group)
        if not known and not exists:
            return errors.GROUP_ID_NOT_FOUND, {}
        subscribed = await self.subscribed(group)
        answer: dict[str, dict[int, int]] = {}
        for topic, partitions in topics.items():
            if topic in subscribed:
                answer[topic] = dict.fromkeys(partitions, errors.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            answer[topic] = dict.fromkeys(partitions, errors.NONE)
            if is_valid_name(topic) and partitions:
                call = kafka_group_offset_delete_call(
                    self.keys.group(group, topic), list(partitions)
                )
                # the deletion's time, then the partitions that had an offset
                at, *deleted = await self.batcher.call(*call)
                if self.mirror is not None:
                    self.mirror.note_deleted(group, topic, [int(p) for p in deleted], int(at))
                await self._forget_pending(group, topic, list(partitions))
        return errors.NONE, answer


def _committed(
    offset: bytes | None, metadata: bytes | None, epoch: bytes | None
) -> CommittedOffset:
    """One partition's stored commit (Redis replies; None: absent)."""
    return CommittedOffset(
        int(offset) if offset is not None else NO_OFFSET,
        to_str(metadata) if metadata is not None else None,
        errors.NONE,
        int(epoch) if epoch is not None else NO_EPOCH,
    )
