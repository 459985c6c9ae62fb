"""Transactional offset commits (TxnOffsetCommit) and their end (EndTxn's group half).

Kafka keeps a transaction's offset commits aside ("pending transactional offsets", per
producer id) until the transaction ends: its commit makes them the group's committed offsets,
its abort drops them. Here they wait in the group's own slot (``KafkaGroupKeys.txn_offsets``:
"<producer id> <topic> <partition>" -> "<producer epoch> <offset> <leader epoch>
<metadata>"), so the membership check and the write are one script call
(``kafka_group/txn_offset_commit``). ``end_txn_offsets`` is what the transaction coordinator
calls for every group of a transaction at EndTxn (or when it aborts one): read the producer's
pending offsets (``kafka_group/txn_offset_end``), write them into the committed offsets V1
shares, one script call per topic (``kafka_group/txn_offset_write``, the (group, topic)'s
slot), then remove exactly those pending values (``kafka_group/txn_offset_clear``). Each step
can be repeated: a pod killed in the middle leaves the pending offsets for the next call.

While a partition has pending offsets, OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT for it (``fetch_offsets``), so read_committed consumers (they set it)
never start from offsets a transaction may still change. Decisions (docs/transactions.md):
a transaction's offsets of several topics become visible topic by topic (one slot each), not
at once as in Kafka's single __consumer_offsets partition, which only readers without
require_stable can notice; a later plain OffsetCommit of the same partition before the
transaction ends is overwritten by the transaction's offset at commit (Kafka keeps the later
one).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mapping.connection import scripts
from mapping.core import kafka_errors as errors
from mapping.core.codec import to_str
from mapping.core.keys import GroupKeys, KafkaGroupKeys, group_entry, is_valid_name
from mapping.kafka_group.base import GroupsBase

KAFKA_GROUP_TXN_OFFSET_COMMIT = scripts.load("kafka_group/txn_offset_commit")
KAFKA_GROUP_TXN_OFFSET_END = scripts.load("kafka_group/txn_offset_end")
KAFKA_GROUP_TXN_OFFSET_WRITE = scripts.load("kafka_group/txn_offset_write")
KAFKA_GROUP_TXN_OFFSET_CLEAR = scripts.load("kafka_group/txn_offset_clear")

# What a transactional commit stores per partition: (next offset, metadata, leader epoch).
TxnOffset = tuple[int, str | None, int]


@dataclass(frozen=True, slots=True)
class TxnCommitter:
    """Who commits: the transaction's producer and, from TxnOffsetCommit v3, the consumer
    group member it consumed as (empty member id and generation -1: not given)."""

    producer_id: int
    producer_epoch: int
    member_id: str = ""
    generation: int = -1
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PendingOffset:
    """One pending transactional offset, as ``kafka_group/txn_offset_end`` answers it."""

    field: bytes  # "<producer id> <topic> <partition>"
    value: bytes  # "<producer epoch> <offset> <leader epoch> <metadata>"
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


def kafka_group_txn_offset_commit_call(
    keys: KafkaGroupKeys, committer: TxnCommitter, offsets: dict[str, dict[int, TxnOffset]]
) -> tuple:
    """kafka_group/txn_offset_commit.lua: check, then store ``offsets`` as pending."""
    args: list = [
        committer.member_id,
        committer.group_instance_id or "",
        committer.generation,
        committer.producer_id,
        committer.producer_epoch,
    ]
    for topic, partitions in offsets.items():
        for p, (offset, metadata, leader_epoch) in partitions.items():
            args += [topic, p, offset, leader_epoch, metadata or ""]
    return KAFKA_GROUP_TXN_OFFSET_COMMIT.command(
        [*keys.script_keys(), keys.txn_offsets, keys.txn_producers], args
    )


def kafka_group_txn_offset_end_call(
    keys: KafkaGroupKeys, producer_id: int, producer_epoch: int, expiration_ms: int
) -> tuple:
    """kafka_group/txn_offset_end.lua: the producer's pending offsets to complete."""
    return KAFKA_GROUP_TXN_OFFSET_END.command(
        [keys.txn_offsets, keys.txn_producers], [producer_id, producer_epoch, expiration_ms]
    )


def kafka_group_txn_offset_write_call(keys: GroupKeys, pending: list[PendingOffset]) -> tuple:
    """kafka_group/txn_offset_write.lua: ``pending`` (one topic's) become committed."""
    args: list = []
    for entry in pending:
        args += [entry.partition, entry.offset, entry.metadata, entry.leader_epoch]
    return KAFKA_GROUP_TXN_OFFSET_WRITE.command(
        [keys.offsets, keys.offset_metadata, keys.meta], args
    )


def kafka_group_txn_offset_clear_call(keys: KafkaGroupKeys, pending: list[PendingOffset]) -> tuple:
    """kafka_group/txn_offset_clear.lua: remove ``pending`` where unchanged."""
    args: list = []
    for entry in pending:
        args += [entry.field, entry.value]
    return KAFKA_GROUP_TXN_OFFSET_CLEAR.command([keys.txn_offsets], args)


def pending_field_parts(field: bytes | str) -> tuple[int, str, int] | None:
    """(producer id, topic, partition) of a ``txn_offsets`` field; None if malformed."""
    parts = to_str(field).split(" ")
    if len(parts) != 3:
        return None
    producer, topic, partition = parts
    try:
        return int(producer), topic, int(partition)
    except ValueError:
        return None


def _pending(field: bytes, value: bytes) -> PendingOffset | None:
    where = pending_field_parts(field)
    parts = to_str(value).split(" ", 3)
    if where is None or len(parts) != 4:
        return None
    _, topic, partition = where
    _, offset, leader_epoch, metadata = parts
    return PendingOffset(field, value, topic, partition, int(offset), int(leader_epoch), metadata)


class TxnOffsets(GroupsBase):
    async def txn_commit_offsets(
        self, group: str, committer: TxnCommitter, offsets: dict[str, dict[int, TxnOffset]]
    ) -> dict[str, dict[int, int]]:
        """TxnOffsetCommit: ``offsets`` topic -> partition -> (next offset, metadata, leader
        epoch) wait as the producer's pending offsets in ``group`` until its transaction
        ends (``end_txn_offsets``). The answer is an error code per partition."""

        def every(code: int) -> dict[str, dict[int, int]]:
            return {t: dict.fromkeys(ps, code) for t, ps in offsets.items()}

        if not group:  # Kafka: only OffsetCommit/OffsetFetch accept the empty group id
            return every(errors.INVALID_GROUP_ID)
        counts = await self.partition_counts(list(offsets))
        answer: dict[str, dict[int, int]] = {}
        accepted: dict[str, dict[int, TxnOffset]] = {}
        for topic, partitions in offsets.items():
            codes = answer[topic] = {}
            for p, (offset, metadata, leader_epoch) in partitions.items():
                count = counts[topic]
                if count is None or not 0 <= p < count:
                    codes[p] = errors.UNKNOWN_TOPIC_OR_PARTITION
                elif offset < 0:
                    codes[p] = errors.INVALID_COMMIT_OFFSET_SIZE
                elif (
                    metadata is not None
                    and len(metadata.encode()) > self.settings.max_metadata_bytes
                ):
                    codes[p] = errors.OFFSET_METADATA_TOO_LARGE
                else:
                    codes[p] = errors.NONE
                    epoch = max(leader_epoch, -1)
                    accepted.setdefault(topic, {})[p] = (offset, metadata, epoch)
        if not accepted:
            return answer
        call = kafka_group_txn_offset_commit_call(self.keys.kafka_group(group), committer, accepted)
        code = int(await self.call_group_script(call))
        if code != errors.NONE:
            for topic, partitions in accepted.items():
                answer[topic].update(dict.fromkeys(partitions, code))
        return answer

    async def end_txn_offsets(self, group: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn's group half: the producer's pending offsets in ``group`` (of epochs up to
        ``epoch``) become the committed offsets (``commit``) or are dropped. Idempotent: the
        transaction coordinator may call it again (another pod completing the transaction)."""
        gk = self.keys.kafka_group(group)
        expiration_ms = self.settings.transactional_id_expiration_ms
        reply = await self.call_group_script(
            kafka_group_txn_offset_end_call(gk, producer_id, epoch, expiration_ms)
        )
        pending = [
            entry
            for entry in (_pending(reply[i], reply[i + 1]) for i in range(0, len(reply), 2))
            if entry is not None
        ]
        if not pending:
            return
        if commit:
            by_topic: dict[str, list[PendingOffset]] = {}
            for entry in pending:
                if is_valid_name(entry.topic):
                    by_topic.setdefault(entry.topic, []).append(entry)
            calls = []
            for topic, entries in by_topic.items():
                write = kafka_group_txn_offset_write_call(self.keys.group(group, topic), entries)
                calls.append(self.batcher.call(*write))
                calls.append(self.batcher.call("SADD", self.keys.groups, group_entry(group, topic)))
            replies = await asyncio.gather(*calls)
            if self.mirror is not None:  # each write answered its time
                for (topic, entries), at in zip(by_topic.items(), replies[::2], strict=True):
                    written = {e.partition: (e.offset, e.metadata, e.leader_epoch) for e in entries}
                    self.mirror.note_commits(group, topic, written, int(at))
        await self.call_group_script(kafka_group_txn_offset_clear_call(gk, pending))

    async def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """The (topic, partition)s with pending transactional offsets of any producer."""
        fields = await self.batcher.call("HKEYS", self.keys.kafka_group(group).txn_offsets)
        found: set[tuple[str, int]] = set()
        for field in fields:
            parts = pending_field_parts(field)
            if parts is not None:
                found.add((parts[1], parts[2]))
        return found
