"""Positions in a topic's partitions, resolved against Redis on the driver.

A *position* is the next offset to read (Kafka semantics); a range ``[start, end)`` of positions
holds the records with ``start <= offset < end``. Offsets are ``(ms << B) | seq`` and have
gaps, so records are always counted with ``XRANGE ... COUNT``, never by subtracting offsets.
The end of what a consumer may see is ``hw + 1`` (hw inclusive, -1 when nothing is committed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import redis
from pyspark.sql.datasource import InputPartition

from mapping import codec
from mapping.cluster import connect_sync, credentials, redact
from mapping.keys import Keys
from spark_connector.options import (
    KAFKA_EARLIEST,
    KAFKA_LATEST,
    DataLoss,
    Earliest,
    GroupOffsets,
    Latest,
    OffsetSpec,
    OptionError,
    PerPartition,
    RedisUnreachable,
    SourceOptions,
    TopicNotFound,
)

Positions = dict[int, int]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    partitions: int
    sequence_bits: int


class RangePartition(InputPartition):
    """One Spark task: the records of one topic partition in ``[start, end)``.

    Carries only numbers, so it pickles small; the executor opens its own Redis connection.
    """

    def __init__(self, partition: int, start: int, end: int, sequence_bits: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end
        self.sequence_bits = sequence_bits

    def __repr__(self) -> str:
        return f"RangePartition(partition={self.partition}, start={self.start}, end={self.end})"


def client_for(opts: SourceOptions) -> redis.Redis:
    """A synchronous client with the source's timeouts (not yet connected)."""
    return connect_sync(  # a cluster client for redis+cluster://, Sentinel's for redis+sentinel://
        opts.redis_url,
        socket_timeout=opts.timeout_s,
        socket_connect_timeout=opts.timeout_s,
        decode_responses=False,
        **credentials(
            username=opts.redis_username,
            password=opts.redis_password,
            sentinel_username=opts.redis_sentinel_username,
            sentinel_password=opts.redis_sentinel_password,
        ),
    )


def connect(opts: SourceOptions) -> redis.Redis:
    """A synchronous client, checked with PING so an unreachable Redis fails right here."""
    client = client_for(opts)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        client.close()
        raise RedisUnreachable(f"cannot reach Redis at {redact(opts.redis_url)}: {exc}") from None
    return client


def describe_topic(client: redis.Redis, keys: Keys, topic: str) -> TopicInfo:
    pipe = client.pipeline(transaction=False)
    pipe.hget(keys.topic(topic), "partitions")
    pipe.hget(keys.meta, "sequence_bits")
    partitions, bits = pipe.execute()
    if partitions is None:
        raise TopicNotFound(
            f"topic {topic!r} does not exist (no hash {keys.topic(topic)} in Redis; "
            f"check the topic name and the keyPrefix option, now {keys.prefix!r})"
        )
    # No pod has pinned the bits yet: the deployment default is what produce would use.
    sequence_bits = int(bits) if bits is not None else codec.DEFAULT_SEQUENCE_BITS
    return TopicInfo(int(partitions), codec.check_sequence_bits(sequence_bits))


def end_positions(
    client: redis.Redis, keys: Keys, topic: str, partitions: int, durable: bool = False
) -> Positions:
    """``hw + 1`` per partition from the stored hw, which never exceeds the true hw, and
    at most the last stable offset (the first offset of the oldest open transaction: the
    state's ``txn_first``, mapping/partition_txns.py), so a read never passes a record whose
    transaction may still abort. ``durable`` (option durableReads): at most
    ``durable_hw + 1``, what the Redis replicas have (mapping/durable.py)."""
    pipe = client.pipeline(transaction=False)
    for p in range(partitions):
        pipe.hmget(keys.partition(topic, p).state, "hw", "durable_hw", "txn_first")
    ends: Positions = {}
    for p, (hw, mark, txn_first) in enumerate(pipe.execute()):
        end = max(int(hw), -1) + 1 if hw is not None else 0
        if durable:
            end = min(end, max(int(mark), -1) + 1 if mark is not None else 0)
        if txn_first is not None:
            end = min(end, int(txn_first))
        ends[p] = end
    return ends


def log_starts(client: redis.Redis, keys: Keys, topic: str, partitions: int) -> Positions:
    """Per partition, one past the last record retention removed (0: none removed; see
    partition/retention_trim.lua): a read starting below it lost records."""
    pipe = client.pipeline(transaction=False)
    for p in range(partitions):
        pipe.hget(keys.partition(topic, p).state, "log_start")
    return {p: int(first or 0) for p, first in enumerate(pipe.execute())}


def data_loss_message(topic: str, partition: int, position: int, log_start: int) -> str:
    return (
        f"records of topic {topic!r} partition {partition} from offset {position} up to "
        f"{log_start} were removed by retention before this query read them: some data was "
        f"lost (the log now starts at {log_start}). Set the source option "
        "failOnDataLoss=false to go on from the log start instead of failing"
    )


def check_data_loss(
    opts: SourceOptions, starts: Positions, ends: Positions, firsts: Positions
) -> Positions:
    """``starts``, where a range ``[start, end)`` with data to read begins below its log
    start: ``DataLoss``, or with ``failOnDataLoss=false`` the log start (a warning says so)."""
    checked = dict(starts)
    for p, start in starts.items():
        first = firsts.get(p, 0)
        if start >= first or ends.get(p, 0) <= start:
            continue
        message = data_loss_message(opts.topic, p, start, first)
        if opts.fail_on_data_loss:
            raise DataLoss(message)
        log.warning("%s; going on from offset %d (failOnDataLoss=false)", message, first)
        checked[p] = first
    return checked


def group_positions(
    client: redis.Redis, keys: Keys, group: str, topic: str, partitions: int
) -> Positions:
    """A group's committed offsets: the next offset to read, 0 (beginning) when absent."""
    raw = client.hgetall(keys.group(group, topic).offsets)
    committed = {int(field): max(int(value), 0) for field, value in raw.items()}
    return {p: committed.get(p, 0) for p in range(partitions)}


def _check_partitions(spec: PerPartition, partitions: int, option: str) -> None:
    outside = [p for p in spec.as_dict() if p >= partitions]
    if outside:
        raise OptionError(
            f"option {option} names partition(s) {outside} but the topic has {partitions}"
        )


def resolve_start(
    spec: OffsetSpec,
    ends: Positions,
    group_lookup: Callable[[str], Positions],
    firsts: Positions | None = None,
) -> Positions:
    """Start positions; ``ends`` are the current ``hw + 1`` per partition, ``firsts`` the log
    starts (`log_starts`; earliest means there, so retention is not data loss for it)."""
    firsts = firsts or {}
    if isinstance(spec, Earliest):
        return {p: firsts.get(p, 0) for p in ends}
    if isinstance(spec, Latest):
        return dict(ends)
    if isinstance(spec, GroupOffsets):
        return group_lookup(spec.group)
    _check_partitions(spec, len(ends), "startingOffsets")
    given = spec.as_dict()
    positions: Positions = {}
    for p, end in ends.items():
        offset = given.get(p, KAFKA_EARLIEST)
        if offset == KAFKA_EARLIEST:
            offset = firsts.get(p, 0)
        positions[p] = end if offset == KAFKA_LATEST else offset
    return positions


def resolve_end(spec: OffsetSpec, ends: Positions) -> Positions:
    """End positions for a batch query, never past ``hw + 1``."""
    if isinstance(spec, Latest):
        return dict(ends)
    assert isinstance(spec, PerPartition)
    _check_partitions(spec, len(ends), "endingOffsets")
    given = spec.as_dict()
    return {
        p: end if given.get(p, KAFKA_LATEST) == KAFKA_LATEST else min(given[p], end)
        for p, end in ends.items()
    }


def advance(
    client: redis.Redis, log: str, start: int, end: int, count: int, bits: int, page: int
) -> tuple[int, int]:
    """The position after the ``count``-th record in ``[start, end)`` and how many were found.

    When fewer than ``count`` records exist, the position is ``end``.
    """
    found = 0
    position = start
    while found < count and position < end:
        entries = client.xrange(
            log,
            codec.entry_id(position, bits),
            codec.entry_id(end - 1, bits),
            count=min(page, count - found),
        )
        if not entries:
            break
        found += len(entries)
        position = codec.offset_of(entries[-1][0], bits) + 1
    return (position if found == count else end), found


def split_range(
    client: redis.Redis, log: str, start: int, end: int, max_records: int, bits: int, page: int
) -> list[tuple[int, int]]:
    """``[start, end)`` cut into runs of at most ``max_records`` records; empty when none.

    A log no longer than ``max_records`` needs no counting at all (XLEN is O(1)).
    """
    if end <= start:
        return []
    if client.xlen(log) <= max_records:
        return [(start, end)]
    ranges: list[tuple[int, int]] = []
    position = start
    while position < end:
        after, found = advance(client, log, position, end, max_records, bits, page)
        if found == 0:
            break
        ranges.append((position, after))
        position = after
    return ranges


def limit_ends(
    client: redis.Redis,
    keys: Keys,
    topic: str,
    starts: Positions,
    ends: Positions,
    budget: int,
    bits: int,
    page: int,
) -> Positions:
    """Ends that admit at most ``budget`` records in total, shared fairly by the partitions
    that have data; a partition with fewer records than its share passes the rest on."""
    limited = {p: starts[p] for p in ends}
    active = sorted(p for p in ends if ends[p] > starts[p])
    while budget > 0 and active:
        share, extra = divmod(budget, len(active))
        still_active: list[int] = []
        for i, p in enumerate(active):
            quota = share + (1 if i < extra else 0)
            if quota == 0:
                still_active.append(p)
                continue
            log = keys.partition(topic, p).log
            after, found = advance(client, log, limited[p], ends[p], quota, bits, page)
            limited[p] = after
            budget -= found
            if found == quota and after < ends[p]:
                still_active.append(p)
        # Each round spends budget or drops a partition that ran dry, so this terminates.
        active = still_active
    return limited


def to_json(positions: Mapping[int, int]) -> dict[str, int]:
    """Streaming offsets as Spark checkpoints them: ``{"<partition>": <next offset>}``."""
    return {str(p): int(o) for p, o in sorted(positions.items())}


def from_json(offsets: Mapping[str, int], partitions: int) -> Positions:
    parsed = {int(p): int(o) for p, o in offsets.items()}
    return {p: parsed.get(p, 0) for p in range(partitions)}
