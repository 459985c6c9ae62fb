"""The console's topic views (``adapter console``): a page of the topics list and one
topic's partitions, read on the console's batcher so that each page is a few pipelines
whatever the deployment's size.

The list never scans Redis: the names come from the ``<prefix>:topics`` set, are filtered
and sorted, and only the page shown is read further. A partition's numbers are the readers'
(``KafkaStore.first_offset``: Kafka's log start and high watermark, the last stable offset
under read_committed), its records ``XLEN`` and its bytes ``MEMORY USAGE`` of its log;
replicas and ISR are the broker ids Metadata reports (``partition_replicas``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from mapping.connection.batcher import RedisBatcher
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.partition.kafka import KafkaStore
from mapping.topic.brokers import kafka_brokers_call, live_brokers, partition_replicas
from mapping.topic.topic_config import TopicConfig

PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    records: int  # entries in the partitions' logs now


@dataclass(frozen=True, slots=True)
class TopicPage:
    rows: list[TopicRow]
    total: int  # topics matching the search
    page: int  # 1-based, clamped into 1..pages
    pages: int


@dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    log_start: int  # Kafka's log start offset
    high_watermark: int  # Kafka's (exclusive): ListOffsets latest
    last_stable_offset: int  # read_committed's end
    records: int
    bytes: int  # the log's memory in Redis (MEMORY USAGE)
    replicas: list[int]  # broker ids, as Metadata reports them
    isr: list[int]


async def topic_names(batcher: RedisBatcher, keys: Keys) -> list[str]:
    return sorted(codec.to_str(n) for n in await batcher.call("SMEMBERS", keys.topics))


def page_of(names: list[str], query: str, page: int, size: int) -> tuple[list[str], int, int, int]:
    """(names shown, matching count, page, pages): a case-insensitive substring search."""
    wanted = query.strip().lower()
    found = [n for n in names if wanted in n.lower()] if wanted else names
    pages = max(1, math.ceil(len(found) / size))
    page = min(max(1, page), pages)
    return found[(page - 1) * size : page * size], len(found), page, pages


async def topics_page(
    batcher: RedisBatcher,
    keys: Keys,
    query: str = "",
    page: int = 1,
    size: int = PAGE_SIZE,
    visible: Callable[[str], bool] = lambda _name: True,
) -> TopicPage:
    """One page of the topics whose name contains ``query`` (and ``visible`` allows), with
    their record counts."""
    names = [n for n in await topic_names(batcher, keys) if visible(n)]
    shown, total, page, pages = page_of(names, query, page, size)
    settings = await asyncio.gather(
        *(batcher.call("HMGET", keys.topic(n), "partitions", "replication_factor") for n in shown)
    )
    counts = {
        name: (int(p), int(rf or 1))
        for name, (p, rf) in zip(shown, settings, strict=True)
        if p is not None  # (deleted since the set was read)
    }
    logs = [(n, p) for n, (count, _) in counts.items() for p in range(count)]
    lengths = await asyncio.gather(
        *(batcher.call("XLEN", keys.partition(n, p).log) for n, p in logs)
    )
    records: dict[str, int] = {}
    for (name, _), length in zip(logs, lengths, strict=True):
        records[name] = records.get(name, 0) + int(length)
    rows = [TopicRow(n, c, rf, records.get(n, 0)) for n, (c, rf) in counts.items()]
    return TopicPage(rows, total, page, pages)


async def brokers(batcher: RedisBatcher, keys: Keys) -> list[tuple[int, str, int]]:
    """The live Kafka brokers (node id, host, port): the pods."""
    return live_brokers(await batcher.call(*kafka_brokers_call(keys.kafka_brokers)))


async def partition_rows(kafka: KafkaStore, config: TopicConfig) -> list[PartitionRow]:
    """Every partition of topic ``config``."""
    batcher, keys = kafka.partitions.batcher, kafka.keys
    live = await brokers(batcher, keys)
    named = config.replica_assignment()

    async def one(p: int) -> PartitionRow:
        log = keys.partition(config.name, p).log
        (start, end), (_, stable), length, size = await asyncio.gather(
            kafka.first_offset(config, p),
            kafka.first_offset(config, p, committed=True),
            batcher.call("XLEN", log),
            batcher.call("MEMORY", "USAGE", log),
        )
        replicas, isr = (
            partition_replicas(live, config.name, p, config.replication_factor, named.get(p))
            if live
            else ([], [])
        )
        return PartitionRow(p, start, end, stable, int(length), int(size or 0), replicas, isr)

    return list(await asyncio.gather(*(one(p) for p in range(config.partitions))))
