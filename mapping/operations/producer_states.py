"""The producers a partition knows, as Kafka's DescribeProducers reports them (``kafka-
transactions.sh describe-producers``, ``find-hanging``): every idempotent or transactional
producer whose state the partition keeps, with its epoch, last sequence, last append and the
first offset of its open transaction.

Read from the partition's ``producers`` hash ("<epoch> <first_seq> <last_seq> <base_offset>
<last_offset> ..." for its last batches, oldest first: kafka/produce.lua), its
``producer_times`` (the producer's last append, ms) and ``txn:open`` ("<epoch> <first
offset> <transaction>": lib/txn_open.lua). A producer idle past the expiration
(``--kafka-producer-id-expiration-ms``) is left out: its state is dropped at the next
append, as Kafka's expiration drops it, unless a transaction of it is open here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mapping.connection.batcher import RedisBatcher
from mapping.core import codec
from mapping.core.keys import Keys

# Kafka's "none" for the last sequence, the last timestamp, the coordinator epoch and the
# transaction's start offset
NONE = -1


@dataclass(frozen=True, slots=True)
class ProducerState:
    producer_id: int
    epoch: int
    last_sequence: int  # of its last batch here (-1: none kept)
    last_timestamp: int  # its last append here, ms (-1: unknown)
    txn_start_offset: int  # first offset of its open transaction here (-1: none)


async def active_producers(
    batcher: RedisBatcher, keys: Keys, topic: str, partition: int, expiration_ms: int
) -> list[ProducerState]:
    """The partition's producers, by producer id (one pipeline; expiry by Redis' clock, the
    one the appends were timed by)."""
    pk = keys.partition(topic, partition)
    stored, times, open_txns, (seconds, micros) = await asyncio.gather(
        batcher.submit("HGETALL", pk.producers),
        batcher.submit("ZRANGE", pk.producer_times, 0, -1, "WITHSCORES"),
        batcher.submit("HGETALL", pk.txn_open),
        batcher.submit("TIME"),
    )
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    return producer_states(
        _by_producer(stored), _by_producer(times), _by_producer(open_txns), now_ms, expiration_ms
    )


def producer_states(
    stored: dict[int, str],
    times: dict[int, str],
    open_txns: dict[int, str],
    now_ms: int,
    expiration_ms: int,
) -> list[ProducerState]:
    """``active_producers`` from the three structures' contents (producer id -> text)."""
    found = []
    for producer_id in sorted(set(stored) | set(open_txns)):
        words = stored.get(producer_id, "").split()
        epoch = int(words[0]) if words else NONE
        # the last batch's "first_seq last_seq base_offset last_offset"
        last_sequence = int(words[-3]) if len(words) >= 5 else NONE
        last_append = int(float(times[producer_id])) if producer_id in times else NONE
        txn_start = NONE
        if producer_id in open_txns:
            txn_epoch, first = open_txns[producer_id].split()[:2]
            epoch, txn_start = max(epoch, int(txn_epoch)), int(first)
        elif last_append == NONE or last_append < now_ms - expiration_ms:
            continue  # expired: the next append drops it
        found.append(ProducerState(producer_id, epoch, last_sequence, last_append, txn_start))
    return found


def _by_producer(reply: Any) -> dict[int, str]:
    """A HGETALL or ZRANGE WITHSCORES reply as producer id -> text."""
    return {int(codec.to_str(k)): codec.to_str(v) for k, v in codec.reply_pairs(reply)}
