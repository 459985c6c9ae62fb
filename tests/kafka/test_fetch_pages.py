"""A Fetch's reads (adapter/kafka/fetch_reads.py):

- a partition's later pages (``_partition``) are read as the first one is: where the
  compiled walk encodes a topic's records, every page comes as RESP bytes (a ``RawReply``),
  never parsed into an object per field; and the records of all the pages are the
  partition's, in order, once each;
- where the partitions' own byte limits add up to more than the response's, they read
  shares of it, and what the others left goes to those cut short: the pod reads about what
  it answers, and the answer still fills the response's limit, each partition's records
  from its position on, in order, once each;
- and whatever the limits, positions and order of the partitions (a hypothesis walk), each
  answer is a run of its partition's records from its position, within the limits."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kafka import fetch_reads
from adapter.kafka import records as kafka_records
from adapter.kafka.fetch_reads import Wanted, _partition, first_shares, last_offset, read_all
from adapter.pod import Pod, build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.connection.raw_replies import RawReply
from mapping.topic.topic_config import TopicDefaults

pytestmark = pytest.mark.skipif(
    kafka_records.plain_batch_raw is None, reason="the compiled walk is not built"
)

RECORDS = 300


def _offsets_and_values(data: bytes) -> list[tuple[int, bytes | None]]:
    found = []
    while data:
        size = int.from_bytes(data[8:12], "big") + 12
        batch = DefaultRecordBatch(data[:size])
        found += [(record.offset, record.value) for record in batch]
        data = data[size:]
    return found


@contextlib.asynccontextmanager
async def _serving(redis_url: str, prefix: str, partitions: int) -> AsyncIterator[Pod]:
    """A pod on ``redis_url`` (topics of ``partitions`` partitions, RF 1) running while the
    block does."""
    settings_ = Settings(
        key_prefix=prefix, replicator=False, topic_defaults=TopicDefaults(partitions, 1, 1)
    )
    client = connect(redis_url)
    pod = build_pod(settings_, client, pod_id=f"{prefix}-pod")
    running = asyncio.create_task(pod.run())
    try:
        yield pod
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await client.aclose()


def _recorded_reads(pod: Pod) -> list[Any]:
    """Every read ``pod.kafka.start_read`` starts from now on, in order (its pendings)."""
    kafka = pod.kafka
    reads: list[Any] = []
    start_read = kafka.start_read

    def recorded(*args: Any, **kwargs: Any) -> Any:
        pending = start_read(*args, **kwargs)
        reads.append(pending)
        return pending

    kafka.start_read = recorded  # type: ignore[method-assign]
    return reads


def test_every_page_of_a_partition_is_read_as_resp_bytes(redis_url: str) -> None:
    async def body() -> None:
        async with _serving(redis_url, "pages", 1) as pod:
            config = await pod.partitions.topics.topic("paged")
            values = [b"v%d" % i for i in range(RECORDS)]
            written = await pod.partitions.produce(config, 0, [(b"k", v) for v in values])
            pages = _recorded_reads(pod)
            context = SimpleNamespace(pod=pod, entry_sizes={})
            wanted = Wanted("paged", 0, 0, 1 << 20, config)
            # the first page as read_all starts it: FIRST_PAGE entries, raw
            first = await pod.kafka.start_read(config, 0, 0, fetch_reads.FIRST_PAGE, True)
            answer, taken = await _partition(context, wanted, first, 1 << 20, False)  # type: ignore[arg-type]
            assert taken is not None and len(pages) >= 2  # pages after the first were read
            assert all(isinstance(entries, RawReply) for entries, _ in taken.pages)
            got = _offsets_and_values(b"".join(taken.batches))
            assert got == list(zip(written.offsets, values, strict=True))
            assert answer.high_watermark == written.offsets[-1] + 1

    asyncio.run(body())


def test_shares_of_a_response_limit() -> None:
    # the partitions' limits fit in the response's: each reads its own
    assert first_shares([1000, 2000], 5000) == [1000, 2000]
    # they do not: an equal share each, never above a partition's own limit
    assert first_shares([1 << 20] * 4, 100_000) == [25_000] * 4
    assert first_shares([10_000, 1 << 20, 1 << 20], 60_000) == [10_000, 20_000, 20_000]
    # many partitions: MIN_SHARE at least
    assert first_shares([1 << 20] * 100, 100_000) == [fetch_reads.MIN_SHARE] * 100


def test_last_offset_of_a_batch() -> None:
    batch = b"".join([
        (1234).to_bytes(8, "big"), (60).to_bytes(4, "big"), bytes(4), b"\x02", bytes(4),
        bytes(2), (9).to_bytes(4, "big"), bytes(40),
    ])  # fmt: skip
    assert last_offset(batch) == 1243


def test_a_response_limit_below_the_partitions_is_read_as_shares(redis_url: str) -> None:
    limit = 100_000
    counts = [2000, 5, 2000, 2000]  # partition 1 has little: its share's rest goes to 0

    async def body() -> None:
        async with _serving(redis_url, "shares", len(counts)) as pod:
            config = await pod.partitions.topics.topic("shared")
            written = []
            for partition, count in enumerate(counts):
                values = [b"%d-%d-" % (partition, i) + b"x" * 90 for i in range(count)]
                result = await pod.partitions.produce(
                    config, partition, [(b"k", v) for v in values]
                )
                written.append(list(zip(result.offsets, values, strict=True)))
            reads = _recorded_reads(pod)
            context = SimpleNamespace(pod=pod, entry_sizes={})
            wanted = [Wanted("shared", p, 0, 1 << 20, config) for p in range(len(counts))]
            for _ in range(2):  # the second Fetch knows the partitions' entry sizes
                reads.clear()
                answers = await read_all(context, wanted, limit, False)  # type: ignore[arg-type]
                got = [_offsets_and_values(a.records or b"") for a in answers]
                for partition, records in enumerate(got):
                    assert records == written[partition][: len(records)]
                assert len(got[1]) == counts[1]
                # equal shares, and partition 0 got what partition 1 left of its own besides
                assert len(got[2]) == len(got[3]) > 0
                assert len(got[0]) > 1.8 * len(got[2])
                assert sum(len(a.records or b"") for a in answers) <= limit
                entries_read = sum(len(pending.result().entries) for pending in reads)
                answered_records = sum(len(records) for records in got)
                # each partition read its share, not its whole limit (every record)
                assert entries_read < 1.5 * answered_records < sum(counts)

    asyncio.run(body())


WALK_COUNTS = [0, 1, 40, 150, 300]  # records of each partition of the walk's topic


@pytest.fixture
def written_topic(redis_url: str) -> Iterator[tuple[Any, Any, list[list[tuple[int, bytes]]]]]:
    """(event loop, pod, each partition's (offset, value) list) of a topic whose records
    have values of 0-600 bytes and a few of 3,000; the pod runs while the loop does."""
    loop = asyncio.new_event_loop()
    serving = contextlib.AsyncExitStack()
    pod = loop.run_until_complete(
        serving.enter_async_context(_serving(redis_url, "walk", len(WALK_COUNTS)))
    )
    sizes = random.Random(7)

    async def write() -> list[list[tuple[int, bytes]]]:
        config = await pod.partitions.topics.topic("walked")
        written = []
        for partition, count in enumerate(WALK_COUNTS):
            values = [
                b"v" * (3000 if sizes.random() < 0.05 else sizes.randrange(601))
                for _ in range(count)
            ]
            offsets = []
            for start in range(0, count, 50):  # a produce call at most 50 records
                chunk = values[start : start + 50]
                result = await pod.partitions.produce(config, partition, [(b"k", v) for v in chunk])
                offsets += result.offsets
            written.append(list(zip(offsets, values, strict=True)))
        return written

    try:
        yield loop, pod, loop.run_until_complete(write())
    finally:
        loop.run_until_complete(serving.aclose())
        loop.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    limit=st.one_of(st.integers(1, 5000), st.integers(5000, 400_000)),
    own=st.lists(st.integers(0, 1 << 20), min_size=len(WALK_COUNTS), max_size=len(WALK_COUNTS)),
    starts=st.lists(st.floats(0, 1.05), min_size=len(WALK_COUNTS), max_size=len(WALK_COUNTS)),
    order=st.permutations(range(len(WALK_COUNTS))),
)
def test_a_fetch_answers_each_partition_a_run_of_its_records_within_the_limits(
    written_topic: tuple[Any, Any, list[list[tuple[int, bytes]]]],
    limit: int,
    own: list[int],
    starts: list[float],
    order: list[int],
) -> None:
    """Whatever the limits and positions: each partition's answer is its records from its
    position on, in order, once each; the response holds its limit (fetch_reads' bytes: a
    record's key and value and 32), each partition its own, unless one record alone is more;
    and a response with a record to give gives one (KIP-74)."""
    loop, pod, written = written_topic
    config = loop.run_until_complete(pod.partitions.topics.topic("walked"))
    firsts = []
    for p, fraction in zip(range(len(WALK_COUNTS)), starts, strict=True):
        records = written[p]
        index = min(int(fraction * (len(records) + 1)), len(records))
        firsts.append(index)
    wanted = []
    for p in order:
        records = written[p]
        index = firsts[p]
        offset = (
            records[index][0] if index < len(records) else (records[-1][0] + 1 if records else 0)
        )
        wanted.append(Wanted("walked", p, offset, own[p], config))
    context = SimpleNamespace(pod=pod, entry_sizes={})
    answers = loop.run_until_complete(read_all(context, wanted, limit, False))  # type: ignore[arg-type]
    total_used = total_records = 0
    for w, answer in zip(wanted, answers, strict=True):
        assert answer.error == 0
        got = _offsets_and_values(answer.records or b"")
        index = firsts[w.partition]
        assert got == written[w.partition][index : index + len(got)]
        used = sum(len(b"k") + len(value or b"") + 32 for _, value in got)
        assert used <= w.max_bytes or len(got) == 1
        total_used += used
        total_records += len(got)
    assert total_used <= limit or total_records == 1
    if any(firsts[p] < len(written[p]) for p in range(len(WALK_COUNTS))):
        assert total_records >= 1
