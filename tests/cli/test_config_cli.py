"""``adapter config show|set|delete`` against a real Redis, and a pod taking what it set: the
cluster-wide broker configs and a group's configs stored where IncrementalAlterConfigs
stores them, a broker change announced to the pods, a bad name or value refused in one line
with nothing stored."""

from __future__ import annotations

import json
import uuid

import redis
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.kafka import KAFKA_PODS_PREFIX
from tests.support.pods import Pod
from tests.support.waiting import retried

MIN_LOCK = "group.share.min.record.lock.duration.ms"
LOCK = "share.record.lock.duration.ms"


def test_set_show_and_delete(redis_url: str, redis_client: redis.Redis) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "config")
    changed = target.announced(
        target.keys.broker_configs_channel,
        "config", "set", f"{MIN_LOCK}=1000", "message.max.bytes=2000000",
    )  # fmt: skip
    assert changed.splitlines() == [f"{MIN_LOCK}=1000", "message.max.bytes=2000000"]
    assert redis_client.hgetall(target.keys.broker_configs) == {
        MIN_LOCK.encode(): b"1000",
        b"message.max.bytes": b"2000000",
    }
    shown = json.loads(target.cli("config", "show", "--json"))
    assert shown[MIN_LOCK] == {"value": "1000", "source": "set"}
    assert shown["compression.type"] == {"value": "producer", "source": "default"}
    assert "broker.id" not in shown  # (read-only: the pod's own setting)
    assert target.cli("config", "delete", "message.max.bytes") == (
        "message.max.bytes (default again)\n"
    )
    assert target.cli("config", "set", f"{MIN_LOCK}=1000") == "unchanged\n"

    # a group's configs, bounded by the broker configs just set
    target.cli("config", "set", "--group", "g1", f"{LOCK}=3000", "share.auto.offset.reset=earliest")
    assert redis_client.hgetall(target.keys.group_configs("g1")) == {
        LOCK.encode(): b"3000",
        b"share.auto.offset.reset": b"earliest",
    }
    assert f"{LOCK}=3000 (set)" in target.cli("config", "show", "--group", "g1").splitlines()
    target.cli("config", "delete", "--group", "g1", LOCK)
    assert redis_client.hkeys(target.keys.group_configs("g1")) == [b"share.auto.offset.reset"]


def test_bad_names_and_values_are_refused_in_one_line(
    redis_url: str, redis_client: redis.Redis
) -> None:
    target = CliTarget.fresh(redis_url, redis_client, "config")
    for args, message in [
        (["set", "broker.id=3"], "not a dynamic broker config: broker.id"),
        (["set", "no.such.config=1"], "not a dynamic broker config: no.such.config"),
        (["set", f"{MIN_LOCK}=-4"], "Value must be at least 1"),
        (["set", "log.retention.ms"], "expected NAME=VALUE: log.retention.ms"),
        (["set", "--group", "g1", f"{LOCK}=3000"], f"{LOCK} must be greater than or equal to"),
        (["set", "--group", "g1", "share.auto.offset.reset=middle"], "share.auto.offset.reset"),
        (["delete", "--group", "g1", "message.max.bytes"], "not a group config: message.max.bytes"),
    ]:  # fmt: skip
        error = target.refused_in_one_line("config", *args)
        assert message in error, error
    assert not redis_client.exists(target.keys.broker_configs, target.keys.group_configs("g1"))


def test_a_pod_takes_a_bound_set_here(
    kafka_pods: tuple[Pod, Pod], redis_url: str, redis_client: redis.Redis
) -> None:
    """Lowered here, a group config's bound lets a pod take a shorter share lock (what
    librdkafka's own test cluster sets, and Kafka's tools set with --entity-default)."""
    a, _ = kafka_pods
    keys = Keys(KAFKA_PODS_PREFIX)
    target = CliTarget(redis_url, keys, redis_client)
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    group = f"g-{uuid.uuid4().hex[:8]}"
    short = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(LOCK, "3000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    try:
        target.cli("config", "set", f"{MIN_LOCK}=1000")
        # until the pod read the change notice
        retried(lambda: list(admin.incremental_alter_configs([short]).values())[0].result(10))
        assert redis_client.hget(keys.group_configs(group), LOCK) == b"3000"
    finally:
        target.cli("config", "delete", MIN_LOCK)
