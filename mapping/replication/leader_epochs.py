"""Kafka leader epochs (KIP-320) over Redis failovers (docs/durability.md, "Leader epochs").

A partition's log lives on one Redis primary; a failover that promotes a replica without the
primary's last writes takes those records back, as a Kafka leader change truncates a log.
Kafka clients see that by leader epochs: every fetched batch carries its epoch, Metadata the
current one, and a client that sees a new epoch asks OffsetForLeaderEpoch where its last
epoch ended; a position past that end is a truncation (reset by ``auto.offset.reset``).

Here an epoch is a Redis primary: as each pod connection is established (before any command
on it), ``on_connect`` reads the primary's ``master_replid`` (a promoted replica gets a new
one) and kafka/leader_epoch.lua registers it when it is new, as the next epoch, started at
the primary's TIME. Records appended on that primary get append times at or after its start
(the produce script assigns ``ms = max(now, last ms)``), so a partition's epoch history is
derived, never stored: epoch k of a partition holds the records appended in
[start k, start k+1); it ends at the first position of epoch k+1, one past its last record
before start k+1. Everything written before the first registration is epoch 0, which ends
where the first registered epoch does (a registry's creation is no failover).

On a Redis Cluster each primary is registered in the same one registry: a connection to a
node that does not hold the registry reads the node's TIME and registers it through the
cluster client with that start (the earliest start read wins), so a failover of any node
starts a new epoch for every partition. Partitions of the nodes that lost nothing see no
truncation (their old epoch ends at their log end); their consumers' next Fetch is fenced
once and they go on after a Metadata refresh.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import AskError, MovedError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.connection import scripts
from mapping.core import codec
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig

log = logging.getLogger(__name__)

KAFKA_LEADER_EPOCH = scripts.load("kafka/leader_epoch")

# Epoch numbers count seconds from here at a registration (2024-01-01T00:00:00Z), so that a
# registry that lost its own last entries in a failover still hands out a higher epoch;
# int32 (Kafka's epoch type) holds them until 2092.
EPOCH_BASE_S = 1_704_067_200

# The epoch of everything before the first registration.
FIRST_EPOCH = 0

# OffsetForLeaderEpoch's answer when the epoch is unknown (Kafka's UNDEFINED_EPOCH and
# UNDEFINED_EPOCH_OFFSET)
UNDEFINED = (-1, -1)


@dataclass(frozen=True, slots=True)
class Epoch:
    epoch: int
    start_ms: int  # the primary's TIME at registration: its records' append times are later


def parse_registry(entries: Sequence[Any]) -> tuple[Epoch, ...]:
    """The registry's "<epoch> <start ms> <replid>" entries, by epoch."""
    found = []
    for entry in entries:
        epoch, start, _ = codec.to_str(entry).split(" ", 2)
        found.append(Epoch(int(epoch), int(start)))
    return tuple(sorted(found, key=lambda e: e.epoch))


def replication_field(info: Any, field: str) -> str | None:
    """``field`` (``master_replid``, ``role``) from INFO replication's reply (text or
    redis-py's parsed dict)."""
    if isinstance(info, dict):
        value = info.get(field) or info.get(field.encode())
        return codec.to_str(value) if value else None
    for line in codec.to_str(info).splitlines():
        name, _, value = line.strip().partition(":")
        if name == field and value:
            return value
    return None


def kafka_leader_epoch_call(registry_key: str, replid: str, start_ms: int | None = None) -> tuple:
    """kafka/leader_epoch.lua: register the primary of replication id ``replid``
    (``start_ms``: its clock, when the registry is on another node)."""
    args: list[object] = [replid, EPOCH_BASE_S]
    if start_ms is not None:
        args.append(start_ms)
    return KAFKA_LEADER_EPOCH.command((registry_key,), args)


class LeaderEpochs:
    """The registry as this pod last read it: the current epoch (Metadata, ListOffsets), the
    epoch of a record by its append time (Fetch's batches) and where an epoch ended
    (OffsetForLeaderEpoch)."""

    def __init__(self, registry_key: str | None = None, cluster: Any = None) -> None:
        self.registry_key = registry_key  # None: no registry (a pod's parts alone)
        # a Cluster's client: nodes without the registry register through it (set once made)
        self.cluster = cluster
        self.history: tuple[Epoch, ...] = ()
        self._starts: list[int] = []
        self._warned = False  # (once per pod: every new connection would say it again)
        self._registering: set[asyncio.Task[None]] = set()

    def remember(self, history: tuple[Epoch, ...]) -> None:
        # a registry read back after a failover may have lost entries this pod saw: keep them
        known = {e.epoch: e for e in self.history}
        known.update({e.epoch: e for e in history})
        self.history = tuple(sorted(known.values(), key=lambda e: e.epoch))
        self._starts = [e.start_ms for e in self.history]

    @property
    def current(self) -> int:
        return self.history[-1].epoch if self.history else FIRST_EPOCH

    def epoch_at(self, append_ms: int) -> int:
        """The epoch of a record appended at ``append_ms``."""
        at = bisect_right(self._starts, append_ms) - 1
        return self.history[at].epoch if at >= 0 else FIRST_EPOCH

    def same_log(self, epoch: int) -> int:
        """The epoch whose end ``epoch``'s is: epoch 0 (the records of pods that kept no
        epochs, before the first registration) ends where the first registered one does,
        since a registry's creation is no failover (a rolling upgrade's pods would otherwise
        see a truncation at it)."""
        if self.history and FIRST_EPOCH <= epoch < self.history[0].epoch:
            return self.history[0].epoch
        return epoch

    def next_start(self, epoch: int) -> tuple[int, int] | None:
        """(the largest epoch at most ``epoch``, the start of the epoch after it) for an
        epoch before the current one; None for the current one or a later one."""
        if self.same_log(epoch) >= self.current:
            return None
        floor = FIRST_EPOCH if epoch < self.history[0].epoch else self.history[0].epoch
        for e in self.history[1:]:
            if e.epoch > epoch:
                return floor, e.start_ms
            floor = e.epoch
        return None

    async def on_connect(self, connection: AbstractConnection) -> None:
        """redis-py's connect hook: the connection's own set-up (AUTH, SELECT, ...), then the
        primary's registration. A Redis that refuses it (an ACL without INFO or EVAL) keeps
        the epochs as they were: a warning, never a refused connection.

        A connection to a replica registers nothing and is marked for reconnect, so it
        serves one command: kept open past the replica's promotion it would serve the new
        primary with no new epoch registered, a lossy failover read past in silence. A
        Cluster client reaches replicas so (CLUSTER SLOTS on any known node, also while a
        failed primary's replica is not yet promoted); set up anew after the promotion,
        the connection registers the new epoch before its first command there."""
        await connection.on_connect()
        if self.registry_key is None:
            return
        try:
            await connection.send_command("INFO", "replication")
            info = await connection.read_response()
            if replication_field(info, "role") == "slave":
                connection.mark_for_reconnect()
                return
            replid = replication_field(info, "master_replid")
            if replid is None:
                return
            # by its source: a connection's first script, before any pod loaded it there
            command = kafka_leader_epoch_call(self.registry_key, replid)
            await connection.send_command("EVAL", KAFKA_LEADER_EPOCH.source, *command[2:])
            entries = await connection.read_response()
        except RedisError as exc:
            if isinstance(exc, RedisConnectionError | RedisTimeoutError):
                raise
            entries = exc
        if _elsewhere(entries) and self.cluster is not None:
            # this node's clock now, read on it: its records from here on are at or after it
            await connection.send_command("TIME")
            seconds, micros = await connection.read_response()
            start_ms = int(seconds) * 1000 + int(micros) // 1000
            # not awaited: the cluster client may be setting up this very connection (its
            # slots refresh holds a lock its commands wait for)
            task = asyncio.ensure_future(self._register_through_cluster(replid, start_ms))
            self._registering.add(task)
            task.add_done_callback(self._registering.discard)
            return
        if isinstance(entries, RedisError):
            self._warn(entries)
            return
        self.remember(parse_registry(entries))

    async def _register_through_cluster(self, replid: str, start_ms: int) -> None:
        """A Cluster node without the registry, registered through the cluster client with
        the start its own clock gave."""
        assert self.registry_key is not None
        command = kafka_leader_epoch_call(self.registry_key, replid, start_ms)
        try:
            entries = await self.cluster.execute_command(
                "EVAL", KAFKA_LEADER_EPOCH.source, *command[2:]
            )
        except RedisError as exc:  # (the next connection to that node tries again)
            self._warn(exc)
            return
        self.remember(parse_registry(entries))

    def _warn(self, problem: object) -> None:
        if not self._warned:
            self._warned = True
            log.warning("Kafka leader epochs not kept (KIP-320): %s", problem)

    async def refresh(self, batcher: Any) -> None:
        """Read the registry again (OffsetForLeaderEpoch answers from Redis' own)."""
        if self.registry_key is None:
            return
        self.remember(parse_registry(await batcher.call("LRANGE", self.registry_key, 0, -1)))


def _elsewhere(reply: Any) -> bool:
    """Whether a Cluster node answered that the registry's slot is another node's."""
    return isinstance(reply, MovedError | AskError) or (
        isinstance(reply, ResponseError) and str(reply).startswith(("MOVED", "ASK"))
    )


async def epoch_end(
    partitions: Partitions, config: TopicConfig, partition: int, next_start_ms: int
) -> int:
    """Where a partition's epoch that the next one (started at ``next_start_ms``) follows
    ended: one past its last record appended before then; with none, its log start (0 when
    nothing was ever removed)."""
    pk = partitions.keys.partition(config.name, partition)
    bits = partitions.sequence_bits
    bound = codec.entry_id((next_start_ms << bits) - 1, bits)
    before, log_start = await asyncio.gather(
        partitions.batcher.call("XREVRANGE", pk.log, bound, "-", "COUNT", 1),
        partitions.batcher.call("HGET", pk.state, "log_start"),
    )
    if before:
        return codec.entry_offset(before[0][0], bits) + 1
    return int(log_start) if log_start is not None else 0
