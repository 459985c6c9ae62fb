"""Produce: each partition's RecordBatch is one kafka/produce.lua call (offsets assigned
there, idempotent producers' sequences checked there); all of a request's calls go out in
the pod's next pipeline. acks=0 gets no response at all, acks=1 answers after the append,
acks=-1 when hw and the ISR allow it (as V1 acks=all).

The topic's configs are enforced before anything is written (produce_checks.py: batch size,
keys on compacted topics, timestamp bounds); a LogAppendTime topic's answer carries the
append time (docs/kafka.md, "Topic configs enforced"). Kafka's internal topics
(``__consumer_offsets``: the pods' mirror of the committed offsets) take no records from
clients: INVALID_TOPIC_EXCEPTION, as Kafka answers every client but its own admin tools."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import Any

from redis.exceptions import RedisError

from adapter.kafka import errors
from adapter.kafka.authorization import produce_refusals
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.message_sets import decode_message_set
from adapter.kafka.produce_checks import Refused, needs_records, refusal
from adapter.kafka.produce_codec import PartitionAnswer, ProduceAnswer, RecordError, TopicAnswer
from adapter.kafka.protocol import Request
from adapter.kafka.records import (
    CorruptBatch,
    InvalidBatch,
    ProducedBatch,
    UnsupportedCompression,
    UnsupportedMagic,
    decode_batches,
)
from mapping.connection.batcher import Pending
from mapping.core.errors import BrokerError, OutcomeUnknown
from mapping.partition.kafka import AppendResult, answered_log_start
from mapping.replication.acks import AckOutcome
from mapping.topic.topic_config import TopicConfig, is_internal_topic
from mapping.topic.topic_rules import rules_of

log = logging.getLogger(__name__)


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    acks = body.acks
    jobs: list[tuple[str, int, Awaitable[Outcome | Refused] | int | Refused]] = []
    refused = await produce_refusals(context, request) if context.authorizer.enabled else None
    for topic in body.topic_data or ():  # an array sent as null: none
        for part in topic.partition_data or ():
            code = refused.get(topic.name) if refused else None
            job = _start(context, request, topic.name, part) if code is None else code
            jobs.append((topic.name, part.index, job))
    # The appends were all queued in this turn (one pipeline); now collect the answers.
    try:
        outcomes = [job if isinstance(job, int | Refused) else await job for _, _, job in jobs]
    finally:
        for _, _, job in jobs:  # left unawaited by a failure: closed, not warned about
            if inspect.iscoroutine(job):
                job.close()
    answers: dict[str, list[Any]] = {}
    for (name, index, _), outcome in zip(jobs, outcomes, strict=True):
        refused = outcome if isinstance(outcome, Refused) else None
        if refused is not None:
            code, base, append_time, log_start = refused.code, -1, -1, -1
        elif isinstance(outcome, int):
            code, base, append_time, log_start = outcome, -1, -1, -1
        else:
            code, base, append_time, log_start = outcome
        answers.setdefault(name, []).append(
            PartitionAnswer(
                index,
                code,
                base,
                append_time,
                log_start,
                [RecordError(i, m) for i, m in (refused.record_errors if refused else ())],
                refused.message if refused else None,
            )
        )
    if acks == 0:
        return None
    return ProduceAnswer([TopicAnswer(name, parts) for name, parts in answers.items()])


# A partition's answer: (error code, base offset, log append time, log start offset; -1
# where none).
Outcome = tuple[int, int, int, int]


def _start(context: KafkaContext, request: Request, name: str, part: Any) -> Any:
    """Queue one partition's append now and return what answers it: a coroutine (a known
    topic), a task (the topic is looked up first), an int (an error known at once)."""
    body = request.body
    if body.acks not in (0, 1, -1):
        return errors.INVALID_REQUIRED_ACKS
    if is_internal_topic(name):  # __consumer_offsets is the pods' (ReplicaManager's answer)
        return Refused(
            errors.INVALID_TOPIC_EXCEPTION, [], f"Cannot append to internal topic {name}"
        )
    data = part.records or b""
    try:
        batches = _decode(data, request.version, context.pod.partitions.append_module)
    except UnsupportedMagic:
        return errors.UNSUPPORTED_FOR_MESSAGE_FORMAT
    except CorruptBatch as exc:
        log.info("corrupt batch for %s/%s: %s", name, part.index, exc)
        return errors.CORRUPT_MESSAGE
    except InvalidBatch as exc:
        log.info("invalid records for %s/%s: %s", name, part.index, exc)
        return errors.INVALID_RECORD
    except UnsupportedCompression:
        return errors.UNSUPPORTED_COMPRESSION_TYPE
    if not batches or any(b.count == 0 for b in batches):
        return errors.INVALID_RECORD
    # Kafka's LogValidator: clients never write control batches, and a transactional batch
    # names its producer
    if any(b.is_control or (b.is_transactional and b.producer_id < 0) for b in batches):
        return errors.INVALID_RECORD
    config = context.pod.topics.cache.known(name)
    if config is None:  # first use on this pod: look it up first
        return asyncio.ensure_future(_append(context, body, name, part.index, batches))
    if not 0 <= part.index < config.partitions:
        return errors.UNKNOWN_TOPIC_OR_PARTITION
    refused = _refusal(config, name, part.index, batches)
    if refused is not None:
        return refused
    # known topic: queued right now, so all of a request's appends share one pipeline
    pending = _queue(context, config, part.index, batches)
    answer = _finish(context, body, config, part.index, pending)
    if body.acks == -1:  # its wait for the ISR runs beside the other partitions'
        return asyncio.ensure_future(answer)
    return answer  # awaited by the request's handler, with no task of its own


def _decode(data: bytes, version: int, keep_plain: bool) -> list[ProducedBatch]:
    """A partition's batches: magic 2 RecordBatches, or in Produce v0-2 (which Kafka lets
    carry any magic) a magic 0/1 MessageSet, one batch (adapter/kafka/message_sets.py).
    ``keep_plain``: Redis has the streamadapter module, so a batch of plain records is kept
    as sent (``ProducedBatch.raw``) for it to append."""
    try:
        return decode_batches(data, keep_plain)
    except UnsupportedMagic:
        if version >= 3:
            raise
        return [decode_message_set(data)]


def _refusal(config: TopicConfig, name: str, index: int, batches: list[Any]) -> Refused | None:
    """What the topic's configs refuse in these batches (adapter/kafka/produce_checks.py).
    Batches kept as sent are decoded first where the topic looks at each record (its checks,
    or an append that is not the module's: compaction, LogAppendTime)."""
    rules = rules_of(config)
    if any(b.raw is not None for b in batches) and needs_records(rules):
        try:
            for batch in batches:
                batch.decode()
        except CorruptBatch:
            return Refused(errors.CORRUPT_MESSAGE, [], "undecodable records")
    return refusal(rules, f"{name}-{index}", batches, time.time_ns() // 1_000_000)


def _queue(
    context: KafkaContext, config: TopicConfig, index: int, batches: list[Any]
) -> list[Pending[AppendResult]]:
    return [
        context.pod.kafka.append_batch(
            config,
            index,
            batch.records,
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            batch.is_transactional,
            batch.create_time,
            batch.raw,
        )
        for batch in batches
    ]


async def _append(
    context: KafkaContext, body: Any, name: str, index: int, batches: list[Any]
) -> Outcome | Refused:
    try:
        config = await context.find_topic(name)
    except BrokerError as exc:
        return error_of(exc), -1, -1, -1
    if config is None or not 0 <= index < config.partitions:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
    refused = _refusal(config, name, index, batches)
    if refused is not None:
        return refused
    return await _finish(context, body, config, index, _queue(context, config, index, batches))


async def _finish(
    context: KafkaContext,
    body: Any,
    config: TopicConfig,
    index: int,
    pending: list[Pending[AppendResult]],
) -> Outcome:
    results: list[AppendResult] = []
    failures: list[BrokerError] = []
    for p in pending:  # every one awaited, so none is left with its exception unretrieved
        try:
            results.append(await p)
        except BrokerError as exc:
            failures.append(exc)
        except RedisError as exc:  # an error reply the batcher does not classify (WRONGTYPE):
            # the script may have written some records before it failed
            failures.append(OutcomeUnknown(f"redis error: {exc}"))
    if failures:
        return _failed_append(failures, some_written=bool(results)), -1, -1, -1
    first = results[0]
    # Kafka answers the log start whatever the status: a Java producer told
    # UNKNOWN_PRODUCER_ID with -1 there retries the same batch until its delivery timeout.
    log_start = answered_log_start(results[-1].log_start)
    for result in results:
        if result.status in (
            errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
            # its state is behind it (mapping/partition/sequence_fence.py)
            errors.UNKNOWN_PRODUCER_ID,
            errors.INVALID_PRODUCER_EPOCH,
            errors.INVALID_TXN_STATE,
        ):
            return result.status, -1, -1, log_start
    if body.acks == -1:
        code = await _acks_all(context, config, index, results[-1], body.timeout_ms)
        if code:
            return code, -1, -1, log_start
    # Kafka's log_append_time_ms: the append time on a LogAppendTime topic, else -1
    append_time = first.append_time if rules_of(config).log_append_time else -1
    return errors.NONE, first.base_offset, append_time, log_start


def _failed_append(failures: list[BrokerError], some_written: bool) -> int:
    """The code for a partition's batches of which some failed: REQUEST_TIMED_OUT ("may be
    written") when one's outcome is unknown or others were written, since any "not written"
    code would make the client send written records again; else the first failure's."""
    if some_written:
        return errors.REQUEST_TIMED_OUT
    unknown = [f for f in failures if isinstance(f, OutcomeUnknown)]
    return error_of(unknown[0] if unknown else failures[0], append=True)


# How an acks=all wait ended, as Kafka answers it. The record is in the log whatever the
# outcome: never a code that says it was not written.
ACK_CODES: dict[AckOutcome, int] = {
    AckOutcome.ACKED: errors.NONE,
    AckOutcome.HW_SHORT: errors.REQUEST_TIMED_OUT,
    AckOutcome.NOT_DURABLE: errors.REQUEST_TIMED_OUT,
    # Kafka's code for an appended record the ISR is too small for: plain
    # NOT_ENOUGH_REPLICAS tells clients it was not written (Kafka checks the ISR before
    # appending; the pod appends first), so they would send it again.
    AckOutcome.ISR_TOO_SMALL: errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    AckOutcome.REPLICATION_UNKNOWN: errors.REQUEST_TIMED_OUT,
    AckOutcome.TOPIC_DELETED: errors.UNKNOWN_TOPIC_OR_PARTITION,
}


async def _acks_all(
    context: KafkaContext, config: TopicConfig, index: int, last: AppendResult, timeout_ms: int
) -> int:
    acks = context.pod.replication.acks
    if acks.acked_by_reply(config, last.last_offset, last.high_watermark, last.isr_size):
        return errors.NONE
    ack = await acks.await_ack(
        config, index, last.last_offset, timeout_ms=max(timeout_ms, 1), read_isr=True
    )
    return ACK_CODES[ack.outcome]
