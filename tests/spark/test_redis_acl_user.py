"""The connector under a Redis ACL user confined to one deployment's prefix (the rule of
``spark_connector.redis_acl``), through the shared local SparkSession and a real
redis-server: the reader reads what the produce script wrote, the sink writes (a new topic,
acks=all), and the same user pointed at another deployment's prefix is refused with a clear
error and leaves that deployment untouched. A read-only user reads and cannot write."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from mapping.core.keys import Keys
from spark_connector.redis_acl import acl_rule, setuser_line
from tests.support import ROOT
from tests.support.topic_writer import TopicWriter

pytestmark = pytest.mark.spark

FORMAT = "redis-topics"
PASSWORD = "Spark-pw-4711"
NEW_TOPIC = {"topic.partitions": "2", "topic.replicationFactor": "1",
             "topic.minInsyncReplicas": "1"}  # fmt: skip


@dataclass(frozen=True)
class Deployments:
    url: str  # the admin's (default user)
    mine: str  # the prefix the users are confined to
    other: str  # another deployment's prefix
    user: str  # reads and writes ~mine:*
    reader: str  # reads ~mine:* only

    def login_url(self, user: str) -> str:
        return self.url.replace("redis://", f"redis://{user}:{PASSWORD}@")


@pytest.fixture
def deployments(spark_redis_url: str) -> Iterator[Deployments]:
    tag = uuid.uuid4().hex[:8]
    found = Deployments(
        spark_redis_url, f"dep{tag}", f"oth{tag}", f"spark-{tag}", f"spark-ro-{tag}"
    )
    admin = redis.Redis.from_url(spark_redis_url)
    admin.execute_command("ACL", "SETUSER", found.user, "on", f">{PASSWORD}",
                          *acl_rule(found.mine))  # fmt: skip
    admin.execute_command("ACL", "SETUSER", found.reader, "on", f">{PASSWORD}",
                          *acl_rule(found.mine, read_only=True))  # fmt: skip
    try:
        yield found
    finally:
        admin.execute_command("ACL", "DELUSER", found.user, found.reader)
        admin.close()


def produce(url: str, prefix: str, topic: str, values: list[str]) -> None:
    """What a pod of deployment ``prefix`` appends (the real produce script), as the admin."""
    writer = TopicWriter(url, prefix=prefix)
    try:
        writer.produce(topic, 0, [(b"k", v.encode()) for v in values])
    finally:
        writer.close()


def read(spark: Any, prefix: str, topic: str, **options: str) -> Any:
    reader = spark.read.format(FORMAT).option("keyPrefix", prefix).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def write(df: Any, prefix: str, topic: str, **options: str) -> None:
    writer = df.write.format(FORMAT).option("keyPrefix", prefix).option("topic", topic)
    for name, value in {**NEW_TOPIC, **options}.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def refused(error: pytest.ExceptionInfo[BaseException], user: str, prefix: str) -> None:
    """The clear error: the connector's, naming the user, the prefix and Redis' NOPERM."""
    message = str(error.value)
    assert "RedisPermissionDenied" in message, message
    assert f"user {user!r} on keyPrefix {prefix!r}" in message, message
    assert "NOPERM" in message, message
    assert PASSWORD not in message


@pytest.mark.slow
def test_a_user_of_one_prefix_reads_and_writes_there_only(
    spark: Any, deployments: Deployments, spark_topic: str
) -> None:
    d = deployments
    produce(d.url, d.mine, spark_topic, ["a", "b", "c"])
    produce(d.url, d.other, spark_topic, ["secret"])
    login = {"redis.url": d.url, "redis.username": d.user, "redis.password": PASSWORD}

    # The reader, login in options: the topic a pod wrote.
    rows = read(spark, d.mine, spark_topic, **login).orderBy("offset").collect()
    assert [r.value for r in rows] == ["a", "b", "c"]

    # The sink, login in the URL: a new topic (created, announced), acks=all (hw channel).
    out = f"{spark_topic}-out"
    df = spark.createDataFrame([("k1", "x"), ("k2", "y"), (None, "z")], "key string, value string")
    write(df, d.mine, out, **{"redis.url": d.login_url(d.user)})
    back = read(spark, d.mine, out, **login).collect()
    assert sorted(r.value for r in back) == ["x", "y", "z"]

    # The other deployment: refused on the driver, before any task, both ways.
    with pytest.raises(Exception) as error:
        read(spark, d.other, spark_topic, **login).collect()
    refused(error, d.user, d.other)
    with pytest.raises(Exception) as error:
        write(df, d.other, out, **{"redis.url": d.login_url(d.user)})
    refused(error, d.user, d.other)
    admin = redis.Redis.from_url(d.url)
    try:
        assert admin.exists(Keys(d.other).topic(out)) == 0  # nothing created there
        assert admin.smembers(Keys(d.other).topics) == {spark_topic.encode()}
    finally:
        admin.close()


@pytest.mark.slow
def test_a_read_only_user_reads_and_cannot_write(
    spark: Any, deployments: Deployments, spark_topic: str
) -> None:
    d = deployments
    produce(d.url, d.mine, spark_topic, ["r1", "r2"])
    login = {"redis.url": d.login_url(d.reader)}
    rows = read(spark, d.mine, spark_topic, **login, startingOffsets="earliest").collect()
    assert sorted(r.value for r in rows) == ["r1", "r2"]

    df = spark.createDataFrame([("k", "w")], "key string, value string")
    with pytest.raises(Exception) as error:
        write(df, d.mine, spark_topic, **login)
    refused(error, d.reader, d.mine)
    assert len(read(spark, d.mine, spark_topic, **login).collect()) == 2  # nothing written


def test_the_readme_shows_the_rules() -> None:
    readme = (ROOT / "spark_connector" / "README.md").read_text()
    assert setuser_line("rsa") in readme
    assert setuser_line("rsa", "spark-reader", read_only=True) in readme
