"""The Redis side of the Kafka front door: batch appends with idempotence, fetch reads,
offsets by time, producer ids.

A Kafka record is one stream entry, like a V1 record: mapping/core/records.py defines its fields,
encodes a batch's records for kafka/produce.lua and decodes the entries a fetch reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from mapping.connection import scripts
from mapping.connection.append_module import CLOCK, PRODUCE_MANY_COMMAND, produce_command
from mapping.connection.batcher import Pending, mark_retrieved
from mapping.connection.raw_replies import RawReply
from mapping.core import codec
from mapping.core.errors import Unavailable, from_script_error
from mapping.core.kafka_errors import UNKNOWN_PRODUCER_ID
from mapping.core.keys import Keys
from mapping.core.records import (
    ProducedRecord,
    RawRecords,
    StoredRecord,
    append_args,
    append_resp,
    entry_record,
    raw_batch_args,
    raw_batch_resp,
    sent_batch,
)
from mapping.partition.partition_scripts import (
    PartitionHead,
    compaction_keys,
    last_stable_offset,
    partition_status_call,
)
from mapping.partition.partitions import Partitions
from mapping.partition.sequence_fence import SequenceFence
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_rules import rules_of


@dataclass(frozen=True, slots=True)
class AppendResult:
    status: int  # 0 appended, 1 a retried batch (original offsets), 45/47 Kafka errors
    high_watermark: int
    isr_size: int
    base_offset: int
    last_offset: int
    append_time: int = -1  # the records' append time (ms; -1: not appended now, a retry)
    log_start: int = -1  # one past what retention or DeleteRecords removed (-1: nothing was)


def _append_result(reply: list[Any]) -> AppendResult:
    return AppendResult(*(int(v) for v in reply[:7]))


def _own_reply(index: int, reply: list[Any]) -> list[Any]:
    """A batch's reply within PRODUCEMANY's: its PRODUCE reply, or its error raised as a call's
    error reply is (mapping/connection/batcher.py)."""
    mine = reply[index]
    if isinstance(mine, Exception):
        raise from_script_error(str(mine)) or mine
    return mine


def _whole_reply(reply: list[Any]) -> list[Any]:
    return reply


def kafka_produce_many_call(head: PartitionHead, batches: list[bytes]) -> tuple:
    """STREAMADAPTER.PRODUCEMANY appending ``batches`` (records.sent_batch) in order: what
    kafka/produce.lua does for each, in one call."""
    k = head.keys
    return (
        PRODUCE_MANY_COMMAND, k.log, k.state, k.hw_channel, k.appended_channel, k.producers,
        k.producer_times, k.txn_open, CLOCK, head.sequence_bits, head.replication_factor,
        head.replica_lag_max_ms, *batches,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class FetchRead:
    high_watermark: int  # V1's (inclusive; -1: empty)
    log_start: int  # offsets below it were removed (-1: nothing ever was)
    # XRANGE entries at or after the position (may pass the hw): hiredis' lists, or the
    # reply's RESP bytes where the reader asked for them (start_read's ``raw``)
    entries: list[Any] | RawReply
    page_full: bool  # the XRANGE returned its COUNT: more may follow
    stable_end: int = -1  # the last stable offset while a transaction is open (-1: none open)
    next_change_ms: int = -1  # ms until time alone moves the hw (an ISR member lags; -1: never)

    @property
    def stable_bound(self) -> int:
        """The last offset read_committed may read (V1's, inclusive): below the LSO."""
        return last_stable_offset(self.high_watermark, self.stable_end) - 1


# Kafka's producer.id.expiration.ms
PRODUCER_ID_EXPIRATION_MS = 86_400_000
# Small batches of one partition queued together go to Redis as one STREAMADAPTER.PRODUCEMANY
# (a call's own work costs Redis more than a few records'): batches as sent of this many
# records at most, this many batches a call (bounding the time one call holds Redis).
COMBINED_BATCH_RECORDS = 32
MOST_COMBINED_BATCHES = 128

KAFKA_PRODUCE = scripts.load("kafka/produce")
KAFKA_PRODUCER_ID = scripts.load("kafka/producer_id")
PARTITION_DELETE_RECORDS = scripts.load("partition/delete_records")


def kafka_produce_call(
    head: PartitionHead,
    records: list[ProducedRecord],
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    create_time: bool = True,
    compaction: Sequence[str] = (),
    transactional: bool = False,
    packed: bool = False,
    lost_gap: bool = False,
    append_module: bool = False,
    raw: RawRecords | None = None,
    produce_module: bool = False,
) -> tuple:
    """kafka/produce.lua appending one RecordBatch (producer id -1: not idempotent);
    ``create_time`` False (a LogAppendTime topic): the records keep no timestamp of their
    own, so every reader sees their append time; ``compaction``: the partition's compaction
    keys on a compacted topic (compaction_keys); ``transactional``: a transactional batch
    (appended only within the producer's registered transaction,
    mapping/partition/partition_txns.py);
    ``packed``: the records' arguments already in RESP (mapping/core/resp.py), for the batcher;
    ``lost_gap``: the pod failed this batch and none before it of its producer, so a gap
    before it is records a failover took back (appended after it, see kafka/produce.lua);
    ``append_module``: Redis has the streamadapter module (mapping/connection/append_module.c),
    whose one command writes the records; ``raw``: the batch's plain records as sent,
    ``records`` then empty (the module appends them: ``append_module`` only);
    ``produce_module``: the module's STREAMADAPTER.PRODUCE does the whole call, the same
    keys and arguments (``append_module`` only; not for a transactional batch or a
    compacted topic, which the script appends)."""
    k = head.keys
    batch: list[Any] = [
        producer_id,
        producer_epoch,
        base_sequence,
        raw.count if raw is not None else len(records),
        producer_id_expiration_ms,
        int(transactional),
        int(lost_gap),
        int(append_module),
    ]
    short = not transactional
    if raw is not None:
        batch.append(raw_batch_resp(raw)) if packed else batch.extend(raw_batch_args(raw))
    elif packed:
        batch.append(append_resp(records, create_time, short))
    else:
        batch += append_args(records, create_time, short)
    keys = (k.producers, k.producer_times, k.txn_open, *compaction)
    if produce_module and append_module and not (transactional or compaction):
        return produce_command(head.command(KAFKA_PRODUCE, keys, batch))
    return head.command(KAFKA_PRODUCE, keys, batch)


def kafka_producer_id_call(keys: Keys) -> tuple:
    """kafka/producer_id.lua: a new producer id, never one handed out before."""
    return KAFKA_PRODUCER_ID.command([keys.kafka_producer_ids], [])


def partition_delete_records_call(head: PartitionHead, cut: int) -> tuple:
    """partition/delete_records.lua: the records below ``cut`` go (-1: below the hw)."""
    return head.command(PARTITION_DELETE_RECORDS, head.replicas(), [cut])


def kafka_log_start(first: list[Any], log_start: Any, end: int, bits: int) -> int:
    """Kafka's log start offset of a partition: its first entry (``first``: XRANGE's reply,
    COUNT 1) when it has one, else the state hash's ``log_start`` (one past what retention
    or DeleteRecords removed), else ``end`` (Kafka's high watermark); never above ``end``."""
    if first:
        start = codec.entry_offset(first[0][0], bits)
    elif log_start is not None:
        start = int(log_start)
    else:
        start = end
    return min(start, end)


def answered_log_start(stored: int) -> int:
    """The log start a Fetch or Produce answer carries for the state hash's ``log_start``
    (-1: nothing was ever removed): a log that lost nothing starts at 0, since positions
    below its first record read from there."""
    return max(stored, 0)


def last_entry_id(entries: list[Any] | RawReply) -> bytes:
    """The id of the last of XRANGE ``entries`` (not empty), whichever form they came in."""
    if not isinstance(entries, RawReply):
        return entries[-1][0]
    data = entries.data
    at = data.index(b"\r\n", entries.last) + 2  # past the entry's "*2": its id's "$<size>"
    header_end = data.index(b"\r\n", at)
    return bytes(data[header_end + 2 : header_end + 2 + int(data[at + 1 : header_end])])


class KafkaStore:
    def __init__(
        self, partitions: Partitions, producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.partitions = partitions
        self.keys = partitions.keys
        self.bits = partitions.sequence_bits
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fence = SequenceFence()  # see mapping/partition/sequence_fence.py

    def append_batch(
        self,
        config: TopicConfig,
        partition: int,
        records: list[ProducedRecord],
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        create_time: bool = True,
        raw: RawRecords | None = None,
    ) -> Pending[AppendResult]:
        """One script call appending one RecordBatch (stamped with its append time when the
        topic says LogAppendTime); ``create_time`` False: its records have no timestamp of
        their own (magic-0 messages), readers see their append time; ``raw``: the batch's
        plain records as sent (``records`` empty), where ``Partitions.append_module`` lets the
        module append them."""
        partitions = self.partitions
        head = partitions.head(config, partition)
        key = (config.name, partition, producer_id, producer_epoch)
        compaction = compaction_keys(config, head.keys)
        # the first batch this pod failed: a gap before it is records a failover lost
        lost_gap = producer_id >= 0 and self.fence.first_failed(key, base_sequence)
        batcher = partitions.batcher
        own = _whole_reply
        if (
            raw is not None
            and raw.count <= COMBINED_BATCH_RECORDS
            and partitions.produce_module
            and partitions.append_module
            and not (transactional or compaction)
        ):
            batch = sent_batch(
                raw, producer_id, producer_epoch, base_sequence, self.producer_id_expiration_ms,
                lost_gap,
            )  # fmt: skip
            # (the head itself names the group: a topic made anew has a head of its own)
            future, index = batcher.append(
                (PRODUCE_MANY_COMMAND, id(head)), partial(kafka_produce_many_call, head), [batch],
                MOST_COMBINED_BATCHES,
            )  # fmt: skip
            own = partial(_own_reply, index)
        else:
            call = kafka_produce_call(
                head,
                records,
                producer_id,
                producer_epoch,
                base_sequence,
                self.producer_id_expiration_ms,
                create_time=create_time and not rules_of(config).log_append_time,
                compaction=compaction,
                transactional=transactional,
                packed=batcher.packs_commands,
                lost_gap=lost_gap,
                append_module=partitions.append_module,
                raw=raw,
                produce_module=partitions.produce_module,
            )
            future = batcher.submit(*call)
        # a caller that goes away (its connection closed) leaves the failure unread
        future.add_done_callback(mark_retrieved)
        if producer_id < 0:
            return Pending(future, lambda reply: _append_result(own(reply)))
        # an idempotent producer's batches keep their order across a failed one
        future.add_done_callback(partial(self._settled, key, base_sequence, own))
        return Pending(future, lambda reply: self._appended(key, base_sequence, own(reply)))

    def _settled(
        self,
        key: tuple,
        base_sequence: int,
        own: Callable[[Any], list[Any]],
        future: asyncio.Future[Any],
    ) -> None:
        if future.cancelled():
            return
        failure = future.exception()
        if failure is None:
            try:
                reply = own(future.result())
            except Exception as exc:  # the batch's own error reply
                failure = exc
        if isinstance(failure, Unavailable):  # not written, or perhaps not (OutcomeUnknown)
            self.fence.failed(key, base_sequence)
        elif failure is None and int(reply[0]) in (0, 1):  # stored, or found stored
            self.fence.written(key)

    def _appended(self, key: tuple, base_sequence: int, reply: Any) -> AppendResult:
        result = _append_result(reply)
        if result.status == UNKNOWN_PRODUCER_ID and self.fence.behind_failure(key, base_sequence):
            # The gap is an earlier batch this pod failed: "not written", send that first.
            raise Unavailable("redis unavailable: an earlier batch of this producer failed")
        return result

    def start_read(
        self, config: TopicConfig, partition: int, offset: int, count: int, raw: bool = False
    ) -> Pending[FetchRead]:
        """The hw (ISR refreshed), the log start and up to ``count`` entries at or after
        ``offset``: one pipeline, native XRANGE (no copying through Lua). ``raw``: the
        entries as the reply's RESP bytes where the batcher can (a reader that walks them
        in compiled code), else as lists."""
        partitions = self.partitions
        if partitions.durable is not None:
            partitions.durable.note(config, partition)
        pk = self.keys.partition(config.name, partition)
        status = self._status(config, partition)
        status.add_done_callback(mark_retrieved)
        log_start = partitions.batcher.submit("HGET", pk.state, "log_start")
        log_start.add_done_callback(mark_retrieved)
        start = codec.entry_id(offset, self.bits)
        submit = partitions.batcher.submit_raw if raw else partitions.batcher.submit
        entries = submit("XRANGE", pk.log, start, "+", "COUNT", count)

        def finish(reply: list[Any] | RawReply) -> FetchRead:
            start_value = log_start.result()
            state = status.result()
            return FetchRead(
                int(state[0]),
                int(start_value) if start_value is not None else -1,
                reply,
                len(reply) >= count,
                int(state[6]),
                int(state[2]),
            )

        return Pending(entries, finish)

    async def first_offset(
        self, config: TopicConfig, partition: int, committed: bool = False
    ) -> tuple[int, int]:
        """(Kafka's log start offset, Kafka's high watermark = V1 hw + 1); ``committed``
        (read_committed): the last stable offset in the high watermark's place."""
        pk = self.keys.partition(config.name, partition)
        status, first, log_start = await _gather(
            self._status(config, partition),
            self.partitions.batcher.submit("XRANGE", pk.log, "-", "+", "COUNT", 1),
            self.partitions.batcher.submit("HGET", pk.state, "log_start"),
        )
        end = _fetchable_end(status, committed)
        return kafka_log_start(first, log_start, end, self.bits), end

    async def at_or_after_time(
        self, config: TopicConfig, partition: int, timestamp_ms: int, committed: bool = False
    ) -> StoredRecord | None:
        """The first record appended at or after ``timestamp_ms``, when it is committed
        (``committed``, read_committed: below the last stable offset too); else None, as
        Kafka's Partition.fetchOffsetForTimestamp answers a record found past the last
        offset the reader may fetch."""
        pk = self.keys.partition(config.name, partition)
        status, found = await _gather(
            self._status(config, partition),
            self.partitions.batcher.submit(
                "XRANGE", pk.log, f"{max(0, timestamp_ms)}-0", "+", "COUNT", 1
            ),
        )
        if not found:
            return None
        record = entry_record(found[0][0], found[0][1], self.bits)
        if record.offset >= _fetchable_end(status, committed):
            return None
        return record._replace(timestamp=record.offset >> self.bits)

    def _status(self, config: TopicConfig, partition: int) -> asyncio.Future[Any]:
        """partition/status.lua's reply as a reader sees it (hw first)."""
        partitions = self.partitions
        call = partition_status_call(partitions.head(config, partition), partitions.durable_reads)
        return partitions.batcher.submit(*call)

    async def last_committed(
        self, config: TopicConfig, partition: int, committed: bool = False
    ) -> StoredRecord | None:
        """The record at the high watermark (the newest committed one); ``committed``
        (read_committed): None when it is not below the last stable offset (a transaction
        is open), as Kafka filters its max-timestamp answer."""
        status = await self.partitions.partition_status(config, partition, reader=True)
        if status.high_watermark < 0:
            return None
        if committed and status.high_watermark >= status.last_stable_offset:
            return None
        pk = self.keys.partition(config.name, partition)
        hw_id = codec.entry_id(status.high_watermark, self.bits)
        found = await self.partitions.batcher.call("XREVRANGE", pk.log, hw_id, "-", "COUNT", 1)
        if not found:
            return None
        return entry_record(found[0][0], found[0][1], self.bits)

    async def delete_records(self, config: TopicConfig, partition: int, cut: int) -> int | None:
        """Remove the records below ``cut`` (-1: below the high watermark); the new log start,
        or None when ``cut`` is past Kafka's high watermark."""
        call = partition_delete_records_call(self.partitions.head(config, partition), cut)
        # (refused as deleted: this pod forgets the topic, as after any partition script)
        status, low = await self.partitions.script_reply(config, call)
        return None if int(status) else int(low)

    async def new_producer_id(self) -> int:
        """A producer id never handed out before, even by a primary a failover replaced
        (kafka/producer_id.lua)."""
        return int(await self.partitions.batcher.call(*kafka_producer_id_call(self.keys)))


def _fetchable_end(status: list[Any], committed: bool) -> int:
    """From partition/status.lua's reply: the end (exclusive) of what a reader may fetch,
    Kafka's high watermark (V1 hw + 1), or read_committed's last stable offset."""
    if committed:
        return last_stable_offset(int(status[0]), int(status[6]))
    return int(status[0]) + 1


async def _gather(*futures: Any) -> list[Any]:
    return list(await asyncio.gather(*futures))
