"""Transactions, the partition side (issue 23; docs/transactions.md): which
producers have a transaction open on a partition, its markers, its last stable offset (LSO)
and the index of aborted transactions that read_committed readers filter with.

Per partition (mapping/core/keys.py, the partition's slot):

- ``txn:open`` hash: producer id -> "<epoch> <first offset> <transaction>" (first offset -1
  while registered by AddPartitionsToTxn with nothing appended yet; kafka/produce.lua sets it
  at the first transactional append; transaction: the coordinator's txn_start_ms, which of
  the producer's transactions it is; lua/lib/txn_open.lua);
- ``txn:aborted`` sorted set: "<producer id> <first offset>" -> the abort marker's offset;
- the state hash's ``txn_first``: the smallest first offset among the open transactions,
  absent when none is. So LSO = one past the last entry before txn_first when present (the
  position a reader of every stable record reaches: offsets are sparse, so txn_first itself
  may lie past it; lib/partition.lua reader_bounds), else hw + 1, read with the hw in the
  readers' one status call: a partition without open transactions costs nothing more.

A marker (commit or abort) is a control entry appended like any record (txn/marker.lua, through
lib/append.lua), rendered by Kafka Fetch as a control batch and skipped by V1 and Spark.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from typing import Any

from mapping.connection import scripts
from mapping.connection.batcher import Pending
from mapping.core import codec
from mapping.partition.formatted_records import FormatValues
from mapping.partition.partition_scripts import ConsumeResult, PartitionHead
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig

TXN_ADD = scripts.load("txn/add")
TXN_MARKER = scripts.load("txn/marker")

# A registration's or marker's transaction when the caller does not say which: the marker
# ends whichever transaction of the producer is registered with that epoch.
ANY_TRANSACTION = -1

# Pages V1 CONSUME reads on at most when every record of a page was a marker or aborted, so
# that a reader behind a long aborted transaction moves on (each page one round trip).
MAX_SKIPPED_PAGES = 16


def txn_add_call(
    head: PartitionHead, producer_id: int, epoch: int, transaction: int = ANY_TRANSACTION
) -> tuple:
    """txn/add.lua: register ``producer_id``'s transaction at ``epoch`` on the partition."""
    return head.command(TXN_ADD, (head.keys.txn_open,), [producer_id, epoch, transaction])


def txn_marker_call(
    head: PartitionHead,
    producer_id: int,
    epoch: int,
    commit: bool,
    transaction: int = ANY_TRANSACTION,
) -> tuple:
    """txn/marker.lua: end ``producer_id``'s transaction with a commit or abort marker."""
    k = head.keys
    return head.command(
        TXN_MARKER,
        (k.txn_open, k.txn_aborted, k.producers, k.producer_times),
        [producer_id, epoch, int(commit), transaction],
    )


class AbortedRanges:
    """Aborted transactions as read from ``txn:aborted``: per producer, the offset ranges
    [first offset, marker offset] whose records an abort took back."""

    def __init__(self, reply: list[Any]) -> None:
        self.by_producer: dict[int, list[tuple[int, int]]] = {}
        for member, score in codec.reply_pairs(reply):
            producer, _, first = codec.to_str(member).partition(" ")
            self.by_producer.setdefault(int(producer), []).append((int(first), int(score)))
        for ranges in self.by_producer.values():
            ranges.sort()

    def aborted(self, producer_id: int, offset: int) -> bool:
        """Whether ``producer_id``'s record at ``offset`` belongs to an aborted transaction."""
        ranges = self.by_producer.get(producer_id)
        if not ranges:
            return False
        at = bisect_right(ranges, (offset, 1 << 62)) - 1
        return at >= 0 and ranges[at][0] <= offset <= ranges[at][1]

    def listed(self, first_offset: int, last_offset: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with records in
        [first_offset, last_offset]: Kafka Fetch's aborted_transactions."""
        return sorted(
            (producer, first)
            for producer, ranges in self.by_producer.items()
            for first, marker in ranges
            if first <= last_offset and marker >= first_offset
        )


class PartitionTxns:
    def __init__(self, partitions: Partitions) -> None:
        self.partitions = partitions
        self.keys = partitions.keys

    async def add(
        self,
        config: TopicConfig,
        partition: int,
        producer_id: int,
        epoch: int,
        transaction: int = ANY_TRANSACTION,
    ) -> int:
        """Register the producer's transaction on the partition (AddPartitionsToTxn); a Kafka
        error code: 0, INVALID_PRODUCER_EPOCH (a newer epoch is registered) or
        CONCURRENT_TRANSACTIONS (another transaction of the producer still holds records
        here: its marker comes first). ``transaction`` names which of the producer's
        transactions it is (the coordinator's txn_start_ms, unique per producer and epoch)."""
        head = self.partitions.head(config, partition)
        call = txn_add_call(head, producer_id, epoch, transaction)
        return int(await self.partitions.script_reply(config, call))

    async def write_marker(
        self,
        config: TopicConfig,
        partition: int,
        producer_id: int,
        epoch: int,
        commit: bool,
        transaction: int = ANY_TRANSACTION,
    ) -> int | None:
        """End the producer's transaction on the partition: its marker's offset, or None when
        nothing of it was open (already done). With ``transaction``, only that transaction
        of the epoch ends (a late finisher's marker never ends the producer's next one); a
        registration with an older epoch (a fenced session's) ends whatever it names."""
        head = self.partitions.head(config, partition)
        reply = await self.partitions.script_reply(
            config, txn_marker_call(head, producer_id, epoch, commit, transaction)
        )
        offset = int(reply[0])
        return offset if offset >= 0 else None

    async def open_transactions(
        self, config: TopicConfig, partition: int
    ) -> list[tuple[int, int, int]]:
        """(producer id, epoch, first offset) of the transactions open on the partition, by
        first offset (-1, registered with nothing appended, first)."""
        pk = self.keys.partition(config.name, partition)
        reply = await self.partitions.batcher.call("HGETALL", pk.txn_open)
        found = []
        for producer, text in codec.reply_pairs(reply):
            epoch, first = codec.to_str(text).split()[:2]
            found.append((int(producer), int(epoch), int(first)))
        return sorted(found, key=lambda t: (t[2], t[0]))

    async def last_stable_offset(self, config: TopicConfig, partition: int) -> int:
        """Kafka's LSO (exclusive): the oldest open transaction's first offset, else the high
        watermark (V1 hw + 1)."""
        status = await self.partitions.partition_status(config, partition, reader=True)
        return status.last_stable_offset

    async def aborted_ranges(
        self, config: TopicConfig, partition: int, from_offset: int
    ) -> AbortedRanges:
        """The aborted transactions whose markers are at or after ``from_offset``."""
        pk = self.keys.partition(config.name, partition)
        reply = await self.partitions.batcher.call(
            "ZRANGEBYSCORE", pk.txn_aborted, max(from_offset, 0), "+inf", "WITHSCORES"
        )
        return AbortedRanges(reply)

    def start_consume(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        max_records: int,
        max_bytes: int = 0,
        format_values: FormatValues | None = None,
    ) -> Pending[ConsumeResult]:
        """V1 CONSUME (and any reader of committed records): Partitions.start_consume (which
        never reads past the last stable offset and leaves markers out), then, only when the
        page held transactional records, the aborted ones left out too; a page left empty
        that way reads on (at most MAX_SKIPPED_PAGES), so a reader moves past an abort.
        ``format_values``: as for Partitions.start_consume (a page it formats holds no
        transactional record)."""
        first = self.partitions.start_consume(
            config, partition, offset, max_records, max_bytes, format_values
        )
        outcome: asyncio.Future[ConsumeResult] = asyncio.get_running_loop().create_future()

        def settle(done: asyncio.Future[Any]) -> None:
            if outcome.done():
                return
            if done.cancelled():
                outcome.cancel()
                return
            try:
                result = first.finish(done.result())
            except Exception as exc:  # the read's failure is the consume's
                outcome.set_exception(exc)
                return
            if not result.transactional:
                outcome.set_result(result)
                return
            task = asyncio.ensure_future(
                self._committed(config, partition, result, max_records, max_bytes)
            )
            task.add_done_callback(lambda t: _copy(t, outcome))

        first.future.add_done_callback(settle)
        return Pending(outcome, lambda result: result)

    async def _committed(
        self,
        config: TopicConfig,
        partition: int,
        result: ConsumeResult,
        max_records: int,
        max_bytes: int,
    ) -> ConsumeResult:
        for _ in range(MAX_SKIPPED_PAGES):
            kept = await self._without_aborted(config, partition, result)
            scanned = max(
                [o for o, _ in result.records] + [o for o, _ in result.transactional], default=-1
            )
            if kept.records or scanned < 0 or scanned >= kept.high_watermark:
                return kept
            more = await self.partitions.start_consume(
                config, partition, scanned + 1, max_records, max_bytes
            )
            if not more.records and not more.transactional:
                return kept if more.high_watermark <= kept.high_watermark else more
            result = more
        return kept

    async def _without_aborted(
        self, config: TopicConfig, partition: int, result: ConsumeResult
    ) -> ConsumeResult:
        # ``transactional`` stays: it says how far the page read
        # (mapping/partition/record_reader.py)
        producers = {offset: pid for offset, pid in result.transactional if pid >= 0}
        if not producers:
            return ConsumeResult(result.records, result.high_watermark, result.transactional)
        aborted = await self.aborted_ranges(config, partition, min(producers))
        kept = [
            (offset, value)
            for offset, value in result.records
            if offset not in producers or not aborted.aborted(producers[offset], offset)
        ]
        return ConsumeResult(kept, result.high_watermark, result.transactional)


def _copy(task: asyncio.Future[ConsumeResult], outcome: asyncio.Future[ConsumeResult]) -> None:
    if outcome.done():
        if not task.cancelled():
            task.exception()  # seen
        return
    if task.cancelled():
        outcome.cancel()
    elif task.exception() is not None:
        outcome.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        outcome.set_result(task.result())
