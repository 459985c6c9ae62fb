"""``adapter topic create/alter --config NAME=VALUE`` and ``alter --delete-config NAME``:
validated by the Kafka config catalogue, stored as the Kafka admin APIs store them, shown
by ``topic describe``."""

from __future__ import annotations

import redis

from tests.support.cli import CliTarget


def test_create_alter_and_describe_configs(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "cfg")
    created = target.cli(
        "topic", "create", "events", "--replication-factor", "1", "--min-insync-replicas", "1",
        "--config", "cleanup.policy=compact", "--config", "max.message.bytes=2000",
    )  # fmt: skip
    assert "cleanup.policy=compact" in created and "max.message.bytes=2000" in created
    stored = redis_client.hgetall(target.keys.topic("events"))
    assert stored[b"cleanup_policy"] == b"compact"
    altered = target.cli(
        "topic", "alter", "events", "--config", "min.insync.replicas=1",
        "--config", "retention.ms=60000", "--delete-config", "cleanup.policy",
    )  # fmt: skip
    assert "retention.ms=60000" in altered and "cleanup.policy" not in altered
    described = target.cli("topic", "describe", "events")
    assert "configs=[max.message.bytes=2000 retention.ms=60000]" in described


def test_bad_configs_are_refused_with_kafka_words(
    redis_url: str, redis_client: redis.Redis
) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "cfg")
    for args, message in [
        (["create", "t", "--config", "retention.ms=-5"], "Value must be at least -1"),
        (["create", "t", "--config", "colour=blue"], "Unknown topic config name: colour"),
        (["create", "t", "--config", "novalue"], "is not NAME=VALUE"),
    ]:
        refusal = target.refused("topic", *args)
        assert message in refusal, refusal
    assert not redis_client.exists(target.keys.topic("t"))
    target.cli("topic", "create", "t", "--replication-factor", "1", "--min-insync-replicas", "1")
    refusal = target.refused("topic", "alter", "t", "--delete-config", "min.insync.replicas")
    assert "always has a value" in refusal
