"""Fetch's reads: each partition's records at or after its fetch offset up to the high
watermark, within the request's byte limits (adapter/kafka/fetch.py long-polls and answers).

- Byte limits are honoured in the Redis reads: each partition reads XRANGE pages whose
  COUNT is its remaining byte budget over the partition's learned average entry size (a
  small first page while nothing is known), never the whole log and trim. Where the
  partitions' own limits add up to more than the response's (a small fetch.max.bytes, many
  partitions), each first reads an equal share of the response's limit, and the bytes the
  others left unused go, in request order, to those their share cut short: the pod reads
  about what it sends, not every partition's whole limit.
- Offsets: Kafka's high watermark is V1 hw + 1 (exclusive; 0 for an empty partition).
  A fetch offset above it, or below the log start where retention or DeleteRecords removed
  records, is OFFSET_OUT_OF_RANGE; any other position reads the records at or after it
  (so offset 0 on a log that lost nothing reads from its first record).
- A partition where nothing happened since the pod last read it (mapping/replication/hw_views.py) is
  answered from that read when the position has nothing to read (at the hw, or at the last
  stable offset under read_committed): an idle consumer's Fetch costs no Redis call for it.
- Topic configs: batches are compressed with the topic's compression.type, and a
  LogAppendTime topic's batches carry the timestamp-type bit and one append time each.
- Transactions (mapping/partition/partition_txns.py): every answer carries the last stable offset;
  read_committed (isolation_level 1) reads only below it and, when the records answered
  hold transactional batches, lists the aborted transactions among them (one more Redis
  read then only), which the client filters out. Transactional records come in batches of
  one producer with the transactional bit, markers as control batches (records.py).
- Old versions (Kafka 3.9's down-conversion): v0-1 answer magic 0 MessageSets, v2-3 magic 1
  (message_sets.py), without control records (v0-3 are read_uncommitted); a topic with
  message.downconversion.enable false answers them UNSUPPORTED_VERSION. A zstd topic
  answers v0-9 UNSUPPORTED_COMPRESSION_TYPE.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from adapter.kafka import errors, records
from adapter.kafka.context import KafkaContext
from adapter.kafka.errors import error_of
from adapter.kafka.fetch_ahead import ReadAhead
from adapter.kafka.fetch_sessions import PartitionKey, partition_key
from adapter.kafka.message_sets import MessageSetBuilder
from adapter.kafka.records import batch_builder, finish_batch, last_offset
from mapping.connection.batcher import Pending
from mapping.connection.raw_replies import RawReply, listed
from mapping.core import codec
from mapping.core.codec import entry_offset
from mapping.core.errors import BrokerError
from mapping.partition.kafka import FetchRead, answered_log_start, last_entry_id
from mapping.partition.record_walk import is_control, walk_entries
from mapping.replication.leader_epochs import LeaderEpochs
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topic_rules import rules_of

FIRST_PAGE = 16  # entries, while a partition's entry size is unknown
MAX_PAGE = 10_000  # entries one XRANGE returns at most (a bound on one call's time)
# The most one Fetch response carries whatever the client asks (Kafka's broker default
# fetch.max.bytes): bounds what a pipelining client can make the pod hold.
MAX_RESPONSE_BYTES = 57_671_680
# The least a partition's first read gets when the response's limit is shared out (its
# records go beyond the share only through the second read of those cut short).
MIN_SHARE = 16_384
ZSTD_CODEC = 4
ZSTD_SINCE = 10  # the first Fetch version whose clients read zstd (KIP-110)


def magic_of(version: int) -> int:
    """The message format a Fetch version reads: Kafka's down-conversion target."""
    return 0 if version <= 1 else 1 if version <= 3 else 2


def refusal(version: int, config: TopicConfig) -> int:
    """Why a topic's records cannot be answered in this Fetch version (0: they can)."""
    rules = rules_of(config)
    if rules.compression_codec == ZSTD_CODEC and version < ZSTD_SINCE:
        return errors.UNSUPPORTED_COMPRESSION_TYPE
    if magic_of(version) < 2 and not rules.down_conversion:
        return errors.UNSUPPORTED_VERSION
    return errors.NONE


@dataclass(slots=True)
class Wanted:
    """One partition of a Fetch: its position and byte limit, its topic's settings (None:
    no such topic or partition: answered ``missing``) and its hw channel
    (mapping/replication/hw_views.py). ``topic_id``: the id a Fetch v13+ named it by, ``topic`` the
    name that id resolved to (None: none)."""

    topic: str | None
    partition: int
    offset: int
    max_bytes: int
    config: TopicConfig | None = None
    refused: int = errors.NONE  # the topic's records cannot go to this version (refusal)
    channel: str = ""
    topic_id: uuid.UUID | None = None
    missing: int = errors.UNKNOWN_TOPIC_OR_PARTITION
    current_leader_epoch: int = -1  # the client's (v9+; -1: not checked), KIP-320

    @property
    def key(self) -> PartitionKey:
        return partition_key(self.topic, self.topic_id, self.partition)


@dataclass(slots=True)
class Answer:
    error: int = errors.NONE
    high_watermark: int = -1
    log_start: int = -1
    records: bytes | None = None
    last_stable: int = -1  # Kafka's LSO (exclusive)
    bound: int = -1  # the last offset readable (V1's, inclusive: hw, or below the LSO)
    transactional: bool = False  # the records hold a transactional batch
    aborted: list[tuple[int, int]] | None = None  # (producer id, first offset): read_committed


async def list_aborted(context: KafkaContext, wanted: list[Wanted], answers: list[Answer]) -> None:
    """read_committed: each answer holding transactional batches gets the aborted
    transactions with records in the offsets it answers (Kafka's collectAbortedTransactions),
    read concurrently (one pipeline)."""
    txns = context.pod.partition_txns
    chosen = [
        (w, a)
        for w, a in zip(wanted, answers, strict=True)
        if a.transactional and w.config is not None
    ]
    if not chosen:
        return
    found = await asyncio.gather(
        *(txns.aborted_ranges(w.config, w.partition, w.offset) for w, _ in chosen if w.config),
        return_exceptions=True,
    )
    for (w, answer), ranges in zip(chosen, found, strict=True):
        if isinstance(ranges, BrokerError):
            answer.error, answer.records = error_of(ranges), None
        elif isinstance(ranges, BaseException):
            raise ranges
        else:
            answer.aborted = ranges.listed(w.offset, answer.bound)


@dataclass(slots=True)
class _Taken:
    """One partition's records: its batches, their bytes (as budgets count them) and the
    XRANGE pages they came from, each with the count of its entries taken (re-encoded when
    the response's own limit cuts them)."""

    batches: list[bytes]
    used: int
    pages: list[tuple[list[Any] | RawReply, int]]
    transactional: bool = False


def response_limit(max_bytes: int) -> int:
    """The most a Fetch's response carries: its ``max_bytes`` within the pod's bound."""
    return min(max_bytes, MAX_RESPONSE_BYTES) if max_bytes > 0 else MAX_RESPONSE_BYTES


async def read_all(
    context: KafkaContext,
    wanted: list[Wanted],
    max_bytes: int,
    committed: bool,
    magic: int = 2,
    ahead: ReadAhead | None = None,
) -> list[Answer]:
    """One read of every partition: their first pages share one pipeline, their next pages
    are read concurrently; then the response's ``max_bytes`` is applied in request order
    (the first record of the response always comes, KIP-74). A partition with nothing to
    read at its position by the pod's view of it (mapping/replication/hw_views.py) is answered from
    that view, with no Redis call and no task; one with a read ahead from its position
    (``ahead``: adapter/kafka/fetch_ahead.py) takes it. ``magic``: the message format
    answered (magic_of)."""
    limit = response_limit(max_bytes)
    views = context.pod.hw_waits
    kafka = context.pod.kafka
    results: list[tuple[Answer, _Taken | None] | None] = []
    readable: list[Wanted] = []
    for w in wanted:
        config = w.config
        if config is None:
            results.append((Answer(w.missing), None))
        elif w.refused:
            results.append((Answer(w.refused), None))
        elif w.offset < 0:
            results.append((Answer(errors.OFFSET_OUT_OF_RANGE), None))
        else:
            known = views.known(w.channel, config)
            answer = None if known is None else _answer_of(w, known, committed)
            if answer is not None and (answer.error or w.offset > answer.bound):
                results.append((answer, None))  # nothing to read there: no Redis call
            else:
                readable.append(w)
                results.append(None)
    # no partition reads more than the whole response may carry
    limits = [min(w.max_bytes, limit) for w in readable]
    shares = first_shares(limits, limit)
    reads = []
    epoch = context.pod.leader_epochs.current
    for w, share in zip(readable, shares, strict=True):
        assert w.config is not None
        ready = None if ahead is None else ahead.take(
            (w.key, w.offset, share, committed, magic), w.config, epoch
        )  # fmt: skip
        if ready is not None:
            reads.append(_ahead_or_fresh(context, w, ready, share, committed, magic))
            continue
        first = _start_first(context, w, share, magic)
        reads.append(_read_one(context, w, first, share, committed, magic))
    if reads:
        read = list(await asyncio.gather(*reads))
        if shares != limits and magic == 2:
            await _top_up(context, readable, read, limits, limit)
        found = iter(read)
        results = [next(found) if r is None else r for r in results]
    bits = kafka.bits
    budget = limit
    answers: list[Answer] = []
    any_records = False
    current_epoch = context.pod.leader_epochs.current  # (as of the reads: after them)
    for w, result in zip(wanted, results, strict=True):
        assert result is not None
        answer, taken = result
        if 0 <= w.current_leader_epoch < current_epoch:
            # the client's metadata predates a failover: Kafka fences it, so that it learns
            # the new epoch and validates its position (KIP-320) before reading on
            answers.append(Answer(errors.FENCED_LEADER_EPOCH))
            continue
        if taken is not None and taken.batches:
            assert w.config is not None
            batches = taken.batches
            if taken.used > budget:  # the response's limit cuts this partition: re-encode
                entries = [e for page, end in taken.pages for e in listed(page)[:end]]
                batches, _, used, _, transactional = encode_entries(
                    entries, bits, answer.bound, budget, not any_records, w.config, magic,
                    context.pod.leader_epochs,
                )  # fmt: skip
            else:
                used, transactional = taken.used, taken.transactional
            if batches:
                answer.records = b"".join(batches)
                answer.transactional = transactional
                any_records = True
                budget -= used
        answers.append(answer)
    return answers


def first_shares(limits: list[int], limit: int) -> list[int]:
    """The byte budget of each read partition's first read, given their own ``limits``
    (each within the response's): those limits when they fit in the response's ``limit``
    together, else an equal share of it (MIN_SHARE at least), so that the partitions read
    about what the response can carry rather than each its whole limit."""
    if sum(limits) <= limit:
        return limits
    share = max(limit // len(limits), MIN_SHARE)
    return [min(own, share) for own in limits]


async def _top_up(
    context: KafkaContext,
    readable: list[Wanted],
    results: list[tuple[Answer, _Taken | None]],
    limits: list[int],
    limit: int,
) -> None:
    """After first reads of shares: what the response's ``limit`` still holds goes, in
    request order, to the partitions their share cut short (records left below the bound
    they answer), each up to its own limit; they read on concurrently (one more round trip)."""
    left = limit - sum(taken.used for _, taken in results if taken is not None)
    more = []
    for w, (answer, taken), own in zip(readable, results, limits, strict=True):
        if left <= 0:
            break
        if taken is None or not taken.batches or taken.used >= own:
            continue
        after = last_offset(taken.batches[-1])
        if after >= answer.bound:
            continue  # it read up to its bound: nothing was cut
        budget = taken.used + min(own - taken.used, left)
        left -= budget - taken.used
        more.append(_read_on(context, w, taken, after + 1, answer.bound, budget))
    await asyncio.gather(*more)


async def _read_on(
    context: KafkaContext, w: Wanted, taken: _Taken, offset: int, bound: int, budget: int
) -> None:
    """More of a partition's records into ``taken``, from ``offset`` up to ``bound`` within
    ``budget`` bytes in all (a failed read keeps what was taken)."""
    assert w.config is not None
    raw = _reads_raw(w.config, 2)
    try:
        read = await context.pod.kafka.start_read(
            w.config, w.partition, offset, _page(context, w, budget - taken.used), raw
        )
        await _take(context, w, read, bound, budget, 2, taken)
    except BrokerError:
        return


async def read_partition(
    context: KafkaContext, w: Wanted, budget: int, committed: bool, magic: int
) -> tuple[Answer, _Taken | None]:
    """One partition's answer and records within ``budget``, its first page read alone."""
    first = _start_first(context, w, budget, magic)
    return await _read_one(context, w, first, budget, committed, magic)


def _start_first(context: KafkaContext, w: Wanted, budget: int, magic: int) -> Pending[FetchRead]:
    """A partition's first page, asked for now (read_all's join one pipeline), remembered
    on its hw channel (mapping/replication/hw_views.py)."""
    assert w.config is not None
    return context.pod.hw_waits.start_read(
        context.pod.kafka, w.config, w.partition, w.channel, w.offset,
        _page(context, w, budget), _reads_raw(w.config, magic),
    )  # fmt: skip


async def _ahead_or_fresh(
    context: KafkaContext,
    w: Wanted,
    ahead: Awaitable[tuple[Answer, _Taken | None]],
    budget: int,
    committed: bool,
    magic: int,
) -> tuple[Answer, _Taken | None]:
    """The read ahead's answer when it holds records; else (none, or it failed) a read of
    the partition now."""
    answer, taken = await ahead
    if taken is not None and taken.batches:
        return answer, taken
    return await read_partition(context, w, budget, committed, magic)


async def _read_one(
    context: KafkaContext,
    w: Wanted,
    first: Pending[FetchRead],
    budget: int,
    committed: bool,
    magic: int,
) -> tuple[Answer, _Taken | None]:
    try:
        return await _partition(context, w, await first, budget, committed, magic)
    except BrokerError as exc:
        return Answer(error_of(exc)), None


def _answer_of(w: Wanted, read: FetchRead, committed: bool) -> Answer:
    """The partition's answer without its records: the high watermark, log start and last
    stable offset ``read`` found, OFFSET_OUT_OF_RANGE for a position outside the log."""
    high_watermark = read.high_watermark  # V1's
    bound = read.stable_bound if committed else high_watermark
    log_start = answered_log_start(read.log_start)
    answer = Answer(errors.NONE, high_watermark + 1, log_start, None, read.stable_bound + 1, bound)
    if w.offset > high_watermark + 1 or (read.log_start >= 0 and w.offset < read.log_start):
        answer.error = errors.OFFSET_OUT_OF_RANGE
    return answer


def _reads_raw(config: TopicConfig, magic: int) -> bool:
    """Whether the partition's pages are read as RESP bytes: where the compiled walk
    encodes them (records.plain_batch_raw), never to be parsed in the common case."""
    rules = rules_of(config)
    return (
        records.plain_batch_raw is not None
        and magic == 2
        and not rules.compression_codec
        and not rules.log_append_time
    )


def _page(context: KafkaContext, w: Wanted, budget: int) -> int:
    average = context.entry_sizes.get((w.topic, w.partition))
    if not average:
        return FIRST_PAGE
    return max(1, min(MAX_PAGE, int(budget / average) + 1))


def encode_entries(
    entries: list[Any] | RawReply,
    bits: int,
    high_watermark: int,
    budget: int,
    take_first: bool,
    config: TopicConfig,
    magic: int = 2,
    epochs: LeaderEpochs | None = None,
) -> tuple[list[bytes], int, int, bool, bool]:
    """(batches, entries taken, their bytes, stopped at the hw or the budget, a transactional
    batch among them) of raw XRANGE
    ``entries`` at or below ``high_watermark`` (V1's) within ``budget`` bytes (the first
    entry whatever its size when ``take_first``), as topic ``config`` has its batches
    (compression.type, message.timestamp.type). Budgets count uncompressed bytes.
    ``magic`` 0 or 1 (Fetch v0-3): each run is a MessageSet of that format instead, and
    transaction markers are taken and dropped, as Kafka's down-conversion drops them.
    ``epochs``: each batch carries the leader epoch of its last record (a position after
    it is in that epoch: KIP-320's validation asks where that epoch ended).
    ``entries`` may be the XRANGE reply's RESP bytes (a ``RawReply``): the compiled walk
    encodes its plain batches from them, and the entries are parsed only for a batch it
    leaves to the pure path."""
    rules = rules_of(config)
    codec, append_time = rules.compression_codec, rules.log_append_time
    batches: list[bytes] = []
    used = 0
    start = 0
    transactional = False
    # the compiled walk knows the plain uncompressed CreateTime batches only
    plain = magic == 2 and not codec and not append_time
    compiled = records.plain_batch if plain else None
    epoch_at = epochs.epoch_at if epochs is not None else None
    if isinstance(entries, RawReply):
        raw = entries
        compiled_raw = records.plain_batch_raw if plain else None
        pos = raw.first
        while compiled_raw is not None and start < raw.count:
            built_raw = compiled_raw(
                raw.data, pos, start, raw.count, bits, high_watermark, budget - used,
                take_first and start == 0, epoch_at,
            )  # fmt: skip
            if built_raw is None:
                break
            batch, start, pos, taken, done = built_raw
            batches.append(batch)
            used += taken
            if done:
                return batches, start, used, True, transactional
        if start == raw.count:
            return batches, start, used, False, transactional
        entries = raw.parsed()  # a batch the pure path encodes
    while start < len(entries):
        if compiled is not None:
            built = compiled(
                entries, start, bits, high_watermark, budget - used, take_first and start == 0,
                epoch_at,
            )  # fmt: skip
            if built is not None:
                batch, start, taken, done = built
                batches.append(batch)
                used += taken
                if done:
                    return batches, start, used, True, transactional
                continue
        if magic < 2:
            builder: Any = MessageSetBuilder(magic, codec)
        else:  # a marker's control batch is never compressed, as Kafka writes them
            builder = batch_builder(0 if is_control(entries[start][1]) else codec)
        walked = walk_entries(
            entries, start, bits, high_watermark, budget - used, take_first and start == 0,
            builder.append, append_time,
        )  # fmt: skip
        if walked.end > start:
            control = walked.control >= 0
            if magic < 2:
                if not control:
                    batches.append(builder.build(walked.base, append_time))
            else:
                last_ms = entry_offset(entries[walked.end - 1][0], bits) >> bits
                batches.append(finish_batch(
                    builder, walked.base, append_time and not control, walked.producer_id,
                    walked.producer_epoch, control,
                    epochs.epoch_at(last_ms) if epochs is not None else 0,
                ))  # fmt: skip
                transactional = transactional or walked.producer_id >= 0
            used += walked.used
        start = walked.end
        if walked.done:
            return batches, start, used, True, transactional
    return batches, start, used, False, transactional


async def _partition(
    context: KafkaContext,
    w: Wanted,
    read: FetchRead,
    budget: int,
    committed: bool,
    magic: int = 2,
) -> tuple[Answer, _Taken | None]:
    """The partition's answer and its records within ``budget`` bytes (its first record
    whatever its size), never above the high watermark the answer reports (read_committed:
    never at or above its last stable offset)."""
    assert w.config is not None
    answer = _answer_of(w, read, committed)  # of the first read: later pages keep it
    if answer.error:
        return answer, None
    taken = _Taken([], 0, [])
    await _take(context, w, read, answer.bound, budget, magic, taken)
    return answer, taken


async def _take(
    context: KafkaContext,
    w: Wanted,
    read: FetchRead,
    bound: int,
    budget: int,
    magic: int,
    taken: _Taken,
) -> None:
    """The records of ``read`` and the pages after it, up to ``bound``, into ``taken``
    until it holds ``budget`` bytes (its first record whatever its size when it holds none)."""
    assert w.config is not None
    bits = context.pod.kafka.bits
    key = (w.topic, w.partition)
    raw = _reads_raw(w.config, magic)  # later pages as the first (read_all's)
    while True:
        entries = read.entries
        batches, end, used, done, transactional = encode_entries(
            entries, bits, bound, budget - taken.used, not taken.batches, w.config, magic,
            context.pod.leader_epochs,
        )  # fmt: skip
        if end:
            taken.batches += batches
            taken.used += used
            taken.transactional = taken.transactional or transactional
            taken.pages.append((entries, end))
            seen = used / end
            old = context.entry_sizes.get(key)
            context.entry_sizes[key] = seen if old is None else (old + seen) / 2
        if done or not read.page_full or taken.used >= budget or not end:
            break
        # (not done: every entry was taken)
        next_offset = codec.entry_offset(last_entry_id(entries), bits) + 1
        read = await context.pod.kafka.start_read(
            w.config, w.partition, next_offset, _page(context, w, budget - taken.used),
            raw,
        )  # fmt: skip
