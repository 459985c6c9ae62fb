"""A Fetch's later pages of one partition (adapter/kafka/fetch_reads.py ``_partition``) are
read as the first one is: where the compiled walk encodes a topic's records, every page
comes as RESP bytes (a ``RawReply``), never parsed into an object per field; and the
records of all the pages are the partition's, in order, once each."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatch

from adapter.kafka import fetch_reads
from adapter.kafka import records as kafka_records
from adapter.kafka.fetch_reads import Wanted, _partition
from adapter.pod import build_pod
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


def test_every_page_of_a_partition_is_read_as_resp_bytes(redis_url: str) -> None:
    async def body() -> None:
        settings = Settings(
            key_prefix="pages", replicator=False, topic_defaults=TopicDefaults(1, 1, 1)
        )
        client = connect(redis_url)
        pod = build_pod(settings, client, pod_id="pages-pod")
        running = asyncio.create_task(pod.run())
        try:
            config = await pod.partitions.topics.topic("paged")
            values = [b"v%d" % i for i in range(RECORDS)]
            written = await pod.partitions.produce(config, 0, [(b"k", v) for v in values])
            kafka = pod.kafka
            pages: list[Any] = []
            start_read = kafka.start_read

            def recorded(*args: Any, **kwargs: Any) -> Any:
                pending = start_read(*args, **kwargs)
                pages.append(pending)
                return pending

            kafka.start_read = recorded  # type: ignore[method-assign]
            context = SimpleNamespace(pod=pod, entry_sizes={})
            wanted = Wanted("paged", 0, 0, 1 << 20, config)
            # the first page as read_all starts it: FIRST_PAGE entries, raw
            first = await recorded(config, 0, 0, fetch_reads.FIRST_PAGE, True)
            answer, taken = await _partition(context, wanted, first, 1 << 20, False)  # type: ignore[arg-type]
            assert taken is not None and len(pages) >= 2  # pages after the first were read
            assert all(isinstance(entries, RawReply) for entries, _ in taken.pages)
            got = _offsets_and_values(b"".join(taken.batches))
            assert got == list(zip(written.offsets, values, strict=True))
            assert answer.high_watermark == written.offsets[-1] + 1
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await client.aclose()

    asyncio.run(body())
