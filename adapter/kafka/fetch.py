"""Fetch: records at or after each partition's fetch offset up to the high watermark,
within the request's byte limits, long-polling on ``max_wait_ms`` / ``min_bytes``.

- Byte limits are honoured in the Redis reads: each partition reads XRANGE pages whose
  COUNT is its remaining byte budget over the partition's learned average entry size (a
  small first page while nothing is known), never the whole log and trim.
- Offsets: Kafka's high watermark is V1 hw + 1 (exclusive; 0 for an empty partition).
  A fetch offset above it, or below the log start where retention or DeleteRecords removed
  records, is OFFSET_OUT_OF_RANGE; any other position reads the records at or after it
  (so offset 0 on a log that lost nothing reads from its first record).
- Long-poll: with fewer than ``min_bytes`` the request watches its partitions' hw channels
  (mapping/waits.py), reads once more once subscribed, then waits for a notification or
  ``max_wait_ms``: no polling.
- Topic configs: batches are compressed with the topic's compression.type, and a
  LogAppendTime topic's batches carry the timestamp-type bit and one append time each.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from adapter.kafka import errors
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.protocol import Request
from adapter.kafka.records import batch_builder, finish_batch
from adapter.kafka.versions import FETCH
from mapping import codec
from mapping.errors import BrokerError
from mapping.kafka import FetchRead
from mapping.records import walk_entries
from mapping.topic_config import TopicConfig
from mapping.topic_rules import rules_of

Response = FETCH.response
TopicResponse = Response.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData

FIRST_PAGE = 16  # entries, while a partition's entry size is unknown
MAX_PAGE = 10_000  # entries one XRANGE returns at most (a bound on one call's time)
# The most one Fetch response carries whatever the client asks (Kafka's broker default
# fetch.max.bytes): bounds what a pipelining client can make the pod hold.
MAX_RESPONSE_BYTES = 57_671_680


@dataclass(slots=True)
class _Wanted:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    config: TopicConfig | None


@dataclass(slots=True)
class _Answer:
    error: int = errors.NONE
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | None = None


async def handle(context: KafkaContext, request: Request) -> Any:
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(body.max_wait_ms, 0) / 1000
    wanted: list[_Wanted] = []
    for topic in body.topics or ():  # an array sent as null: none
        for p in topic.partitions or ():
            wanted.append(
                _Wanted(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes, None)
            )
    for w in wanted:
        try:
            config = await context.find_topic(w.topic)
        except BrokerError:
            config = None
        if config is not None and 0 <= w.partition < config.partitions:
            w.config = config
    watch = None
    try:
        while True:
            answers = await _read_all(context, wanted, body.max_bytes)
            size = sum(len(a.records or b"") for a in answers)
            failed = any(a.error for a in answers)
            remaining = deadline - loop.time()
            if size >= body.min_bytes or failed or remaining <= 0:
                break
            if watch is None:
                channels = [
                    context.pod.partitions.keys.partition(w.topic, w.partition).hw_channel
                    for w in wanted
                    if w.config is not None
                ]
                if not channels:
                    break
                watch = context.pod.hw_waits.watch(*channels)
                if not await watch.subscribed(remaining):
                    break
                continue  # read again: a change before the subscription is not missed
            if not await watch.next(remaining):
                break
    finally:
        if watch is not None:
            watch.close()
    by_topic: dict[str, list[Any]] = {}
    for w, a in zip(wanted, answers, strict=True):
        by_topic.setdefault(w.topic, []).append(
            PartitionData(
                partition_index=w.partition,
                error_code=a.error,
                high_watermark=a.high_watermark,
                last_stable_offset=a.high_watermark,
                log_start_offset=a.log_start,
                aborted_transactions=None,
                preferred_read_replica=-1,
                records=a.records or b"",  # librdkafka refuses a null record set
            )
        )
    return Response[request.version](
        throttle_time_ms=0,
        error_code=errors.NONE,
        session_id=0,
        responses=[TopicResponse(topic=t, partitions=parts) for t, parts in by_topic.items()],
    )


@dataclass(slots=True)
class _Taken:
    """One partition's records: its batches, their bytes (as budgets count them) and the
    raw entries they came from (re-encoded when the response's own limit cuts them)."""

    batches: list[bytes]
    used: int
    pages: list[list[Any]]


async def _read_all(context: KafkaContext, wanted: list[_Wanted], max_bytes: int) -> list[_Answer]:
    """One read of every partition: their first pages share one pipeline, their next pages
    are read concurrently; then the response's ``max_bytes`` is applied in request order
    (the first record of the response always comes, KIP-74)."""
    limit = min(max_bytes, MAX_RESPONSE_BYTES) if max_bytes > 0 else MAX_RESPONSE_BYTES
    firsts = [
        None
        if w.config is None or w.offset < 0
        else context.pod.kafka.start_read(
            w.config, w.partition, w.offset, _page(context, w, min(w.max_bytes, limit))
        )
        for w in wanted
    ]

    async def one(w: _Wanted, first: Any) -> tuple[_Answer, _Taken | None]:
        if w.config is None:
            return _Answer(errors.UNKNOWN_TOPIC_OR_PARTITION), None
        if first is None:  # a negative fetch offset
            return _Answer(errors.OFFSET_OUT_OF_RANGE), None
        try:
            # no partition reads more than the whole response may carry
            return await _partition(context, w, await first, min(w.max_bytes, limit))
        except BrokerError as exc:
            return _Answer(error_of(exc)), None

    results = await asyncio.gather(*(one(w, f) for w, f in zip(wanted, firsts, strict=True)))
    bits = context.pod.kafka.bits
    budget = limit
    answers: list[_Answer] = []
    any_records = False
    for w, (answer, taken) in zip(wanted, results, strict=True):
        if taken is not None and taken.batches:
            assert w.config is not None
            batches = taken.batches
            if taken.used > budget:  # the response's limit cuts this partition: re-encode
                entries = [entry for page in taken.pages for entry in page]
                batches, _, used, _ = _encode(
                    entries, bits, answer.high_watermark - 1, budget, not any_records, w.config
                )
            else:
                used = taken.used
            if batches:
                answer.records = b"".join(batches)
                any_records = True
                budget -= used
        answers.append(answer)
    return answers


def _page(context: KafkaContext, w: _Wanted, budget: int) -> int:
    average = context.entry_sizes.get((w.topic, w.partition))
    if not average:
        return FIRST_PAGE
    return max(1, min(MAX_PAGE, int(budget / average) + 1))


def _encode(
    entries: list[Any],
    bits: int,
    high_watermark: int,
    budget: int,
    take_first: bool,
    config: TopicConfig,
) -> tuple[list[bytes], int, int, bool]:
    """(batches, entries taken, their bytes, stopped at the hw or the budget) of raw XRANGE
    ``entries`` at or below ``high_watermark`` (V1's) within ``budget`` bytes (the first
    entry whatever its size when ``take_first``), as topic ``config`` has its batches
    (compression.type, message.timestamp.type). Budgets count uncompressed bytes."""
    rules = rules_of(config)
    codec, append_time = rules.compression_codec, rules.log_append_time
    batches: list[bytes] = []
    used = 0
    start = 0
    while start < len(entries):
        builder = batch_builder(codec)
        walked = walk_entries(
            entries, start, bits, high_watermark, budget - used, take_first and start == 0,
            builder.append, append_time,
        )  # fmt: skip
        if walked.end > start:
            batches.append(finish_batch(builder, walked.base, append_time))
            used += walked.used
        start = walked.end
        if walked.done:
            return batches, start, used, True
    return batches, start, used, False


async def _partition(
    context: KafkaContext, w: _Wanted, read: FetchRead, budget: int
) -> tuple[_Answer, _Taken | None]:
    """The partition's answer and its records within ``budget`` bytes (its first record
    whatever its size), never above the high watermark the answer reports."""
    assert w.config is not None
    high_watermark = read.high_watermark  # V1's, of the first read: later pages keep it
    log_start = read.log_start if read.log_start >= 0 else 0
    answer = _Answer(errors.NONE, high_watermark + 1, log_start)
    if w.offset > high_watermark + 1 or (read.log_start >= 0 and w.offset < read.log_start):
        answer.error = errors.OFFSET_OUT_OF_RANGE
        return answer, None
    bits = context.pod.kafka.bits
    taken = _Taken([], 0, [])
    key = (w.topic, w.partition)
    while True:
        entries = read.entries
        batches, end, used, done = _encode(
            entries, bits, high_watermark, budget - taken.used, not taken.batches, w.config
        )
        if end:
            taken.batches += batches
            taken.used += used
            taken.pages.append(entries if end == len(entries) else entries[:end])
            seen = used / end
            old = context.entry_sizes.get(key)
            context.entry_sizes[key] = seen if old is None else (old + seen) / 2
        if done or not read.page_full or taken.used >= budget or not end:
            break
        next_offset = codec.entry_offset(entries[end - 1][0], bits) + 1
        read = await context.pod.kafka.start_read(
            w.config, w.partition, next_offset, _page(context, w, budget - taken.used)
        )
    return answer, taken
