"""Fixtures of the Spark connector tests: one redis-server child process and one local
SparkSession for the whole run, and a writer of test data through the real produce/consume
scripts."""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from mapping.connection.embedded import RedisProcess
from tests.support import ROOT
from tests.support.topic_writer import TopicWriter


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


@pytest.fixture
def writer(spark_redis_url: str) -> Iterator[TopicWriter]:
    """Single-replica topics (hw follows every produce) with 3 partitions."""
    topic_writer = TopicWriter(spark_redis_url)
    yield topic_writer
    topic_writer.close()
