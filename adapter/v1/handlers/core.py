"""PING, PRODUCE, CONSUME and SET_PARTITION_ROLE."""

from __future__ import annotations

from adapter.v1 import raw_consume
from adapter.v1.escaping import escape, unescape
from adapter.v1.handlers import Context, Handler, Starter, args, on_topic
from adapter.v1.handlers.acks import start_ack
from mapping.connection.batcher import Pending
from mapping.core.codec import MAX_OFFSET
from mapping.core.errors import BadRequest
from mapping.core.records import record_batch_bytes
from mapping.partition.formatted_records import FormattedRecords
from mapping.partition.partition_scripts import ConsumeResult
from mapping.topic.partitioner import partition_for
from mapping.topic.topic_config import TopicConfig, is_internal_topic
from mapping.topic.topic_rules import TopicRules, rules_of

PRODUCE_USAGE = "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]"
COMPACTED_KEY_REQUIRED = "compacted topic requires a non-empty key"
# __consumer_offsets (the pods' mirror of the committed offsets) is read only
INTERNAL_TOPIC = "topic {} is internal to Kafka: read only"
CONSUME_USAGE = "CONSUME requires: <topic> <partition> <offset>"
ROLE_USAGE = "SET_PARTITION_ROLE requires: <topic> <partition> <leader|follower>"
ACKS = {"0", "1", "all"}
# Offsets are signed 64-bit as in Kafka; a larger one would not map to a stream id.


async def ping(context: Context, argv: list[str]) -> str:
    if argv:
        raise BadRequest("PING takes no args")
    return "pong"


def _acks(argv: list[str]) -> str:
    if len(argv) < 3:
        return "1"
    name, sep, value = argv[2].partition("=")
    value = value.lower()
    if not sep:  # most often the rest of a value that held a space
        raise BadRequest(
            "invalid acks: must be acks=0, acks=1 or acks=all (a key or value holding "
            "whitespace escapes it: k:hello%20world)"
        )
    if name.lower() != "acks" or value not in ACKS:
        raise BadRequest("invalid acks: must be acks=0, acks=1 or acks=all")
    return value


ProduceArgs = tuple[str, bytes, bytes, str]  # topic, key, value, acks


def _produce_args(argv: list[str]) -> ProduceArgs:
    """(topic, key, value, acks) of a valid PRODUCE."""
    args.expect_count(argv, PRODUCE_USAGE, 2, 3)
    topic = args.name(argv[0], "topic")
    key_text, sep, value_text = argv[1].partition(":")
    if not sep:
        raise BadRequest(PRODUCE_USAGE)
    acks = _acks(argv)
    return topic, unescape(key_text), unescape(value_text), acks


def _produce(context: Context, config: TopicConfig, parsed: ProduceArgs) -> Pending[str]:
    _, key, value, acks = parsed
    if is_internal_topic(config.name):
        raise BadRequest(INTERNAL_TOPIC.format(config.name))
    rules = rules_of(config)
    if not key and rules.compaction.compact:
        # V1 has no null key: an empty one is how a V1 client sends none, and a compacted
        # topic keeps records by key (Kafka refuses keyless records there: INVALID_RECORD)
        raise BadRequest(COMPACTED_KEY_REQUIRED)
    _check_record_size(rules, config.name, key, value)
    partition = partition_for(key, config.partitions)
    partitions = context.pod.partitions
    if acks == "all":  # a task only when the append's reply does not already satisfy it
        pending = partitions.start_produce(config, partition, [(key, value)])
        acked = start_ack(context.pod.replication.acks, config, partition, pending)
        return acked.then(lambda ack: f"partition={partition} offset={ack[0]} hw={ack[1]}")
    return partitions.start_produce_one(
        config,
        partition,
        key,
        value,
        lambda offset, high_watermark: f"partition={partition} offset={offset} hw={high_watermark}",
    )


produce, produce_now = on_topic(_produce_args, _produce)


# More than a one-record RecordBatch without headers adds to its key and value: the batch
# header (61), the record's length, attributes, deltas and the key's and value's lengths.
RECORD_BATCH_SLACK = 96


def _check_record_size(rules: TopicRules, topic: str, key: bytes, value: bytes) -> None:
    """BAD_REQUEST for a record larger than the topic's max.message.bytes (unset: the
    cluster's message.max.bytes, the pod's --kafka-max-message-bytes), measured as Kafka
    measures it: the RecordBatch a Kafka producer would send it in, so a record fits in V1
    exactly when it fits in Kafka."""
    limit = rules.max_message_bytes
    if len(key) + len(value) + RECORD_BATCH_SLACK <= limit:
        return  # far below it whatever the framing (the common case: nothing to measure)
    size = record_batch_bytes(key, value, [])
    if size > limit:
        raise BadRequest(
            f"record too large: {size} bytes as a RecordBatch, "
            f"topic {topic} takes at most {limit} (max.message.bytes)"
        )


ConsumeArgs = tuple[str, int, int]  # topic, partition, offset


def _consume_args(argv: list[str]) -> ConsumeArgs:
    args.expect_count(argv, CONSUME_USAGE, 3)
    topic = args.name(argv[0], "topic")
    partition = args.integer(argv[1], "partition", minimum=0)
    offset = args.integer(argv[2], "offset", minimum=0)
    if offset > MAX_OFFSET:  # beyond any stream id Redis can hold
        raise BadRequest("invalid offset")
    return topic, partition, offset


def _consume_payload(result: ConsumeResult) -> str:
    records = result.records
    if type(records) is FormattedRecords:  # written from the raw reply (raw_consume.py)
        messages = records.text
    else:
        messages = ",".join([f"{o}:{escape(v)}" for o, v in records])
    return f"messages={messages} hw={result.high_watermark}"


def _consume(context: Context, config: TopicConfig, parsed: ConsumeArgs) -> Pending[str]:
    _, partition, offset = parsed
    if not 0 <= partition < config.partitions:
        raise BadRequest("invalid partition")
    # committed records only: below the last stable offset, no markers, no aborted records
    pending = context.pod.partition_txns.start_consume(
        config,
        partition,
        offset,
        context.pod.settings.consume_max_records,
        context.pod.settings.consume_max_bytes,
        raw_consume.format_values,
    )
    return pending.then(_consume_payload)


consume, consume_now = on_topic(_consume_args, _consume)


async def set_partition_role(context: Context, argv: list[str]) -> str:
    args.expect_count(argv, ROLE_USAGE, 3)
    topic = args.name(argv[0], "topic")
    partition = args.integer(argv[1], "partition", minimum=0)
    role = argv[2]
    if role not in ("leader", "follower"):
        raise BadRequest("invalid role: must be leader or follower")
    config = await context.pod.topics.partition_of(topic, partition)
    if is_internal_topic(topic):  # a follower's mirror would refuse its appends
        raise BadRequest(INTERNAL_TOPIC.format(topic))
    high_watermark = await context.pod.partitions.set_role(config, partition, role)
    return f"topic={topic} partition={partition} role={role} hw={high_watermark}"


# The hot commands, validated and queued in the connection's read callback (adapter/v1/answer.py).
STARTERS: dict[str, Starter] = {"PRODUCE": produce_now, "CONSUME": consume_now}

HANDLERS: dict[str, Handler] = {
    "PING": ping,
    "PRODUCE": produce,
    "CONSUME": consume,
    "SET_PARTITION_ROLE": set_partition_role,
}
