"""The console's message browser: committed records of one partition from the start, the
end, an offset or a time, and a search by key over a bounded range. Records come from the
reader ``adapter topic tail`` uses (mapping/partition/record_reader.py): never past the
last stable offset, never a transaction marker or a record of an aborted transaction."""

from __future__ import annotations

from dataclasses import dataclass

from mapping.core import codec
from mapping.core.records import StoredRecord
from mapping.partition.kafka import KafkaStore
from mapping.partition.partition_txns import PartitionTxns
from mapping.partition.record_reader import read_committed
from mapping.topic.topic_config import TopicConfig

START, END, OFFSET, TIME = "start", "end", "offset", "time"
FROM_CHOICES = (START, END, OFFSET, TIME)
# Entries one read looks at (markers and aborted records included)
PAGE_ENTRIES = 500
# Entries a search by key looks at, at most, from where it starts
SEARCH_ENTRIES = 20_000


@dataclass(frozen=True, slots=True)
class MessagePage:
    records: list[StoredRecord]
    start: int  # the offset the read started at
    next_offset: int  # where the next page starts
    end: int  # the last stable offset: records below it are readable
    searched_to: int | None = None  # a search by key: it looked at the offsets below this


async def start_offset(
    kafka: KafkaStore, config: TopicConfig, partition: int, where: str, offset: int, time_ms: int,
    limit: int,
) -> int:  # fmt: skip
    """Where a page starting ``where`` begins (END: ``limit`` entries before the end)."""
    log_start, end = await kafka.first_offset(config, partition, committed=True)
    if where == START:
        return log_start
    if where == OFFSET:
        return min(max(offset, log_start), end)
    if where == TIME:
        found = await kafka.at_or_after_time(config, partition, time_ms, committed=True)
        return end if found is None else found.offset
    if end <= log_start:
        return end
    log = kafka.keys.partition(config.name, partition).log
    before = await kafka.partitions.batcher.call(
        "XREVRANGE", log, codec.entry_id(end - 1, kafka.bits), "-", "COUNT", limit
    )
    return codec.entry_offset(before[-1][0], kafka.bits) if before else end


async def browse(
    kafka: KafkaStore, txns: PartitionTxns, config: TopicConfig, partition: int, start: int,
    limit: int, key: bytes | None = None,
) -> MessagePage:  # fmt: skip
    """Up to ``limit`` committed records from ``start``; with ``key``, only the records with
    that key among at most ``SEARCH_ENTRIES`` entries from ``start``."""
    _, end = await kafka.first_offset(config, partition, committed=True)
    found: list[StoredRecord] = []
    position, looked = start, 0
    while len(found) < limit and position < end:
        budget = PAGE_ENTRIES if key is not None else limit - len(found)
        page = await read_committed(txns, config, partition, position, budget)
        next_position = page.next_offset
        for record in page.records:
            if key is None or record.key == key:
                found.append(record)
                if len(found) == limit:
                    next_position = record.offset + 1
                    break
        if next_position <= position:  # nothing more below the end
            break
        position = next_position
        looked += budget
        if key is not None and looked >= SEARCH_ENTRIES:
            break
    position = min(position, end)
    return MessagePage(found, start, position, end, position if key is not None else None)
