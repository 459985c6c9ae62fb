"""``adapter topic list`` (one line per topic, by name) and what ``topic alter`` prints: only
what changed."""

from __future__ import annotations

import json

import redis

from tests.support.cli import CliTarget


def test_list_shows_every_topic_by_name(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "tl")
    assert target.cli("topic", "list") == ""  # a deployment without topics
    target.cli("topic", "create", "orders", "--partitions", "4", "--replication-factor", "2",
               "--min-insync-replicas", "1")  # fmt: skip
    target.cli("topic", "create", "audit", "--partitions", "1", "--replication-factor", "1",
               "--min-insync-replicas", "1", "--config", "cleanup.policy=compact")  # fmt: skip
    assert target.cli("topic", "list").splitlines() == [
        "topic=audit partitions=1 replication_factor=1 min_insync_replicas=1 "
        "cleanup_policy=compact",
        "topic=orders partitions=4 replication_factor=2 min_insync_replicas=1 "
        "cleanup_policy=delete",
    ]
    target.cli("topic", "alter", "orders", "--partitions", "6")
    target.cli("topic", "delete", "audit")
    assert json.loads(target.cli("topic", "list", "--json")) == [
        {"name": "orders", "partitions": 6, "replication_factor": 2, "min_insync_replicas": 1,
         "cleanup_policy": "delete"},
    ]  # fmt: skip


def test_alter_prints_only_what_changed(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "tl")
    target.cli("topic", "create", "events", "--partitions", "2", "--replication-factor", "1",
               "--min-insync-replicas", "1")  # fmt: skip
    grown = target.cli("topic", "alter", "events", "--partitions", "3")
    assert grown.splitlines() == ["altered topic=events partitions=2->3"]  # no retention line
    retention = target.cli("topic", "alter", "events", "--retention-ms", "60000")
    assert retention.splitlines() == [
        "altered topic=events retention_ms=60000 retention_bytes=-1 retention_ignore_groups=false"
    ]
    both = target.cli("topic", "alter", "events", "--partitions", "5", "--retention-ms", "1000")
    assert both.splitlines() == [
        "altered topic=events partitions=3->5",
        "altered topic=events retention_ms=1000 retention_bytes=-1 retention_ignore_groups=false",
    ]
    stored = redis_client.hgetall(target.keys.topic("events"))
    assert stored[b"partitions"] == b"5" and stored[b"retention_ms"] == b"1000"
