"""Admin clients (confluent-kafka, kafka-python): CreateTopics with configs, DescribeConfigs,
DescribeCluster; the topics they make are ordinary topics (V1 sees their partitions, the
retention task reads their retention from the topic hash). Names Kafka reserves for its
internal topics are never created."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from adapter.client import Client
from adapter.client.client import RequestFailed
from mapping.core.keys import Keys
from mapping.operations.inspection import retention_of
from mapping.topic.brokers import leader_index, partition_replicas
from mapping.topic.topic_configs import TOPIC_CONFIGS
from tests.support.kafka import KAFKA_PODS_PREFIX
from tests.support.pods import Pod
from tests.support.waiting import wait_until


def test_confluent_admin_creates_and_describes_topics(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_client
) -> None:
    a, b = kafka_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "socket.timeout.ms": 5000})
    created = admin.create_topics(
        [NewTopic(topic, 4, 1, config={"retention.ms": "60000"})], request_timeout=10
    )
    assert created[topic].result(10) is None
    again = admin.create_topics([NewTopic(topic, 4, 1)], request_timeout=10)
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        again[topic].result(10)
    invalid = admin.create_topics(
        [NewTopic(topic + "-x", 1, 1, config={"cleanup.policy": "shred"})], request_timeout=10
    )
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        invalid[topic + "-x"].result(10)

    (described,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs = {name: entry.value for name, entry in described.result(10).items()}
    assert set(configs) == set(TOPIC_CONFIGS)  # every topic config, set or not
    assert (configs["retention.ms"], configs["retention.bytes"]) == ("60000", "-1")
    assert configs["min.insync.replicas"] == "1"
    # an ordinary topic: V1 sees its four partitions, retention reads the topic hash
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        assert v1.consume(topic, 3, 0).records == []
        with pytest.raises(RequestFailed, match="invalid partition"):
            v1.consume(topic, 4, 0)
    assert retention_of(redis_client.hgetall(Keys(KAFKA_PODS_PREFIX).topic(topic))).ms == 60000


def test_kafka_python_admin(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    a, b = kafka_pods
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=5000)
    try:
        reply = admin.create_topics(
            [KNewTopic(topic, 2, 1, topic_configs={"retention.bytes": "1000000"})]
        )
        (result,) = reply["topics"]
        assert (result["error_code"], result["num_partitions"]) == (0, 2)
        described = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)])
        assert described["topic"][topic]["retention.bytes"]["value"] == "1000000"
        cluster = admin.describe_cluster()
        assert {broker["port"] for broker in cluster["brokers"]} == {a.kafka_port, b.kafka_port}
    finally:
        admin.close()


def test_confluent_admin_alters_retention_and_deletes_records(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_client
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    a, b = kafka_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "socket.timeout.ms": 5000})
    assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10) is None
    resource = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[ConfigEntry("retention.bytes", "5000000",
                                         incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    (altered,) = admin.incremental_alter_configs([resource]).values()
    altered.result(10)
    assert retention_of(redis_client.hgetall(Keys(KAFKA_PODS_PREFIX).topic(topic))).bytes == 5000000
    refused = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[ConfigEntry("min.insync.replicas", "0",
                                         incremental_operation=AlterConfigOpType.SET)],
    )  # fmt: skip
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        list(admin.incremental_alter_configs([refused]).values())[0].result(10)

    producer = Producer({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 5000})
    delivered: list = []
    for value in (b"1", b"2", b"3"):
        producer.produce(
            topic, value=value, partition=0, on_delivery=lambda e, m: delivered.append(m)
        )
    assert producer.flush(15) == 0
    second = delivered[1].offset()
    (deleted,) = admin.delete_records([TopicPartition(topic, 0, second)]).values()
    assert deleted.result(10).low_watermark == second
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "del",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        got = []
        for _ in range(20):
            got += [m for m in consumer.consume(10, 0.5) if m.error() is None]
            if len(got) >= 2:
                break
        assert [m.value() for m in got] == [b"2", b"3"]
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[0] == second
    finally:
        consumer.close()


# --- names Kafka reserves (issue 20, item 11) ------------------------------------------------

RESERVED = ["__consumer_offsets", "__transaction_state", "__share_group_state",
            "__cluster_metadata"]  # fmt: skip


def test_kafka_internal_topic_names_are_never_created(
    kafka_pods: tuple[Pod, Pod], redis_client
) -> None:
    """Tools ask Metadata for Kafka's internal topics (allowing auto-creation); Kafka makes
    them itself and the pods keep offsets and transactions in their own keys, so no such
    name becomes a topic: Metadata (every version) answers UNKNOWN_TOPIC_OR_PARTITION
    flagged internal, V1's first use is refused, and CreateTopics is refused as Kafka
    refuses ``__cluster_metadata``: INVALID_REQUEST "Creation of internal topic ... is
    prohibited.". ``__consumer_offsets`` is the pods' own mirror of the committed offsets
    (tests/kafka/test_offsets_topic.py): listed, internal, and read only."""
    from adapter.kafka import errors
    from adapter.kafka.versions import CREATE_TOPICS, METADATA
    from tests.support.kafka import RawKafka

    a, b = kafka_pods
    keys = Keys(KAFKA_PODS_PREFIX)
    request = METADATA.request
    with RawKafka(a.kafka_port) as raw:
        for name in RESERVED:
            for version in (1, 12):  # v1: auto-creation implied; v12: allowed by the client
                if name == "__consumer_offsets":
                    continue  # made by the pods at start
                body = request[version](
                    topics=[request.MetadataRequestTopic(name=name)],
                    allow_auto_topic_creation=True,
                )
                (answer,) = raw.call(METADATA, version, body).topics
                assert (answer.name, answer.error_code) == (
                    name,
                    errors.UNKNOWN_TOPIC_OR_PARTITION,
                )
                assert answer.is_internal
            created = raw.call(CREATE_TOPICS, 7, CREATE_TOPICS.request[7](
                topics=[CREATE_TOPICS.request.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=1, assignments=[],
                    configs=[],
                )],
                timeout_ms=5000, validate_only=False,
            )).topics[0]  # fmt: skip
            assert (created.error_code, created.error_message) == (
                errors.INVALID_REQUEST,
                f"Creation of internal topic {name} is prohibited.",
            )
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        with pytest.raises(RequestFailed, match="internal to Kafka: read only"):
            v1.produce("__consumer_offsets", "k", "v")
        with pytest.raises(RequestFailed, match="reserved by Kafka"):
            v1.produce("__share_group_state", "k", "v")
        with pytest.raises(RequestFailed, match="reserved by Kafka"):
            v1.consume("__transaction_state", 0, 0)
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 5000})
    refused = admin.create_topics([NewTopic("__consumer_offsets", 1, 1)], request_timeout=10)
    with pytest.raises(KafkaException, match="INVALID_REQUEST"):
        refused["__consumer_offsets"].result(10)
    for name in RESERVED[1:]:  # no key, no entry in the topics set
        assert list(redis_client.scan_iter(match=f"{KAFKA_PODS_PREFIX}:*{name}*")) == []
        assert not redis_client.sismember(keys.topics, name)


def test_topic_create_command_refuses_kafka_internal_names(redis_url: str) -> None:
    from click.testing import CliRunner

    from adapter.cli import main

    env = {"ADAPTER_REDIS_URL": redis_url, "ADAPTER_KEY_PREFIX": KAFKA_PODS_PREFIX}
    result = CliRunner().invoke(main, ["topic", "create", "__consumer_offsets"], env=env)
    assert result.exit_code != 0
    assert "internal topic __consumer_offsets" in result.output
    # the pods' mirror of the committed offsets keeps its 50 partitions
    grow = ["topic", "alter", "__consumer_offsets", "--partitions", "60"]
    result = CliRunner().invoke(main, grow, env=env)
    assert result.exit_code != 0
    assert "adding partitions to internal topic __consumer_offsets is prohibited" in result.output


def test_confluent_describe_topics_reports_authorized_operations(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """Metadata v8+ include_topic_authorized_operations: with no ACLs every operation a topic
    supports (Kafka's bitfield); not asked: none reported."""
    admin = AdminClient({"bootstrap.servers": kafka_pods[0].bootstrap, "socket.timeout.ms": 5000})
    assert (
        admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=10)[topic].result(10) is None
    )
    asked = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True, request_timeout=10
    )
    description = asked[topic].result(10)
    assert len(description.partitions) == 2
    assert set(description.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }  # fmt: skip
    plain = admin.describe_topics(TopicCollection([topic]), request_timeout=10)
    assert not plain[topic].result(10).authorized_operations


def test_confluent_describe_cluster_reports_authorized_operations(
    kafka_pods: tuple[Pod, Pod],
) -> None:
    """librdkafka's describe_cluster asks Metadata (v8-10 include_cluster_authorized_
    operations), not DescribeCluster: every cluster operation (librdkafka's 0081)."""
    admin = AdminClient({"bootstrap.servers": kafka_pods[0].bootstrap, "socket.timeout.ms": 5000})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.ALTER, AclOperation.ALTER_CONFIGS, AclOperation.CLUSTER_ACTION,
        AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }  # fmt: skip
    assert not admin.describe_cluster().result(10).authorized_operations


def test_explicit_replica_assignments_are_checked_and_reported(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """CreateTopics and CreatePartitions with replica assignments over the live pods (what
    librdkafka's 0081 checks): Metadata reports those replicas, led by the first; an
    assignment naming a broker that is not live, a broker twice or uneven replica counts
    is INVALID_REPLICA_ASSIGNMENT."""
    a, _ = kafka_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap, "socket.timeout.ms": 5000})
    first, second = sorted(admin.list_topics(timeout=10).brokers)
    created = admin.create_topics(
        [NewTopic(topic, 2, replica_assignment=[[first, second], [second, first]])],
        request_timeout=10,
    )
    assert created[topic].result(10) is None
    grown = admin.create_partitions(
        [NewPartitions(topic, 4, replica_assignment=[[second, first], [first, second]])]
    )
    assert grown[topic].result(10) is None

    def reported() -> list[tuple[int, list[int], list[int]]]:
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return [(p.leader, p.replicas, p.isrs) for _, p in sorted(partitions.items())]

    ab, ba = [first, second], [second, first]
    wait_until(lambda: len(reported()) == 4)
    assert reported() == [(first, ab, ab), (second, ba, ba), (second, ba, ba), (first, ab, ab)]

    bad = {
        f"{topic}-dead": [[first, 999]],
        f"{topic}-twice": [[first, first]],
        f"{topic}-uneven": [[first, second], [first]],
    }
    results = admin.create_topics(
        [
            NewTopic(name, len(replicas), replica_assignment=replicas)
            for name, replicas in bad.items()
        ],
        request_timeout=10,
    )
    for name, future in results.items():
        with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
            future.result(10)
        assert name not in admin.list_topics(timeout=10).topics
    refused = admin.create_partitions([NewPartitions(topic, 5, replica_assignment=[[first]])])
    with pytest.raises(KafkaException, match="INVALID_REPLICA_ASSIGNMENT"):
        refused[topic].result(10)


def test_assigned_replicas_lead_while_one_is_live() -> None:
    brokers = [(1, "h", 1), (2, "h", 2), (3, "h", 3)]
    assert partition_replicas(brokers, "t", 0, 2, [3, 1]) == ([3, 1], [3, 1])
    assert partition_replicas(brokers, "t", 0, 2, [9, 2]) == ([9, 2], [2])  # 9 is not live
    fallback = partition_replicas(brokers, "t", 0, 2, None)
    assert partition_replicas(brokers, "t", 0, 2, [8, 9]) == fallback  # none live
    leader = brokers[leader_index(3, "t", 0)][0]
    assert fallback[0][0] == leader and fallback[0] == fallback[1] and len(fallback[0]) == 2
