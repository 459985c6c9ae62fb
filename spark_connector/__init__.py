"""PySpark Python data source "redis-topics": read and write the adapter's topics straight
from Redis.

Call ``spark_connector.register(spark)``, then ``spark.readStream.format("redis-topics")``
(or ``spark.read``) with options ``redis.url`` and ``topic``; ``df.write`` /
``df.writeStream`` with the same format write topics (sink.py);
the rest in this folder's README.md and docs/guide.md.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from spark_connector.errors import (
    ConnectorError,
    DataLoss,
    NoOffsetForTimestamp,
    OptionError,
    RedisPermissionDenied,
    RedisUnreachable,
    TopicNotFound,
)
from spark_connector.source import SOURCE_NAME, RedisTopicsDataSource


def register(spark: SparkSession) -> None:
    """Make ``format("redis-topics")`` available in this session."""
    spark.dataSource.register(RedisTopicsDataSource)


__all__ = [
    "SOURCE_NAME",
    "ConnectorError",
    "DataLoss",
    "NoOffsetForTimestamp",
    "OptionError",
    "RedisPermissionDenied",
    "RedisTopicsDataSource",
    "RedisUnreachable",
    "TopicNotFound",
    "register",
]
