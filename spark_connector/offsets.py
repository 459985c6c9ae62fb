"""Positions in the subscribed topics' partitions, resolved against Redis on the driver.

A *position* is the next offset to read (Kafka semantics); a range ``[start, end)`` of positions
holds the records with ``start <= offset < end``. Offsets are ``(ms << B) | seq`` and have
gaps, so records are never counted by subtracting offsets (planning.py counts them). The end
of what a consumer may see is ``hw + 1`` (hw inclusive, -1 when nothing is committed), and at
most the last stable offset. Positions are keyed by (topic, partition); streaming offsets
are Spark's Kafka source's JSON, ``{"<topic>": {"<partition>": <next offset>}}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis
from pyspark.sql.datasource import InputPartition

from mapping.connection.cluster import connect_sync, credentials, redact
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.replication.durable_reads import confirm_read_sync
from spark_connector.errors import (
    DataLoss,
    RedisPermissionDenied,
    RedisUnreachable,
    TopicNotFound,
)
from spark_connector.offset_specs import TopicPartition
from spark_connector.options import SourceOptions
from spark_connector.subscription import Subscription, TopicNames

# Per topic partition; PartitionPositions: one topic's, by partition.
Positions = dict[TopicPartition, int]
PartitionPositions = dict[int, int]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    partitions: int
    sequence_bits: int


class RangePartition(InputPartition):
    """One Spark task: the records of one topic partition in ``[start, end)``.

    Carries only numbers and the topic's name, so it pickles small; the executor opens its own
    Redis connection. ``topic`` None: the options' one topic.
    """

    def __init__(
        self, partition: int, start: int, end: int, sequence_bits: int, topic: str | None = None
    ) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.sequence_bits = sequence_bits

    def __repr__(self) -> str:
        return (
            f"RangePartition(topic={self.topic!r}, partition={self.partition}, "
            f"start={self.start}, end={self.end})"
        )


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


def permission_message(opts: SourceOptions, exc: redis.RedisError) -> str:
    """What a NOPERM means for a job: the user's ACL rule does not cover this keyPrefix (or
    a command the connector sends). Names the user and prefix, never the password."""
    user = opts.redis_username or urlsplit(opts.redis_url).username or "default"
    prefix = opts.key_prefix
    return (
        f"Redis refused the connector's ACL user {user!r} on keyPrefix {prefix!r} "
        f"(NOPERM: {exc}). A Redis user confined to one deployment reaches only that "
        f"deployment's keys: check the keyPrefix option and the user's rule (`python -m "
        f"spark_connector.redis_acl --key-prefix {prefix}` prints the one it needs)"
    )


@contextmanager
def permission_checked(opts: SourceOptions) -> Iterator[None]:
    """Turns Redis' NOPERM into ``RedisPermissionDenied`` with ``permission_message``."""
    try:
        yield
    except redis.exceptions.NoPermissionError as exc:
        raise RedisPermissionDenied(permission_message(opts, exc)) from None


def _missing(keys: Keys, topic: str) -> TopicNotFound:
    return TopicNotFound(
        f"topic {topic!r} does not exist (no hash {keys.topic(topic)} in Redis; "
        f"check the topic name and the keyPrefix option, now {keys.prefix!r})"
    )


def _sequence_bits(stored: bytes | None) -> int:
    # No pod has pinned the bits yet: the deployment default is what produce would use.
    return codec.check_sequence_bits(
        int(stored) if stored is not None else codec.DEFAULT_SEQUENCE_BITS
    )


def sequence_bits(client: redis.Redis, keys: Keys) -> int:
    """The deployment's sequence bits (one value for every topic)."""
    return _sequence_bits(client.hget(keys.meta, "sequence_bits"))


def describe_topics(
    client: redis.Redis, keys: Keys, subscription: Subscription, *, require_all: bool = True
) -> dict[str, TopicInfo]:
    """The subscribed topics that exist, by name. ``require_all``: a named topic that does
    not exist is ``TopicNotFound`` (else it is left out: deleted while a query runs)."""
    if isinstance(subscription, TopicNames):
        names = list(subscription.names)
    else:
        names = subscription.matching(codec.to_str(n) for n in client.smembers(keys.topics))
    pipe = client.pipeline(transaction=False)
    pipe.hget(keys.meta, "sequence_bits")
    for name in names:
        pipe.hget(keys.topic(name), "partitions")
    bits, *counts = pipe.execute()
    sequence_bits = _sequence_bits(bits)
    found: dict[str, TopicInfo] = {}
    for name, count in zip(names, counts, strict=True):
        if count is not None:
            found[name] = TopicInfo(int(count), sequence_bits)
        elif require_all and isinstance(subscription, TopicNames):
            raise _missing(keys, name)
    return found


def describe_topic(client: redis.Redis, keys: Keys, topic: str) -> TopicInfo:
    return describe_topics(client, keys, TopicNames((topic,)))[topic]


def topic_partitions(topics: Mapping[str, TopicInfo]) -> list[TopicPartition]:
    return [(name, p) for name in sorted(topics) for p in range(topics[name].partitions)]


def _end_of(hw: Any, mark: Any, txn_first: Any, durable: bool) -> int:
    """``hw + 1`` from the stored hw, which never exceeds the true hw, and at most the last
    stable offset (the first offset of the oldest open transaction: the state's
    ``txn_first``, mapping/partition/partition_txns.py), so a read never passes a record whose
    transaction may still abort. ``durable`` (option durableReads): at most
    ``durable_hw + 1``, what the Redis replicas have (mapping/replication/durable.py)."""
    end = max(int(hw), -1) + 1 if hw is not None else 0
    if durable:
        end = min(end, max(int(mark), -1) + 1 if mark is not None else 0)
    if txn_first is not None:
        end = min(end, int(txn_first))
    return end


def bounds(
    client: redis.Redis, keys: Keys, partitions: Iterable[TopicPartition], durable: bool = False
) -> tuple[Positions, Positions]:
    """(ends, log starts) of ``partitions``: the end of what may be read (``_end_of``) and one
    past the last record retention removed (0: none removed; see partition/retention_trim.lua):
    a read starting below it lost records."""
    wanted = list(partitions)
    pipe = client.pipeline(transaction=False)
    for topic, p in wanted:
        pipe.hmget(keys.partition(topic, p).state, "hw", "durable_hw", "txn_first", "log_start")
    ends: Positions = {}
    firsts: Positions = {}
    for tp, (hw, mark, txn_first, first) in zip(wanted, pipe.execute(), strict=True):
        ends[tp] = _end_of(hw, mark, txn_first, durable)
        firsts[tp] = int(first or 0)
    return ends, firsts


def end_positions(
    client: redis.Redis, keys: Keys, topic: str, partitions: int, durable: bool = False
) -> PartitionPositions:
    """One topic's ends by partition (see ``bounds``)."""
    ends, _ = bounds(client, keys, ((topic, p) for p in range(partitions)), durable)
    return {p: end for (_, p), end in ends.items()}


def log_starts(client: redis.Redis, keys: Keys, topic: str, partitions: int) -> PartitionPositions:
    """One topic's log starts by partition (see ``bounds``)."""
    _, firsts = bounds(client, keys, ((topic, p) for p in range(partitions)))
    return {p: first for (_, p), first in firsts.items()}


def group_positions(
    client: redis.Redis, keys: Keys, group: str, topic: str, partitions: int
) -> PartitionPositions:
    """A group's committed offsets: the next offset to read, 0 (beginning) when absent;
    read once the Redis replicas have them when the pods wait for replicas (a failover must
    not take back the offsets a query started from)."""
    key = keys.group(group, topic).offsets
    raw = client.hgetall(key)
    confirm_read_sync(client, keys, [key])
    committed = {int(field): max(int(value), 0) for field, value in raw.items()}
    return {p: committed.get(p, 0) for p in range(partitions)}


def data_loss_message(topic: str, partition: int, position: int, log_start: int) -> str:
    return (
        f"records of topic {topic!r} partition {partition} from offset {position} up to "
        f"{log_start} were removed by retention before this query read them: some data was "
        f"lost (the log now starts at {log_start}). Set the source option "
        "failOnDataLoss=false to go on from the log start instead of failing"
    )


def report_data_loss(opts: SourceOptions, message: str, going_on: str) -> None:
    """``DataLoss``, or with ``failOnDataLoss=false`` a warning (Spark's reportDataLoss)."""
    if opts.fail_on_data_loss:
        raise DataLoss(message)
    log.warning("%s; %s (failOnDataLoss=false)", message, going_on)


def check_data_loss(
    opts: SourceOptions, starts: Positions, ends: Positions, firsts: Positions
) -> Positions:
    """``starts``, where a range ``[start, end)`` with data to read begins below its log
    start: ``DataLoss``, or with ``failOnDataLoss=false`` the log start (a warning says so)."""
    checked = dict(starts)
    for tp, start in starts.items():
        first = firsts.get(tp, 0)
        if start >= first or ends.get(tp, 0) <= start:
            continue
        message = data_loss_message(tp[0], tp[1], start, first)
        report_data_loss(opts, message, f"going on from offset {first}")
        checked[tp] = first
    return checked


def to_json(positions: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Streaming offsets as Spark checkpoints them: ``{"<topic>": {"<partition>": <next>}}``
    (the JSON of Spark's Kafka source)."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, p), offset in sorted(positions.items()):
        nested.setdefault(topic, {})[str(p)] = int(offset)
    return nested


def from_json(offsets: Mapping[str, Any], opts: SourceOptions) -> Positions:
    """``to_json``'s positions; also this connector's first, one-topic form
    ``{"<partition>": <next>}`` (checkpoints it wrote), which means the options' one topic."""
    if offsets and all(not isinstance(value, Mapping) for value in offsets.values()):
        topic = opts.topic
        return {(topic, int(p)): int(o) for p, o in offsets.items()}
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}
