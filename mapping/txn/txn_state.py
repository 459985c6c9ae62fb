"""The transaction coordinator's state as Python sees it: Kafka's state names, a
transactional id's state as txn_coord/describe.lua reads it, the partitions and
registrations its sets hold, the settings, and whom a transaction's end is written to
(mapping/txn/transactions.py is the coordinator itself)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from mapping.core.codec import to_str
from mapping.core.keys import group_name
from mapping.topic.topic_config import TopicConfig

# Kafka's TransactionState names
EMPTY = "Empty"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
PREPARE_ABORT = "PrepareAbort"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
DEAD = "Dead"
PREPARE_EPOCH_FENCE = "PrepareEpochFence"
STATES = (EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD,
          PREPARE_EPOCH_FENCE)  # fmt: skip
OPEN_STATES = (ONGOING, PREPARE_COMMIT, PREPARE_ABORT)

DEFAULT_MAX_TIMEOUT_MS = 900_000  # Kafka's transaction.max.timeout.ms
DEFAULT_EXPIRATION_MS = 604_800_000  # Kafka's transactional.id.expiration.ms (7 days)
# A Prepare* not finished this long after it was written: its pod is taken for dead.
DEFAULT_GRACE_MS = 5_000


def partition_member(topic: str, partition: int) -> str:
    """A partition as the transaction's partitions set holds it."""
    return f"{topic}\t{partition}"


def parse_partition_member(member: bytes | str) -> tuple[str, int] | None:
    topic, _, partition = to_str(member).partition("\t")
    return (topic, int(partition)) if partition.isdigit() else None


@dataclass(frozen=True, slots=True)
class Registration:
    """A partition AddPartitionsToTxn is registering for one transaction (the registering
    set's entry, txn_coord/add.lua): released by the completer when its pod died."""

    producer_id: int
    epoch: int
    txn_start_ms: int  # which transaction of the producer and epoch (txn/marker.lua)
    topic: str
    partition: int

    @property
    def entry(self) -> str:
        member = partition_member(self.topic, self.partition)
        return f"{self.producer_id} {self.epoch} {self.txn_start_ms} {member}"


def parse_registration(entry: bytes | str) -> Registration | None:
    words = to_str(entry).split(" ", 3)
    tp = parse_partition_member(words[3]) if len(words) == 4 else None
    if tp is None:
        return None
    return Registration(int(words[0]), int(words[1]), int(words[2]), *tp)


class PartitionParticipant(Protocol):
    """The partition side (mapping/partition/partition_txns.py ``PartitionTxns``)."""

    async def add(
        self, config: TopicConfig, partition: int, producer_id: int, epoch: int,
        transaction: int = -1,
    ) -> int:  # fmt: skip
        """Register the producer's transaction (``transaction``: its txn_start_ms) on the
        partition: a Kafka error code."""
        ...

    async def write_marker(
        self, config: TopicConfig, partition: int, producer_id: int, epoch: int, commit: bool,
        transaction: int = -1,
    ) -> int | None:  # fmt: skip
        """Append the commit/abort marker of that transaction (idempotent): its offset, None
        when none was open."""
        ...


class GroupParticipant(Protocol):
    """The group side (mapping/kafka_group ``KafkaGroups``)."""

    async def end_txn_offsets(self, group: str, producer_id: int, epoch: int, commit: bool) -> None:
        """Make the transaction's pending offsets of ``group`` committed, or drop them."""
        ...


class Participants(Protocol):
    """Whom a transaction's end is written to: the pod (adapter/pod.py ``Pod``)."""

    @property
    def partition_txns(self) -> PartitionParticipant: ...

    @property
    def kafka_groups(self) -> GroupParticipant: ...


@dataclass(frozen=True, slots=True)
class TxnSettings:
    max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS  # --transaction-max-timeout-ms
    expiration_ms: int = DEFAULT_EXPIRATION_MS  # --transactional-id-expiration-ms
    grace_ms: int = DEFAULT_GRACE_MS


@dataclass(frozen=True, slots=True)
class InitResult:
    error: int
    producer_id: int = -1
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class TxnState:
    """A transactional id's coordinator state (DescribeTransactions, the CLI)."""

    transactional_id: str
    producer_id: int
    epoch: int
    state: str
    timeout_ms: int
    txn_start_ms: int  # -1: no transaction started
    last_update_ms: int
    partitions: list[tuple[str, int]] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    end_reason: str = ""  # client, fenced, timeout: who ended the last (or open) transaction


def parse_state(transactional_id: str, reply: list) -> TxnState | None:
    """txn_coord/describe.lua's reply; None for an unknown id."""
    flat, partitions, groups = reply
    if not flat:
        return None
    fields = {to_str(flat[i]): to_str(flat[i + 1]) for i in range(0, len(flat), 2)}
    return TxnState(
        transactional_id=fields.get("transactional_id", transactional_id),
        producer_id=int(fields["producer_id"]),
        epoch=int(fields["epoch"]),
        state=fields["state"],
        timeout_ms=int(fields["timeout_ms"]),
        txn_start_ms=int(fields.get("txn_start_ms", -1)),
        last_update_ms=int(fields.get("last_update_ms", 0)),
        partitions=sorted(p for p in map(parse_partition_member, partitions) if p is not None),
        groups=sorted(group_name(g) for g in groups),
        end_reason=fields.get("end_reason", ""),
    )
