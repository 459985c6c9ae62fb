"""`mapping.partition.partitions.Partitions` straight against Redis: the produce script's id
assignment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core import codec
from mapping.core.errors import BrokerError
from mapping.core.keys import Keys
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicDefaults
from mapping.topic.topics import Topics


async def _with_partitions(
    redis_url: str, body: Callable[[Partitions], Awaitable[None]], bits: int = 10
) -> None:
    client = connect(redis_url, 5.0)
    keys = Keys(f"partitions-{uuid.uuid4().hex[:8]}")
    await pin_sequence_bits(client, keys, bits)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        topics = Topics(batcher, keys, topic_defaults=TopicDefaults(3, 1, 1))
        await body(Partitions(batcher, keys, topics, sequence_bits=bits))
    finally:
        runner.cancel()
        await client.aclose()


@pytest.mark.parametrize("bits", [10, 8])
def test_2000_records_in_one_script_call(redis_url: str, bits: int) -> None:
    """One script call runs inside one millisecond of Redis time: 2000 records overflow the
    sequence space (2^bits) and roll over to the next millisecond, never colliding."""

    async def body(partitions: Partitions) -> None:
        config = await partitions.topics.topic("burst")
        records = [(b"k", str(i).encode()) for i in range(2000)]
        result = await partitions.produce(config, 0, records)
        offsets = result.offsets
        assert len(offsets) == 2000
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
        assert result.high_watermark == offsets[-1]
        ids = [codec.decode(o, bits) for o in offsets]
        assert all(seq < 1 << bits for _, seq in ids)
        assert len({ms for ms, _ in ids}) == -(-2000 // (1 << bits))  # ceil
        consumed = []
        position = 0
        while True:
            reply = await partitions.consume(config, 0, position, 1000)
            if not reply.records:
                break
            consumed += reply.records
            position = reply.records[-1][0] + 1
        assert consumed == list(zip(offsets, (v for _, v in records), strict=True))
        # the next produce continues after the rollover
        more = await partitions.produce(config, 0, [(b"k", b"next")])
        assert more.offsets[0] > offsets[-1]

    asyncio.run(_with_partitions(redis_url, body, bits))


def test_concurrent_produces_share_pipelines(redis_url: str) -> None:
    async def body(partitions: Partitions) -> None:
        config = await partitions.topics.topic("concurrent")
        sent = partitions.batcher.pipelines_sent
        results = await asyncio.gather(
            *(partitions.produce(config, 1, [(b"k", str(i).encode())]) for i in range(2000))
        )
        offsets = [r.offsets[0] for r in results]
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
        assert partitions.batcher.pipelines_sent - sent < 100  # batched, not one per call

    asyncio.run(_with_partitions(redis_url, body))


def test_follower_refuses_produce(redis_url: str) -> None:
    async def body(partitions: Partitions) -> None:
        config = await partitions.topics.topic("roles")
        assert await partitions.set_role(config, 0, "follower") == -1
        with pytest.raises(BrokerError) as info:
            await partitions.produce(config, 0, [(b"k", b"v")])
        assert info.value.code == "NOT_LEADER"

    asyncio.run(_with_partitions(redis_url, body))


def test_a_read_past_the_remembered_log_end_keeps_the_byte_limit(redis_url: str) -> None:
    """A pod remembers a partition's log end from its last read; records appended since are
    read on in the same CONSUME (none up to hw is skipped), within the byte limit: a page cut
    there is full by bytes, and reading on from it finds the rest."""

    async def body(partitions: Partitions) -> None:
        config = await partitions.topics.topic("grown")
        first = await partitions.produce(config, 0, [(b"k", b"a" * 100)] * 3)
        page = await partitions.consume(config, 0, 0, 1000, 1000)  # learns the marks
        assert [o for o, _ in page.records] == first.offsets
        later = await partitions.produce(config, 0, [(b"k", b"b" * 300)] * 4)
        every = first.offsets + later.offsets
        page = await partitions.consume(config, 0, 0, 1000, 700)  # 100 + 100 + 100 + 300 + 300
        assert [o for o, _ in page.records] == every[:4]
        assert sum(len(v) for _, v in page.records[1:]) <= 700
        page = await partitions.consume(config, 0, page.records[-1][0] + 1, 1000, 10_000)
        assert [o for o, _ in page.records] == every[4:]
        assert page.high_watermark == every[-1]
        more = await partitions.produce(config, 0, [(b"k", b"c" * 10)] * 2)
        page = await partitions.consume(config, 0, every[4], 1000, 10_000)
        assert [o for o, _ in page.records] == every[4:] + more.offsets

    asyncio.run(_with_partitions(redis_url, body))
