"""Kafka's config APIs with real admin clients: CreateTopics with any topic config,
DescribeConfigs (sources, synonyms, documentation), IncrementalAlterConfigs (SET, DELETE,
APPEND, SUBTRACT), the legacy AlterConfigs, validate_only, the BROKER and GROUP resources, and
a change made through one pod seen by the other without a restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from adapter.kafka.versions import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS
from mapping.core.keys import Keys
from mapping.topic.topic_configs import TOPIC_CONFIGS
from tests.support.kafka import KAFKA_PODS_PREFIX, RawKafka
from tests.support.pods import Pod
from tests.support.waiting import retried, wait_until


@pytest.fixture
def admins(kafka_pods: tuple[Pod, Pod]) -> Iterator[tuple[AdminClient, AdminClient]]:
    a, b = kafka_pods
    yield tuple(  # type: ignore[misc]
        AdminClient({"bootstrap.servers": p.bootstrap, "socket.timeout.ms": 5000}) for p in (a, b)
    )


def _describe(admin: AdminClient, resource: ConfigResource, **options: bool) -> dict:
    (future,) = admin.describe_configs([resource], request_timeout=10, **options).values()
    return future.result(10)


def _alter(admin: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType],
           validate_only: bool = False) -> None:  # fmt: skip
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, v, op in ops]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    (future,) = admin.incremental_alter_configs(
        [resource], validate_only=validate_only, request_timeout=10
    ).values()
    future.result(10)


BROKER = 4


def _raw_alter(kind: int, name: str, config: str, value: str) -> object:
    request = INCREMENTAL_ALTER_CONFIGS.request
    resource = request.AlterConfigsResource
    entry = resource.AlterableConfig(name=config, config_operation=0, value=value)
    return request[1](
        resources=[resource(resource_type=kind, resource_name=name, configs=[entry])],
        validate_only=False,
    )


def _raw_describe(kind: int, name: str) -> object:
    request = DESCRIBE_CONFIGS.request
    resource = request.DescribeConfigsResource(
        resource_type=kind, resource_name=name, configuration_keys=None
    )
    return request[4](resources=[resource], include_synonyms=True, include_documentation=True)


def _create(admin: AdminClient, topic: str, config: dict[str, str]) -> None:
    (future,) = admin.create_topics([NewTopic(topic, 1, 1, config=config)]).values()
    future.result(10)


def test_create_topics_takes_any_config_and_refuses_bad_ones(
    admins: tuple[AdminClient, AdminClient], topic: str, redis_client
) -> None:
    admin, _ = admins
    _create(admin, topic, {"cleanup.policy": "compact", "max.message.bytes": "2000",
                           "message.timestamp.type": "LogAppendTime"})  # fmt: skip
    stored = redis_client.hgetall(Keys(KAFKA_PODS_PREFIX).topic(topic))
    assert stored[b"cleanup_policy"] == b"compact"
    assert stored[b"max_message_bytes"] == b"2000"
    assert stored[b"message_timestamp_type"] == b"LogAppendTime"
    refused = {
        "no.such.config": "Unknown topic config name: no.such.config",
        "retention.ms": "Invalid value -2 for configuration retention.ms: Value must be at "
        "least -1",
        "message.timestamp.type": "String must be one of: CreateTime, LogAppendTime",
        "preallocate": "Expected value to be either true or false",
        "remote.storage.enable": "Tiered Storage functionality is disabled",
    }
    values = {"no.such.config": "1", "retention.ms": "-2", "message.timestamp.type": "Now",
              "preallocate": "maybe", "remote.storage.enable": "true"}  # fmt: skip
    for name, message in refused.items():
        with pytest.raises(KafkaException, match="INVALID_CONFIG") as caught:
            _create(admin, f"{topic}-bad", {name: values[name]})
        assert message in caught.value.args[0].str()
    with pytest.raises(KafkaException, match="conflict topic config setting"):
        _create(admin, f"{topic}-bad",
                {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})  # fmt: skip
    assert admin.list_topics(timeout=10).topics.get(f"{topic}-bad") is None


def test_describe_configs_sources_and_synonyms(
    admins: tuple[AdminClient, AdminClient], topic: str
) -> None:
    admin, _ = admins
    _create(admin, topic, {"retention.ms": "60000"})
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = _describe(admin, resource)
    assert set(configs) == set(TOPIC_CONFIGS)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert [s.name for s in retention.synonyms.values()][:2] == ["retention.ms", "log.retention.ms"]
    default = configs["cleanup.policy"]
    assert (default.value, default.source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    assert default.is_default and not default.is_read_only
    assert configs["segment.ms"].value == "604800000"
    # the filter on names (configuration_keys)
    (future,) = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": ""})]
    ).values()
    assert set(future.result(10)) >= {"retention.ms"}
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        _describe(admin, ConfigResource(ResourceType.TOPIC, f"{topic}-none"))


def test_incremental_alter_configs_all_four_operations(
    admins: tuple[AdminClient, AdminClient], topic: str
) -> None:
    admin, other = admins
    _create(admin, topic, {})
    op = AlterConfigOpType
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def policy() -> str:
        return _describe(other, resource)["cleanup.policy"].value

    _alter(admin, topic, ("cleanup.policy", "compact", op.APPEND))
    assert policy() == "delete,compact"
    _alter(admin, topic, ("cleanup.policy", "delete", op.SUBTRACT))
    assert policy() == "compact"
    _alter(admin, topic, ("cleanup.policy", "delete", op.SET),
           ("min.insync.replicas", "3", op.SET))  # fmt: skip
    described = _describe(other, resource)
    assert (described["cleanup.policy"].value, described["min.insync.replicas"].value) == (
        "delete", "3",
    )  # fmt: skip
    _alter(admin, topic, ("cleanup.policy", None, op.DELETE))
    assert _describe(other, resource)["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    _alter(admin, topic, ("retention.ms", "1234", op.SET), validate_only=True)
    assert _describe(other, resource)["retention.ms"].value == "-1"
    with pytest.raises(KafkaException, match="append is not allowed"):
        _alter(admin, topic, ("retention.ms", "1", op.APPEND))
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        _alter(admin, topic, ("min.cleanable.dirty.ratio", "1.5", op.SET))
    with pytest.raises(KafkaException, match="Unknown topic config name"):
        _alter(admin, topic, ("colour", "blue", op.SET))


def test_legacy_alter_configs_replaces_the_whole_set(
    admins: tuple[AdminClient, AdminClient], topic: str
) -> None:
    admin, other = admins
    _create(admin, topic, {"retention.ms": "60000", "cleanup.policy": "compact"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.bytes": "1000"})
    (future,) = admin.alter_configs([resource], request_timeout=10).values()
    future.result(10)
    configs = _describe(other, ConfigResource(ResourceType.TOPIC, topic))
    assert configs["retention.bytes"].value == "1000"
    assert configs["retention.ms"].value == "-1"  # not in the new set: back to the default
    assert configs["cleanup.policy"].value == "delete"


def test_broker_resource_defaults_reach_topics_on_every_pod(
    admins: tuple[AdminClient, AdminClient], kafka_pods: tuple[Pod, Pod], topic: str,
    redis_client,
) -> None:  # fmt: skip
    admin, other = admins
    _create(admin, topic, {})
    broker_id = min(admin.list_topics(timeout=10).brokers)
    broker = _describe(admin, ConfigResource(ResourceType.BROKER, str(broker_id)))
    assert broker["broker.id"].value == str(broker_id)
    assert broker["broker.id"].is_read_only and not broker["log.segment.bytes"].is_read_only
    assert broker["min.insync.replicas"].value == "1"  # the test pods' --default-min-isr
    assert broker["min.insync.replicas"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    # what groups do between the protocols: Kafka's default, the pods' only way
    assert broker["group.consumer.migration.policy"].value == "bidirectional"
    op = AlterConfigOpType
    a, b = kafka_pods
    # the default cluster level (resource name ""), which the admin clients cannot name
    raw = RawKafka(a.kafka_port)
    try:
        reply = raw.call(INCREMENTAL_ALTER_CONFIGS, 1, _raw_alter(BROKER, "", "log.segment.bytes",
                                                                 "5000000"))  # fmt: skip
        assert [r.error_code for r in reply.responses] == [0]
        resource = ConfigResource(ResourceType.TOPIC, topic)
        # the other pod hears of it and gives its topics the new default
        segment = wait_until(
            lambda: (
                (entry := _describe(other, resource)["segment.bytes"]).value == "5000000" and entry
            )
        )
        assert segment.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        with RawKafka(b.kafka_port) as other_raw:
            (listed,) = other_raw.call(DESCRIBE_CONFIGS, 4, _raw_describe(BROKER, "")).results
        assert [(c.name, c.value, c.config_source) for c in listed.configs] == [
            ("log.segment.bytes", "5000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        ]
        assert listed.configs[0].documentation  # include_documentation
        per_broker = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[
            ConfigEntry("log.segment.bytes", "1", incremental_operation=op.SET)])  # fmt: skip
        with pytest.raises(KafkaException, match="INVALID_REQUEST"):
            list(admin.incremental_alter_configs([per_broker]).values())[0].result(10)
        reply = raw.call(
            INCREMENTAL_ALTER_CONFIGS, 1, _raw_alter(BROKER, "", "num.partitions", "5")
        )
        (refused,) = reply.responses
        assert refused.error_code == 42  # INVALID_REQUEST
        assert refused.error_message.startswith("Cannot update these configs dynamically")
    finally:
        raw.close()
        redis_client.delete(Keys(KAFKA_PODS_PREFIX).broker_configs)
        redis_client.publish(Keys(KAFKA_PODS_PREFIX).broker_configs_channel, "changed")


def test_group_resource_configs(admins: tuple[AdminClient, AdminClient], topic: str) -> None:
    admin, other = admins
    group = f"g-{topic}"
    op = AlterConfigOpType
    session = "consumer.session.timeout.ms"
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(session, "50000", incremental_operation=op.SET)])  # fmt: skip
    (future,) = admin.incremental_alter_configs([resource], request_timeout=10).values()
    future.result(10)
    configs = _describe(other, ConfigResource(ResourceType.GROUP, group))
    entry = configs[session]
    assert (entry.value, entry.source) == ("50000", ConfigSource.GROUP_CONFIG.value)
    assert configs["consumer.heartbeat.interval.ms"].value == "5000"
    too_short = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(session, "100", incremental_operation=op.SET)])  # fmt: skip
    with pytest.raises(KafkaException, match="group.consumer.min.session.timeout.ms"):
        list(admin.incremental_alter_configs([too_short]).values())[0].result(10)


def test_group_config_bounds_are_cluster_wide_broker_configs(
    admins: tuple[AdminClient, AdminClient], kafka_pods: tuple[Pod, Pod], topic: str,
    redis_client,
) -> None:  # fmt: skip
    """A group config's bounds (Kafka's group.share.min.record.lock.duration.ms ...) are
    cluster-wide broker configs: lowered through one pod, a shorter share lock is taken by
    the other (as a Kafka cluster started with a lower minimum takes it)."""
    _, other = admins
    op = AlterConfigOpType
    lock = "share.record.lock.duration.ms"
    short = ConfigResource(ResourceType.GROUP, f"g-{topic}", incremental_configs=[
        ConfigEntry(lock, "3000", incremental_operation=op.SET)])  # fmt: skip
    with pytest.raises(KafkaException, match="group.share.min.record.lock.duration.ms"):
        list(other.incremental_alter_configs([short]).values())[0].result(10)
    a, _ = kafka_pods
    try:
        with RawKafka(a.kafka_port) as raw:  # the default cluster level (resource name "")
            reply = raw.call(INCREMENTAL_ALTER_CONFIGS, 1, _raw_alter(
                BROKER, "", "group.share.min.record.lock.duration.ms", "1000"))  # fmt: skip
        assert [r.error_code for r in reply.responses] == [0]
        # until the other pod read the change notice
        retried(
            lambda: list(other.incremental_alter_configs([short]).values())[0].result(10),
            KafkaException,
        )
        described = _describe(other, ConfigResource(ResourceType.GROUP, f"g-{topic}"))
        assert described[lock].value == "3000"
    finally:
        redis_client.delete(Keys(KAFKA_PODS_PREFIX).broker_configs)
        redis_client.publish(Keys(KAFKA_PODS_PREFIX).broker_configs_channel, "changed")


def test_kafka_python_admin_alters_and_describes(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    from kafka.admin import ConfigResource as KResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    a, _ = kafka_pods
    admin = KafkaAdminClient(bootstrap_servers=a.bootstrap, request_timeout_ms=5000)
    try:
        admin.create_topics([KNewTopic(topic, 1, 1, topic_configs={"flush.ms": "1000"})])
        changed = KResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "3600000"})
        admin.alter_configs([changed])  # IncrementalAlterConfigs: flush.ms stays
        described = admin.describe_configs([KResource(ConfigResourceType.TOPIC, topic)])
        assert {n: c["value"] for n, c in described["topic"][topic].items()} == {
            "flush.ms": "1000", "segment.ms": "3600000", "min.insync.replicas": "1",
        }  # fmt: skip
        # AlterConfigs (kafka-python sends the other modified configs along)
        admin.alter_configs([changed], incremental=False)
        described = admin.describe_configs([KResource(ConfigResourceType.TOPIC, topic)])
        assert described["topic"][topic]["segment.ms"]["value"] == "3600000"
        cluster = admin.describe_cluster()
        assert cluster["cluster_id"]
    finally:
        admin.close()
