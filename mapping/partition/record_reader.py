"""Whole committed records of one partition (key, value, timestamp, headers), for a reader
that shows more than V1 CONSUME's offset and value: ``adapter topic tail``.

Which records: exactly those V1 CONSUME answers, by the same reader
(``PartitionTxns.start_consume``: at most the last stable offset, no transaction markers,
no records of aborted transactions; docs/transactions.md). Their keys, timestamps and
headers come from one XRANGE over the offsets that page spans, decoded by
``mapping.core.records.entry_record`` as a Kafka Fetch decodes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapping.core import codec
from mapping.core.records import StoredRecord, entry_record
from mapping.partition.partition_txns import PartitionTxns
from mapping.topic.topic_config import TopicConfig


@dataclass(frozen=True, slots=True)
class RecordPage:
    records: list[StoredRecord]
    high_watermark: int  # V1's (inclusive), as CONSUME answers it: below the last stable offset
    next_offset: int  # where the next read starts: past every entry this one looked at


async def read_committed(
    txns: PartitionTxns, config: TopicConfig, partition: int, offset: int, max_records: int
) -> RecordPage:
    """The committed records at or after ``offset`` (at most ``max_records`` entries looked
    at, markers and aborted records included, as CONSUME pages)."""
    page = await txns.start_consume(config, partition, offset, max_records)
    kept = [o for o, _ in page.records]
    # markers and transactional records read: they count for how far the page went
    seen = kept + [o for o, _ in page.transactional]
    if not seen:  # nothing between ``offset`` and the hw: the next record comes after it
        return RecordPage([], page.high_watermark, max(offset, page.high_watermark + 1))
    next_offset = max(seen) + 1
    if not kept:
        return RecordPage([], page.high_watermark, next_offset)
    bits = txns.partitions.sequence_bits
    log = txns.keys.partition(config.name, partition).log
    entries = await txns.partitions.batcher.call(
        "XRANGE", log, codec.entry_id(kept[0], bits), codec.entry_id(kept[-1], bits)
    )
    wanted = set(kept)
    records = [entry_record(entry_id, fields, bits) for entry_id, fields in entries]
    return RecordPage([r for r in records if r.offset in wanted], page.high_watermark, next_offset)
