"""Read-only views of a deployment's state for operators: topics with their partitions,
groups with members, assignment, committed offsets and lag. Synchronous (the CLI and the
metrics endpoint's scrape thread use it); works on a single Redis and on a cluster.

Group state layout (written by the group scripts, see mapping/lua/lib/group.lua): under
``Keys.group(g, t)`` the hashes ``meta`` (generation, assignor), ``members`` (consumer id ->
last heartbeat ms), ``assignment`` (consumer id -> "0 3 6") and ``offsets`` (partition ->
committed offset, the next one to read); ``Keys.groups`` lists "<group> <topic>" pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mapping.connection import scripts
from mapping.connection.cluster import SyncClient
from mapping.core import codec
from mapping.core.keys import Keys, PartitionKeys, parse_group_entry
from mapping.partition.partition_scripts import PartitionHead
from mapping.replication.durable_reads import WAIT_REPLICAS_FIELD, confirm_read_sync
from mapping.topic.topic_config import RETENTION_BYTES, RETENTION_IGNORE_GROUPS, RETENTION_MS
from mapping.topic.topics import read_settings_sync

# Lag is read from the record numbers partition/produce.lua writes in each entry: two entries
# per group partition, however long the backlog, and exact. Only entries written before
# records were numbered are counted one by one inside Redis, at most this many ("at least"
# beyond).
LAG_COUNT_CAP = 1000

PARTITION_LAG = scripts.load("partition/lag")


def partition_lag_call(head: PartitionHead, committed_id: str, count_cap: int) -> tuple:
    """partition/lag.lua from the committed position (an entry id), read-only."""
    return head.command(PARTITION_LAG, (), [committed_id, count_cap])


@dataclass(frozen=True, slots=True)
class Retention:
    ms: int = -1  # records older than this are trimmed (-1: kept forever)
    bytes: int = -1  # the log is trimmed to about this many bytes (-1: no limit)
    ignore_groups: bool = False  # True: trim even records a group has not committed yet

    @property
    def enabled(self) -> bool:
        return self.ms >= 0 or self.bytes >= 0

    def describe(self) -> str:
        return (
            f"retention_ms={self.ms} retention_bytes={self.bytes} "
            f"retention_ignore_groups={str(self.ignore_groups).lower()}"
        )


def retention_of(fields: dict) -> Retention:
    """The retention settings stored in a topic hash (bytes or str keys)."""

    def get(name: str, default: str) -> str:
        value = fields.get(name, fields.get(name.encode(), default))
        return codec.to_str(value)

    return Retention(
        ms=int(get(RETENTION_MS, "-1")),
        bytes=int(get(RETENTION_BYTES, "-1")),
        # "1" from the command line, "true" from Kafka's admin APIs
        ignore_groups=get(RETENTION_IGNORE_GROUPS, "0") in ("1", "true"),
    )


# The state fields Kafka's log end offset is read from (log_end there is the last offset)
END_FIELDS = ("hw", "log_end", "durable_hw", "log_start")


def reader_bound(state: list, durable: bool) -> tuple[int, int, int | None]:
    """(hw as readers see it before ``reachable``, last offset, log start) from the state
    fields ``END_FIELDS``: with the pods' --redis-wait-replicas (``durable``) at most
    durable_hw, as partition/status.lua's readable_hw."""
    hw, last, mark, start = (None if v is None else int(codec.to_str(v)) for v in state)
    bound = -1 if hw is None else hw
    if durable:
        bound = min(bound, -1 if mark is None else mark)
    return bound, -1 if last is None else last, start


def needs_entry(bound: int, last_offset: int) -> bool:
    """Whether the bound is reported as the last entry at or below it (lib/partition.lua
    reachable): hw is an entry whenever it is the log end, an ISR member's acked offset
    need not be."""
    return 0 <= bound < last_offset


def log_end_offset(bound: int, log_start: int | None, before: list | None, bits: int) -> int:
    """Kafka's log end offset (exclusive, its high watermark: what ListOffsets latest
    answers under read_uncommitted, 0 for an empty partition): one past the last entry at or
    below ``bound`` (``before``: XREVRANGE's reply from it, COUNT 1; None when
    ``needs_entry`` is False), as partition/status.lua's reader_bounds reports it."""
    if before is None or bound < 0:
        return bound + 1
    if before:
        return codec.offset_of(before[0][0], bits) + 1
    if log_start is not None and log_start - 1 < bound:
        return log_start
    return 0


def durable_reads_sync(client: SyncClient, keys: Keys) -> bool:
    """Whether the pods bound readers by durable_hw (they store --redis-wait-replicas)."""
    stored = client.hget(keys.meta, WAIT_REPLICAS_FIELD)
    return stored is not None and int(stored) > 0


def log_end_offset_sync(client: SyncClient, pk: PartitionKeys, bits: int, durable: bool) -> int:
    """``log_end_offset`` of one partition, read-only."""
    bound, last, start = reader_bound(client.hmget(pk.state, END_FIELDS), durable)
    before = None
    if needs_entry(bound, last):
        before = client.xrevrange(pk.log, codec.entry_id(bound, bits), "-", count=1)
    return log_end_offset(bound, start, before, bits)


@dataclass(frozen=True, slots=True)
class PartitionView:
    partition: int
    role: str
    last_offset: int  # the last record's offset (V1 inclusive); -1: nothing written
    log_end_offset: int  # Kafka's (exclusive), as ListOffsets latest answers: log_end_offset()
    high_watermark: int
    isr: list[int]
    acked: dict[int, int]  # follower replica -> acked offset
    records: int  # entries in the log now (after retention)
    first_offset: int  # -1: empty
    dirty: int = 0  # superseded records still in the log (compacted topics)
    compacted: int = 0  # records compaction has removed
    # the offset up to which compaction's index covers the log (-1: none of it, or the topic
    # is not compacted); below last_offset: the index cursor has records to index
    indexed: int = -1


@dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    retention: Retention
    partition_views: list[PartitionView] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MemberView:
    consumer_id: str
    last_heartbeat_ms: int
    partitions: list[int]


@dataclass(frozen=True, slots=True)
class GroupPartitionView:
    partition: int
    committed: int | None  # None: nothing committed (a consumer starts from 0)
    high_watermark: int
    lag: int  # records from the committed position to hw (see LAG_COUNT_CAP)
    owner: str | None
    lag_is_exact: bool = True  # False: at least ``lag`` (old entries counted up to the cap)


@dataclass(frozen=True, slots=True)
class GroupView:
    group: str
    topic: str
    generation: int
    assignor: str
    members: list[MemberView]
    partitions: list[GroupPartitionView]


def _hash(client: SyncClient, key: str) -> dict[str, str]:
    return {codec.to_str(k): codec.to_str(v) for k, v in client.hgetall(key).items()}


def sequence_bits(client: SyncClient, keys: Keys) -> int:
    stored = client.hget(keys.meta, "sequence_bits")
    return int(stored) if stored is not None else codec.DEFAULT_SEQUENCE_BITS


def topic_names(client: SyncClient, keys: Keys) -> list[str]:
    return sorted(codec.to_str(n) for n in client.smembers(keys.topics))


def topic(client: SyncClient, keys: Keys, name: str) -> TopicView | None:
    settings = read_settings_sync(client, keys, name)
    if not settings:
        return None
    partitions = int(settings["partitions"])
    rf = int(settings["replication_factor"])
    bits = sequence_bits(client, keys)
    durable = durable_reads_sync(client, keys)
    views = []
    for p in range(partitions):
        pk = keys.partition(name, p)
        state = _hash(client, pk.state)
        first = client.xrange(pk.log, count=1)
        views.append(
            PartitionView(
                partition=p,
                role=state.get("role", "leader"),
                last_offset=int(state.get("log_end", -1)),
                log_end_offset=log_end_offset_sync(client, pk, bits, durable),
                high_watermark=int(state.get("hw", -1)),
                isr=[int(r) for r in state.get("isr", " ".join(map(str, range(rf)))).split()],
                acked={r: int(state.get(f"replica.{r}.acked_offset", -1)) for r in range(1, rf)},
                records=int(client.xlen(pk.log)),
                first_offset=codec.offset_of(first[0][0], bits) if first else -1,
                dirty=int(client.zcard(pk.compact_dirty)),
                compacted=int(state.get("compacted", 0)),
                indexed=int(state.get("compact.indexed", -1)),
            )
        )
    return TopicView(
        name=name,
        partitions=partitions,
        replication_factor=rf,
        min_insync_replicas=int(settings["min_insync_replicas"]),
        retention=retention_of(settings),
        partition_views=views,
    )


def group_pairs(client: SyncClient, keys: Keys) -> list[tuple[str, str]]:
    """Every (group, topic) the groups set knows, sorted."""
    pairs = []
    for raw in client.smembers(keys.groups):
        pair = parse_group_entry(raw)  # the group id as written, whatever its characters
        if pair is not None:
            pairs.append(pair)
    return sorted(pairs)


def committed_offsets(client: SyncClient, keys: Keys, group: str, topic_name: str) -> dict:
    """The group's committed offsets on the topic, once the Redis replicas have them when
    the pods wait for replicas (mapping/replication/durable_reads.py)."""
    key = keys.group(group, topic_name).offsets
    raw = client.hgetall(key)
    confirm_read_sync(client, keys, [key])
    return {int(codec.to_str(p)): int(codec.to_str(o)) for p, o in raw.items()}


def _lag(
    client: SyncClient, keys: Keys, topic_name: str, p: int, start: int, bits: int
) -> tuple[int, int, bool]:
    """(hw, lag, whether the lag is exact) of one group partition (partition/lag.lua)."""
    # the replication factor and lag bound are not read: 1 and 0
    head = PartitionHead(keys.partition(topic_name, p), bits, 1, 0)
    command = partition_lag_call(head, codec.entry_id(max(start, 0), bits), LAG_COUNT_CAP)
    reply = scripts.call_sync(client, command)
    return int(reply[0]), int(reply[1]), bool(int(reply[3]))


def group(client: SyncClient, keys: Keys, group_name: str, topic_name: str) -> GroupView | None:
    gk = keys.group(group_name, topic_name)
    meta = _hash(client, gk.meta)
    offsets = committed_offsets(client, keys, group_name, topic_name)
    if not meta and not offsets:
        return None
    members_raw = _hash(client, gk.members)
    assignment = {
        member: [int(p) for p in parts.split()]
        for member, parts in _hash(client, gk.assignment).items()
    }
    owners = {p: member for member, parts in assignment.items() for p in parts}
    partitions = read_settings_sync(client, keys, topic_name).get("partitions")
    count = int(partitions) if partitions is not None else int(meta.get("partitions", 0))
    bits = sequence_bits(client, keys)
    views = []
    for p in range(count):
        committed = offsets.get(p)
        hw, lag, exact = _lag(client, keys, topic_name, p, committed or 0, bits)
        views.append(GroupPartitionView(p, committed, hw, lag, owners.get(p), exact))
    return GroupView(
        group=group_name,
        topic=topic_name,
        generation=int(meta.get("generation", 0)),
        assignor=meta.get("assignor", "round_robin"),
        members=[
            MemberView(m, int(float(hb)), assignment.get(m, []))
            for m, hb in sorted(members_raw.items())
        ],
        partitions=views,
    )
