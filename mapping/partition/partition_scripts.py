"""The partition scripts' calling convention: each script's module constant and its typed
builder on a ``PartitionHead`` (the keys and arguments every partition script takes first),
and what the scripts answer, decoded. mapping/partition/partitions.py sends the calls; the
replicator,
retention, the benchmarks and the tests build the same calls here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mapping.connection import scripts
from mapping.connection.append_module import V1_PRODUCE_COMMAND, produce_command
from mapping.connection.scripts import Script
from mapping.core.keys import PartitionKeys
from mapping.core.records import packed_pairs
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_rules import is_compacted

# Offsets past every log end (exact as a Lua double): "copy everything there is".
LATEST_OFFSET = (1 << 53) - 1
# Entries one REPLICA_FETCH call copies at most: bounds the time one script holds Redis.
DEFAULT_MAX_COPY = 1000

PARTITION_PRODUCE = scripts.load("partition/produce")
PARTITION_CONSUME = scripts.load("partition/consume")
PARTITION_SET_ROLE = scripts.load("partition/set_role")
PARTITION_REPLICA_FETCH = scripts.load("partition/replica_fetch")
PARTITION_STATUS = scripts.load("partition/status")


@dataclass(frozen=True, slots=True)
class PartitionHead:
    """What every partition script takes first (see lib/partition.lua): the partition's keys
    log, state, hw_channel, appended; then the sequence bits, the topic's replication factor
    and the ISR's lag bound."""

    keys: PartitionKeys
    sequence_bits: int
    replication_factor: int
    replica_lag_max_ms: int

    def command(self, script: Script, extra_keys: Sequence[str], args: Sequence[Any]) -> tuple:
        """``script``'s call: the head, then the script's own keys and arguments."""
        k = self.keys
        return script.command(
            [k.log, k.state, k.hw_channel, k.appended_channel, *extra_keys],
            [self.sequence_bits, self.replication_factor, self.replica_lag_max_ms, *args],
        )

    def replicas(self) -> list[str]:
        """The follower replica streams (the scripts that trim the log trim them too)."""
        return [self.keys.replica(r) for r in range(1, self.replication_factor)]


def _durable_flag(durable_reads: bool) -> list[str]:
    """A reader script's last argument: hw at most durable_hw (readable_hw)."""
    return ["1"] if durable_reads else []


def compaction_keys(config: TopicConfig, keys: PartitionKeys) -> list[str]:
    """What an append script takes after its own keys: the compaction keys when the topic is
    compacted (the append keeps them up to date, lib/append.lua), else nothing."""
    return keys.compaction() if is_compacted(config) else []


def partition_produce_call(
    head: PartitionHead,
    items: list[Any],
    compaction: Sequence[str] = (),
    append_module: bool = False,
    produce_module: bool = False,
) -> tuple:
    """partition/produce.lua: ``items`` are key1, value1, key2, value2, ...; ``compaction``:
    see ``compaction_keys``; ``append_module``: Redis has the streamadapter module
    (mapping/connection/append_module.c), whose one command writes the records of a partition
    that is not compacted: they go packed in one argument (``packed_pairs``);
    ``produce_module``: its STREAMADAPTER.V1PRODUCE does the whole call instead, the same
    keys and arguments."""
    if append_module and not compaction:
        call = head.command(PARTITION_PRODUCE, (), ["1", packed_pairs(items)])
        return produce_command(call, V1_PRODUCE_COMMAND) if produce_module else call
    return head.command(PARTITION_PRODUCE, compaction, ["0", *items])


def produced_offsets(reply: Sequence[Any]) -> list[int]:
    """The offsets of every record a partition/produce.lua call appended, from its reply
    (hw, |ISR|, the first offset, the last: a call's offsets are consecutive)."""
    first, last = int(reply[2]), int(reply[3])
    return list(range(first, last + 1)) if first >= 0 else []


def partition_consume_call(
    head: PartitionHead, start_id: str, max_records: int, max_bytes: int, durable_reads: bool
) -> tuple:
    """partition/consume.lua from entry id ``start_id`` (max_records 0: hw and marks only)."""
    args = [start_id, max_records, max_bytes, *_durable_flag(durable_reads)]
    return head.command(PARTITION_CONSUME, (), args)


def partition_set_role_call(head: PartitionHead, role: str) -> tuple:
    return head.command(PARTITION_SET_ROLE, (), [role])


def partition_replica_fetch_call(
    head: PartitionHead, replica_id: int, offset: int, max_copy: int, copy_module: bool = False
) -> tuple:
    """partition/replica_fetch.lua; ``copy_module``: Redis has the streamadapter module's
    STREAMADAPTER.COPY (mapping/connection/append_module.c), which copies the entries."""
    replica = head.keys.replica(replica_id)
    args = [replica_id, offset, max_copy, "1" if copy_module else "0"]
    return head.command(PARTITION_REPLICA_FETCH, (replica,), args)


def partition_status_call(head: PartitionHead, durable_reads: bool = False) -> tuple:
    """partition/status.lua; ``durable_reads``: hw as readers see it."""
    return head.command(PARTITION_STATUS, (), _durable_flag(durable_reads))


@dataclass(frozen=True, slots=True)
class ProduceResult:
    offsets: list[int]
    high_watermark: int
    isr_size: int  # right after the append


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    # a list, or the reader's formatting of them (mapping/partition/formatted_records.py)
    records: Sequence[tuple[int, bytes]]
    high_watermark: int
    # markers left out and transactional records read: (offset, producer id; -1 a marker),
    # for mapping/partition/partition_txns.py to leave aborted records out (empty: none read)
    transactional: list[tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    acked_offset: int  # what the replica holds now (<= the offset asked for)
    high_watermark: int
    isr: list[int]
    log_end: int
    complete: bool  # False: the copy bound stopped short, call again

    def under_replicated(self, config: TopicConfig) -> bool:
        return len(self.isr) < config.replication_factor


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    high_watermark: int
    isr_size: int
    next_change_ms: int  # ms until a lagging ISR member drops out; -1: none lags
    log_end: int
    isr: list[int]
    role: str
    # the last stable offset while a transaction is open (-1: none open): one past the last
    # entry before the oldest open transaction (partition/status.lua)
    stable_end: int = -1

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO (exclusive, like its high watermark): below every open transaction."""
        return last_stable_offset(self.high_watermark, self.stable_end)


def last_stable_offset(high_watermark: int, stable_end: int) -> int:
    """Kafka's last stable offset from V1's hw and the stable end partition/status.lua
    answers (-1: no transaction open): one past the last entry before the oldest open
    transaction, the position a read_committed reader that read everything stable reaches
    (offsets are sparse: its first offset would be past that position), at most Kafka's
    high watermark (hw + 1)."""
    if 0 <= stable_end <= high_watermark + 1:
        return stable_end
    return high_watermark + 1
