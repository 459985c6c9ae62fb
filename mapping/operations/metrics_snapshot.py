"""One read of a whole deployment for a metrics scrape: every partition's offsets and
replication, every group's committed offsets and lag in records, the groups' live members and
the live Kafka brokers. Synchronous (the metrics endpoint's scrape thread); works on a single
Redis and on a cluster.

Its round trips do not grow with the number of groups: the reads go in pipelines of
``PIPELINE_CHUNK`` commands (on a cluster the scripts go one call each: redis-py queues no
EVALSHA in a cluster pipeline). The lag is ``partition/lag.lua``'s, as ``adapter inspect``
reads it (two entries per read, however long the backlog), read once per distinct
(partition, start position) below the high watermark: a group at the end of the log costs no
read, and the groups that never committed on a partition share one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mapping.connection import scripts
from mapping.connection.cluster import SyncClient
from mapping.core import codec
from mapping.core.keys import Keys, group_name
from mapping.group.groups import kafka_group_live_call
from mapping.kafka_group.base import kafka_group_v1_live_call
from mapping.operations.inspection import (
    LAG_COUNT_CAP,
    group_pairs,
    partition_lag_call,
    sequence_bits,
    topic_names,
)
from mapping.partition.kafka import kafka_log_start
from mapping.partition.partition_scripts import PartitionHead
from mapping.replication.durable_reads import confirm_read_sync
from mapping.topic.brokers import kafka_brokers_call, live_brokers, partition_replicas
from mapping.topic.topic_config import TopicConfig

# Commands per pipeline: Redis answers other clients between two chunks.
PIPELINE_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    high_watermark: int  # V1's, inclusive (-1: empty)
    log_start: int  # Kafka's log start offset: the first offset still in the log
    isr_size: int  # the modelled in-sync replicas, as last recorded (leader included)
    replicas: int  # the topic's replication factor (leader included)
    dirty: int | None  # superseded records still in the log; None: no compaction index

    @property
    def log_end(self) -> int:
        """Kafka's high watermark (exclusive): V1 hw + 1, 0 for an empty partition."""
        return self.high_watermark + 1


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: nothing committed (a V1 consumer starts from 0)
    lag: int  # records from the committed position (or 0) to the high watermark
    exact: bool  # False: at least ``lag`` (old unnumbered entries, see LAG_COUNT_CAP)


@dataclass(frozen=True, slots=True)
class DeploymentSnapshot:
    brokers: list[tuple[int, str, int]]  # (node id, host, port) of the live Kafka brokers
    partition_counts: dict[str, int]  # topic -> partitions
    partitions: list[PartitionState]
    lags: list[GroupLag]  # every partition of every (group, topic) whose topic exists
    members: dict[str, int]  # group -> live members (Kafka's of either protocol, and V1's)
    # explicit replica assignments: (topic, partition) -> broker ids (TopicConfig's)
    assigned: dict[tuple[str, int], list[int]] = field(default_factory=dict)

    def leader(self, topic: str, partition: int) -> int | None:
        """The node id Metadata names as the partition's leader (None: no live broker)."""
        if not self.brokers:
            return None
        named = self.assigned.get((topic, partition))
        _, in_sync = partition_replicas(self.brokers, topic, partition, 1, named)
        return in_sync[0]

    def leader_is_preferred(self, topic: str, partition: int) -> bool:
        """Whether Metadata's leader is the first of the partition's replicas."""
        named = self.assigned.get((topic, partition))
        return not named or self.leader(topic, partition) == named[0]


def read(client: SyncClient, keys: Keys, v1_session_timeout_ms: int) -> DeploymentSnapshot:
    """The deployment under ``keys`` now (V1 members are live for ``v1_session_timeout_ms``
    after their last heartbeat, as the pods count them)."""
    bits = sequence_bits(client, keys)
    brokers = live_brokers(scripts.call_sync(client, kafka_brokers_call(keys.kafka_brokers)))
    counts, factors, assigned = _topics(client, keys)
    partitions = _partitions(client, keys, counts, factors, bits)
    hw = {(p.topic, p.partition): p.high_watermark for p in partitions}
    lags, members = _groups(client, keys, counts, hw, bits, v1_session_timeout_ms)
    return DeploymentSnapshot(brokers, counts, partitions, lags, members, assigned)


def _topics(
    client: SyncClient, keys: Keys
) -> tuple[dict[str, int], dict[str, int], dict[tuple[str, int], list[int]]]:
    """Every topic's partition count, replication factor and explicit replica assignments."""
    names = topic_names(client, keys)
    counts: dict[str, int] = {}
    factors: dict[str, int] = {}
    assigned: dict[tuple[str, int], list[int]] = {}
    settings_of = _many(client, [("HGETALL", keys.topic(name)) for name in names])
    for name, fields in zip(names, settings_of, strict=True):
        settings = {codec.to_str(k): codec.to_str(v) for k, v in fields.items()}
        if "partitions" in settings:  # else deleted since the topics set was read
            counts[name] = int(settings["partitions"])
            factors[name] = int(settings.get("replication_factor", 1))
            overrides = tuple(settings.items())
            for partition, brokers in (
                TopicConfig(name, 0, 0, 0, overrides=overrides).replica_assignment().items()
            ):
                assigned[(name, partition)] = brokers
    return counts, factors, assigned


def _many(client: SyncClient, commands: list[tuple]) -> list[Any]:
    replies: list[Any] = []
    for start in range(0, len(commands), PIPELINE_CHUNK):
        replies += scripts.call_many_sync(client, commands[start : start + PIPELINE_CHUNK])
    return replies


def _partitions(
    client: SyncClient, keys: Keys, counts: dict[str, int], factors: dict[str, int], bits: int
) -> list[PartitionState]:
    where = [(name, p) for name, count in counts.items() for p in range(count)]
    commands = []
    for name, p in where:
        pk = keys.partition(name, p)
        commands += [
            ("HMGET", pk.state, "hw", "isr", "log_start"),
            ("XRANGE", pk.log, "-", "+", "COUNT", 1),
            ("EXISTS", pk.compact_index),
            ("ZCARD", pk.compact_dirty),
        ]
    replies = _many(client, commands)
    found = []
    for i, (name, p) in enumerate(where):
        (hw_raw, isr_raw, log_start), first, indexed, dirty = replies[4 * i : 4 * i + 4]
        hw = int(hw_raw) if hw_raw is not None else -1
        # no ISR recorded yet (nothing appended): every replica counts, as `inspect` shows it
        isr = codec.to_str(isr_raw).split() if isr_raw is not None else range(factors[name])
        found.append(
            PartitionState(
                topic=name,
                partition=p,
                high_watermark=hw,
                log_start=kafka_log_start(first, log_start, hw + 1, bits),
                isr_size=len(isr),
                replicas=factors[name],
                dirty=int(dirty) if indexed else None,
            )
        )
    return found


def _groups(
    client: SyncClient,
    keys: Keys,
    counts: dict[str, int],
    hw: dict[tuple[str, int], int],
    bits: int,
    v1_session_timeout_ms: int,
) -> tuple[list[GroupLag], dict[str, int]]:
    pairs = group_pairs(client, keys)
    kafka_groups = sorted(group_name(part) for part in client.smembers(keys.kafka_groups))
    commands: list[tuple] = []
    for group, topic in pairs:
        group_keys = keys.group(group, topic)
        commands += [
            ("HGETALL", group_keys.offsets),
            kafka_group_v1_live_call(group_keys.members, v1_session_timeout_ms),
        ]
    commands += [kafka_group_live_call(keys.kafka_group(group)) for group in kafka_groups]
    replies = _many(client, commands)
    # no committed offset (nor a lag from it) is shown before the Redis replicas have it
    confirm_read_sync(client, keys, [keys.group(g, t).offsets for g, t in pairs])
    members = dict.fromkeys(kafka_groups, 0)
    for group, live in zip(kafka_groups, replies[2 * len(pairs) :], strict=True):
        members[group] += int(live)
    wanted: list[tuple[str, str, int, int | None]] = []  # (group, topic, partition, committed)
    for i, (group, topic) in enumerate(pairs):
        members[group] = members.get(group, 0) + int(replies[2 * i + 1])
        if topic not in counts:  # deleted with its groups since the pairs were read
            continue
        committed = {int(p): int(o) for p, o in replies[2 * i].items()}
        wanted += [(group, topic, p, committed.get(p)) for p in range(counts[topic])]
    lags = _lags(client, keys, wanted, hw, bits)
    found = [GroupLag(g, t, p, c, *lags[(t, p, _start(c))]) for g, t, p, c in wanted]
    return found, members


def _start(committed: int | None) -> int:
    return max(committed or 0, 0)


def _lags(
    client: SyncClient,
    keys: Keys,
    wanted: list[tuple[str, str, int, int | None]],
    hw: dict[tuple[str, int], int],
    bits: int,
) -> dict[tuple[str, int, int], tuple[int, bool]]:
    """(lag, exact) by (topic, partition, start position): one partition/lag.lua call per
    distinct start at or below the partition's high watermark."""
    found: dict[tuple[str, int, int], tuple[int, bool]] = {}
    reads = []
    for _, topic, p, committed in wanted:
        where = (topic, p, _start(committed))
        if where in found:
            continue
        found[where] = (0, True)  # past the high watermark: nothing to read
        if where[2] <= hw[(topic, p)]:
            reads.append(where)
    commands = []
    for topic, p, start in reads:
        # the replication factor and lag bound are not read: 1 and 0
        head = PartitionHead(keys.partition(topic, p), bits, 1, 0)
        commands.append(partition_lag_call(head, codec.entry_id(start, bits), LAG_COUNT_CAP))
    for where, reply in zip(reads, _many(client, commands), strict=True):
        found[where] = (int(reply[1]), bool(int(reply[3])))
    return found
