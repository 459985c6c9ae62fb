"""Fixtures for the Spark connector tests: one redis-server child process and one local
SparkSession for the whole run, and a synchronous wrapper around the real produce/consume
scripts (``mapping.partitions.Partitions``) to write test data."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from adapter.pod import build_pod
from adapter.settings import Settings
from mapping.client import connect
from mapping.embedded import RedisProcess
from mapping.keys import Keys
from mapping.retention import enforce_topic
from mapping.topics import TopicConfig, TopicDefaults

ROOT = Path(__file__).resolve().parents[2]
# Single-replica topics: the hw follows every produce, no replicas needed.
SINGLE_REPLICA = TopicDefaults(partitions=3, replication_factor=1, min_insync_replicas=1)
T = TypeVar("T")


@pytest.fixture(scope="session")
def spark_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A throwaway redis-server (no persistence) on a free port, stopped at the end."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with RedisProcess(tmp_path_factory.mktemp("spark-redis"), appendonly=False) as server:
        yield server.url


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local SparkSession for the run (starting a JVM costs seconds)."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Spark's Python workers must import spark_connector and mapping from this checkout.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *paths])
    from pyspark.sql import SparkSession

    import spark_connector

    session = (
        SparkSession.builder.master("local[2]")
        .appName("spark-connector-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    yield session
    session.stop()


@pytest.fixture
def spark_topic() -> str:
    """A topic name no other test uses."""
    return f"spark-{uuid.uuid4().hex[:10]}"


class TopicWriter:
    """Blocking calls into an async ``Partitions`` whose event loop runs in its own thread, so a
    test (or a producer thread) can write through the real produce script."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "rsa",
        replica_lag_max_ms: int = 0,
        defaults: TopicDefaults = SINGLE_REPLICA,
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


@pytest.fixture
def writer(spark_redis_url: str) -> Iterator[TopicWriter]:
    """Single-replica topics (hw follows every produce) with 3 partitions."""
    topic_writer = TopicWriter(spark_redis_url)
    yield topic_writer
    topic_writer.close()
