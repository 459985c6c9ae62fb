"""What a topic's configs refuse in a Produce before anything is written, as Kafka's
LogValidator does, with Kafka's messages: a batch larger than max.message.bytes
(MESSAGE_TOO_LARGE), a CreateTime record outside the message.timestamp bounds
(INVALID_TIMESTAMP), a record without a key on a compacted topic (INVALID_RECORD). Pure:
adapter/kafka/produce.py answers the refusal for the partition."""

from __future__ import annotations

from typing import NamedTuple

from adapter.kafka import errors
from adapter.kafka.records import ProducedBatch
from mapping.topic.config_types import LONG_MAX
from mapping.topic.topic_rules import TopicRules


class Refused(NamedTuple):
    """A partition's batches refused as a whole before any append: the error, Kafka's
    message per record (its index in its batch) and for the partition."""

    code: int
    record_errors: list[tuple[int, str]]
    message: str


def needs_records(rules: TopicRules) -> bool:
    """Whether these rules look at each record (a batch kept as sent is decoded first), or
    append them otherwise than the streamadapter module does (compacted: indexed; a
    LogAppendTime topic: no create time)."""
    unbounded = rules.timestamp_before_ms == rules.timestamp_after_ms == LONG_MAX
    return rules.compaction.compact or rules.log_append_time or not unbounded


def refusal(
    rules: TopicRules, partition: str, batches: list[ProducedBatch], now_ms: int
) -> Refused | None:
    """Why these batches for ``partition`` ("topic-index") are refused, None when they are
    not. Records without a timestamp (-1) pass the timestamp bounds; a LogAppendTime topic
    has none (the append time replaces the producer's)."""
    for batch in batches:
        if batch.size > rules.max_message_bytes:
            return Refused(errors.MESSAGE_TOO_LARGE, [], (
                f"Message batch size is {batch.size} bytes in append to partition {partition} "
                f"which exceeds the maximum configured size of {rules.max_message_bytes}."
            ))  # fmt: skip
    if rules.compaction.compact:
        message = (
            f"Compacted topic cannot accept message without key in topic partition {partition}."
        )
        keyless = [
            (i, message) for batch in batches for i, r in enumerate(batch.records) if r[0] is None
        ]
        if keyless:
            return Refused(errors.INVALID_RECORD, keyless, message)
    before, after = rules.timestamp_before_ms, rules.timestamp_after_ms
    if rules.log_append_time or before == after == LONG_MAX:
        return None
    for batch in batches:
        for i, record in enumerate(batch.records):
            stamp = record[2]
            if stamp >= 0 and (now_ms - stamp > before or stamp - now_ms > after):
                message = (
                    f"Timestamp {stamp} of message with offset {i} is out of range. The "
                    f"timestamp should be within [{now_ms - before}, {now_ms + after}]"
                )
                return Refused(errors.INVALID_TIMESTAMP, [(i, message)], message)
    return None
