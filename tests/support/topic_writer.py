"""Writing test data through the real produce/consume scripts (``mapping.partition.partitions``)
from synchronous code: the Spark tests' ``writer`` fixture, and tests of the command line."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from adapter.pod import build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.core.keys import Keys
from mapping.operations.retention import enforce_topic
from mapping.topic.topic_config import TopicConfig, TopicDefaults

# Single-replica topics: the hw follows every produce, no replicas needed.
SINGLE_REPLICA_TOPICS = TopicDefaults(partitions=3, replication_factor=1, min_insync_replicas=1)
T = TypeVar("T")


class TopicWriter:
    """Blocking calls into an async ``Partitions`` whose event loop runs in its own thread, so a
    test (or a producer thread) can write through the real produce script."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rsa",
        replica_lag_max_ms: int = 0,
        defaults: TopicDefaults = SINGLE_REPLICA_TOPICS,
    ) -> None:
        self.keys = Keys(prefix)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._client = connect(url)
        settings = Settings(
            key_prefix=prefix, replica_lag_max_ms=replica_lag_max_ms, topic_defaults=defaults
        )
        pod = build_pod(settings, self._client)  # its parts; only the batcher runs
        self._batcher, self.partitions = pod.batcher, pod.partitions
        self._kafka, self._txns = pod.kafka, pod.partition_txns
        self._flusher = self._call(self._start_flusher())

    async def _start_flusher(self) -> asyncio.Task[None]:
        return asyncio.create_task(self._batcher.run())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=60)

    def topic(self, name: str) -> TopicConfig:
        return self._call(self.partitions.topics.topic(name))

    def produce(self, topic: str, partition: int, records: list[tuple[bytes, bytes]]) -> list[int]:
        config = self.topic(topic)
        return self._call(self.partitions.produce(config, partition, records)).offsets

    def txn_add(self, topic: str, partition: int, producer_id: int, epoch: int) -> int:
        """Register a transaction on the partition (what AddPartitionsToTxn does)."""
        return self._call(self._txns.add(self.topic(topic), partition, producer_id, epoch))

    def txn_append(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        epoch: int,
        base_sequence: int,
        records: list[tuple[bytes, bytes]],
    ) -> tuple[int, int, int]:
        """A transactional batch through kafka/produce.lua: (status, first, last offset)."""
        batch = [(k, v, 0, []) for k, v in records]

        async def append() -> tuple[int, int, int]:
            result = await self._kafka.append_batch(
                await self.partitions.topics.topic(topic),
                partition,
                batch,
                producer_id,
                epoch,
                base_sequence,
                transactional=True,
            )
            return result.status, result.base_offset, result.last_offset

        return self._call(append())

    def txn_end(
        self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool
    ) -> int | None:
        """The transaction's commit or abort marker on the partition (its offset)."""
        config = self.topic(topic)
        return self._call(self._txns.write_marker(config, partition, producer_id, epoch, commit))

    def consume_all(self, topic: str, partition: int) -> list[tuple[int, bytes]]:
        """Every visible record via the consume script (which also refreshes the stored hw)."""
        config = self.topic(topic)
        records: list[tuple[int, bytes]] = []
        position = 0
        while True:
            page = self._call(self.partitions.consume(config, partition, position, 1000)).records
            if not page:
                return records
            records.extend(page)
            position = page[-1][0] + 1

    def trim_committed(self, topic: str) -> None:
        """Retention as a pod applies it, with ``retention.ms`` 0: every committed record of
        ``topic`` goes (groups ignored); then retention is off again."""
        topic_key = self.keys.topic(topic)

        async def trim() -> None:
            await self._client.hset(
                topic_key, mapping={"retention_ms": 0, "retention_ignore_groups": 1}
            )
            try:
                await enforce_topic(self.partitions, topic)
            finally:
                await self._client.hset(topic_key, "retention_ms", -1)

        self._call(trim())

    def close(self) -> None:
        async def shutdown() -> None:
            self._flusher.cancel()
            await self._client.aclose()

        self._call(shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
