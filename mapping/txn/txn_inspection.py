"""What the command line and the metrics show of transactions: every transactional id's
coordinator state (read with a synchronous client, as mapping/operations/inspection.py), and each
partition's open transactions with their age and the lag of its last stable offset (through
the partition side, ``PartitionTxns``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

from mapping.connection.cluster import SyncClient
from mapping.core.codec import decode
from mapping.core.keys import Keys, group_name
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig
from mapping.txn.txn_state import OPEN_STATES, TxnState, parse_state

# Transactional ids one listing reads at most (a scrape, a CLI run).
MAX_LISTED = 10_000


def transaction_states(client: SyncClient, keys: Keys, limit: int = MAX_LISTED) -> list[TxnState]:
    """Every transactional id's state (index order: the next due first)."""
    states = []
    for part in client.zrange(keys.txn_index, 0, limit - 1):
        transactional_id = group_name(part)
        txn = keys.txn(transactional_id)
        flat = [x for pair in client.hgetall(txn.state).items() for x in pair]
        reply = [flat, client.smembers(txn.partitions), client.smembers(txn.groups)]
        state = parse_state(transactional_id, reply)
        if state is not None:
            states.append(state)
    return states


def open_counts(states: list[TxnState]) -> dict[str, int]:
    """Open transactions by state (Ongoing, PrepareCommit, PrepareAbort)."""
    counts = dict.fromkeys(OPEN_STATES, 0)
    for state in states:
        if state.state in counts:
            counts[state.state] += 1
    return counts


class OpenTransactions(Protocol):
    """The partition side's view (mapping/partition/partition_txns.py ``PartitionTxns``)."""

    async def open_transactions(
        self, config: TopicConfig, partition: int
    ) -> list[tuple[int, int, int]]: ...

    async def last_stable_offset(self, config: TopicConfig, partition: int) -> int: ...


@dataclass(frozen=True, slots=True)
class PartitionTxnView:
    topic: str
    partition: int
    last_stable_offset: int
    high_watermark: int  # Kafka's, exclusive
    lso_lag_ms: int  # how far (in append time) the LSO is behind the high watermark
    open: list[tuple[int, int, int, int]]  # (producer id, epoch, first offset, age ms; -1)


async def partition_views(
    partitions: Partitions, partition_txns: OpenTransactions, topic: str
) -> list[PartitionTxnView]:
    """Each partition of ``topic`` with an open transaction or a lagging LSO."""
    config = await partitions.topics.lookup(topic)
    if config is None:
        return []
    bits = partitions.sequence_bits
    now = int(time.time() * 1000)
    views = []
    for p in range(config.partitions):
        lso = await partition_txns.last_stable_offset(config, p)
        status = await partitions.partition_status(config, p, reader=True)
        high = status.high_watermark + 1 if status.high_watermark >= 0 else 0
        lag_ms = max(0, decode(high, bits)[0] - decode(lso, bits)[0]) if lso < high else 0
        open_txns = [
            (pid, epoch, first, now - decode(first, bits)[0] if first >= 0 else -1)
            for pid, epoch, first in await partition_txns.open_transactions(config, p)
        ]
        views.append(PartitionTxnView(topic, p, lso, high, lag_ms, open_txns))
    return views
