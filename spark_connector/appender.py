"""The sink's Redis side: topics and the pipelined append script (acks=all: acks.py).

Runs in a Spark task (and on the driver for topic look-ups) with a synchronous client. A task
buffers its records per (topic, partition) and sends every ``batchSize`` records as one
pipeline holding one ``spark/sink_append.lua`` call per partition chunk.

Exactly once: each call carries the task's *marker* (``<writer id>:<task partition>``), the
epoch (micro-batch id) and the index of its first record among the task's records for that
partition. The script stores, atomically with the append, how many of those records are in
the log, and skips them when a retried task or a replayed micro-batch sends them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from mapping.connection import scripts
from mapping.connection.append_module import append_probe, has_command_sync
from mapping.core import codec
from mapping.core.codec import to_str
from mapping.core.keys import Keys, is_valid_name
from mapping.core.records import packed_pairs, record_batch_bytes
from mapping.partition.partition_scripts import PARTITION_STATUS, PartitionHead, compaction_keys
from mapping.topic.partitioner import partition_for
from mapping.topic.topic_config import TopicConfig, TopicDefaults, is_internal_topic
from mapping.topic.topic_configs import broker_default_fields
from mapping.topic.topic_rules import is_compacted, rules_of
from mapping.topic.topics import ensure_topic_sync
from spark_connector.acks import wait_for_acks
from spark_connector.sink_options import SinkOptions, SinkWriteError
from spark_connector.sink_records import Record, record_items

SPARK_SINK_APPEND = scripts.load("spark/sink_append")


def spark_sink_append_call(
    head: PartitionHead,
    markers: str,
    marker: str,
    epoch: int,
    first: int,
    records: list[Record],
    compaction: Sequence[str] = (),
    append_module: bool = False,
) -> tuple:
    """spark/sink_append.lua: ``records``, the task's records for this partition from index
    ``first`` on, skipping those ``marker`` (a field of the ``markers`` hash; "": none) says
    are stored already for ``epoch``; ``compaction``: the partition's compaction keys on a
    compacted topic (compaction_keys); ``append_module``: Redis has the streamadapter module
    (mapping/connection/append_module.c), whose one command writes the records. A chunk whose
    records all have a key and a value and no headers goes as key, value pairs (their
    fields are V1's), packed in one argument where the module writes them (a partition that
    is not compacted), any other as each record's items."""
    args: list[object] = [marker, epoch, first, "1" if append_module else "0"]
    if all(r.key is not None and r.value is not None and not r.headers for r in records):
        pairs: list[bytes] = []
        for record in records:
            assert record.key is not None and record.value is not None  # (checked above)
            pairs += (record.key, record.value)
        if append_module and not compaction:
            args += ("packed", len(records), packed_pairs(pairs))
        else:
            args += ("pairs", *pairs)
    else:
        args.append("items")
        for record in records:
            lead, items = record_items(record)
            args += (len(items), lead, *items)
    return head.command(SPARK_SINK_APPEND, (markers, *compaction), args)


def load_scripts(client: redis.Redis) -> None:
    """SCRIPT LOAD once per task, so the pipelines can call by SHA (a cluster loads it on
    every primary)."""
    for script in (SPARK_SINK_APPEND, PARTITION_STATUS):
        client.script_load(script.source)


def sequence_bits(client: redis.Redis, keys: Keys) -> int:
    """The deployment's sequence bits; pinned to the default first, as a starting pod does."""
    client.hsetnx(keys.meta, "sequence_bits", codec.DEFAULT_SEQUENCE_BITS)
    return codec.check_sequence_bits(int(client.hget(keys.meta, "sequence_bits")))


def broker_defaults(client: redis.Redis, keys: Keys) -> tuple[tuple[str, str], ...]:
    """The topic defaults the cluster-wide broker configs set (mapping/topic/broker_configs.py:
    the hash the pods read at start and on every change), as the pods' topics carry them.
    (A pod's own static options, such as --kafka-max-message-bytes, are not known here.)"""
    stored = client.hgetall(keys.broker_configs)
    return broker_default_fields({to_str(k): to_str(v) for k, v in stored.items()})


def ensure_topic(
    client: redis.Redis, keys: Keys, name: str, defaults: TopicDefaults
) -> TopicConfig:
    """The topic's settings, creating it with ``defaults`` when it does not exist (topics
    appear on first use, as with V1 PRODUCE), announced as a pod announces it (an earlier
    topic's tombstones go, the replicators start following the new partitions). Names Kafka
    reserves (``__consumer_offsets``, ...) are never created, nor written (the pods mirror the
    committed offsets into ``__consumer_offsets``)."""
    if is_internal_topic(name):
        raise SinkWriteError(f"topic {name!r} is reserved by Kafka: the sink never writes it")
    ensured = ensure_topic_sync(
        client, keys, name, defaults.partitions, defaults.replication_factor,
        defaults.min_insync_replicas,
    )  # fmt: skip
    assert ensured is not None  # (created when missing)
    return ensured.config


def _check_size(config: TopicConfig, record: Record) -> None:
    """SinkWriteError for a record larger than the topic's max.message.bytes, measured as
    Kafka measures it (the RecordBatch a Kafka producer would send it in; unset: the
    cluster-wide message.max.bytes, else Kafka's default; the pods' --kafka-max-message-bytes
    is not known here)."""
    size = record_batch_bytes(record.key, record.value, record.headers)
    limit = rules_of(config).max_message_bytes
    if size > limit:
        raise SinkWriteError(
            f"record too large for {config.name}: {size} bytes as a RecordBatch, "
            f"the topic takes at most {limit} (max.message.bytes)"
        )


@dataclass
class _Target:
    """One (topic, partition) this task writes: its buffer and progress."""

    config: TopicConfig
    partition: int
    buffer: list[Record] = field(default_factory=list)
    sent: int = 0  # records handed to the script so far (index of the next chunk's first)
    appended: int = 0  # records the script stored (the rest were stored by an earlier run)
    last_offset: int = -1


@dataclass(frozen=True, slots=True)
class PartitionWritten:
    topic: str
    partition: int
    records: int
    appended: int
    last_offset: int


class Appender:
    """One task's writes. ``add`` each record, then ``finish``; ``marker`` None = no replay
    protection (each call appends)."""

    def __init__(
        self,
        client: redis.Redis,
        opts: SinkOptions,
        bits: int,
        *,
        marker: str | None,
        epoch: int,
        task_partition: int,
    ) -> None:
        self.client = client
        self.opts = opts
        self.keys = Keys(opts.key_prefix)
        self.bits = bits
        self.marker = marker or ""
        self.epoch = epoch
        self._round_robin = task_partition  # null keys: spread, deterministically per task
        self._topics: dict[str, TopicConfig] = {}
        self._targets: dict[tuple[str, int], _Target] = {}
        # the cluster-wide broker configs (message.max.bytes, log.cleanup.policy, ...), once
        # per task: the topics' defaults here as in the pods
        self._broker_defaults = broker_defaults(client, self.keys)
        load_scripts(client)
        self.append_module = has_command_sync(client, append_probe(self.keys.module_probe))

    def _topic(self, name: str | None) -> TopicConfig:
        name = name or self.opts.topic
        if name is None:
            raise SinkWriteError("a row has a null topic and no topic option is set")
        config = self._topics.get(name)
        if config is None:
            if not is_valid_name(name):
                raise SinkWriteError(f"topic {name!r} is not 1-249 characters of [A-Za-z0-9._-]")
            config = ensure_topic(self.client, self.keys, name, self.opts.new_topics)
            if self._broker_defaults:
                config = dataclasses.replace(config, broker_defaults=self._broker_defaults)
            self._topics[name] = config
        return config

    def add(self, record: Record) -> None:
        config = self._topic(record.topic if self.opts.topic is None else None)
        if record.key is None and is_compacted(config):
            # as Kafka refuses it (INVALID_RECORD): compaction keeps records by key
            raise SinkWriteError(
                f"topic {config.name!r} is compacted (cleanup.policy=compact): "
                "every row needs a non-null key"
            )
        if record.partition is not None:
            partition = int(record.partition)
            if not 0 <= partition < config.partitions:
                raise SinkWriteError(
                    f"partition {partition} is outside topic {config.name!r} "
                    f"(partitions 0..{config.partitions - 1})"
                )
        elif record.key is not None:
            partition = partition_for(record.key, config.partitions)
        else:
            partition = self._round_robin % config.partitions
            self._round_robin += 1
        _check_size(config, record)
        target = self._targets.get((config.name, partition))
        if target is None:
            target = self._targets[(config.name, partition)] = _Target(config, partition)
        target.buffer.append(record)
        if len(target.buffer) >= self.opts.batch_size:
            self.flush()

    def flush(self) -> None:
        """Every buffered chunk in one pipeline (one script call per partition)."""
        pending = [t for t in self._targets.values() if t.buffer]
        if not pending:
            return
        pipe = self.client.pipeline(transaction=False)
        for target in pending:
            pipe.execute_command(*self._call(target))
        replies = pipe.execute(raise_on_error=False)
        for target, reply in zip(pending, replies, strict=True):
            if isinstance(reply, Exception):
                raise SinkWriteError(
                    f"append to {target.config.name}/{target.partition} failed: {reply}"
                )
            target.sent += len(target.buffer)
            target.buffer.clear()
            target.appended += int(reply[2])
            target.last_offset = int(reply[3])

    def _call(self, target: _Target) -> tuple:
        name, partition = target.config.name, target.partition
        head = PartitionHead(
            self.keys.partition(name, partition),
            self.bits,
            target.config.replication_factor,
            self.opts.replica_lag_max_ms,
        )
        markers = self.keys.sink_markers(name, partition)
        compaction = compaction_keys(target.config, head.keys)
        return spark_sink_append_call(
            head,
            markers,
            self.marker,
            self.epoch,
            target.sent,
            target.buffer,
            compaction,
            self.append_module,
        )

    def finish(self) -> list[PartitionWritten]:
        """Flush, wait for acks=all, and say what was written where."""
        self.flush()
        if self.opts.acks == "all":
            wait_for_acks(
                self.client,
                self.keys,
                self.opts,
                [(t.config, t.partition, t.last_offset) for t in self._targets.values()],
            )
        return [
            PartitionWritten(t.config.name, t.partition, t.sent, t.appended, t.last_offset)
            for t in self._targets.values()
        ]
