"""Admin clients (confluent-kafka, kafka-python): CreateTopics with configs, DescribeConfigs,
DescribeCluster; the topics they make are ordinary topics (V1 sees their partitions, the
retention task reads their retention from the topic hash)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from adapter.client import Client
from adapter.client.client import RequestFailed
from mapping.inspection import retention_of
from mapping.keys import Keys
from tests.kafka.conftest import PREFIX
from tests.support import Pod


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
        [NewTopic(topic + "-x", 1, 1, config={"cleanup.policy": "compact"})], request_timeout=10
    )
    with pytest.raises(KafkaException, match="INVALID_CONFIG"):
        invalid[topic + "-x"].result(10)

    (described,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    configs = {name: entry.value for name, entry in described.result(10).items()}
    assert configs == {"retention.ms": "60000", "retention.bytes": "-1", "min.insync.replicas": "1"}
    # an ordinary topic: V1 sees its four partitions, retention reads the topic hash
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        assert v1.consume(topic, 3, 0).records == []
        with pytest.raises(RequestFailed, match="invalid partition"):
            v1.consume(topic, 4, 0)
    assert retention_of(redis_client.hgetall(Keys(PREFIX).topic(topic))).ms == 60000


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
    assert retention_of(redis_client.hgetall(Keys(PREFIX).topic(topic))).bytes == 5000000
    refused = ConfigResource(
        ResourceType.TOPIC, topic,
        incremental_configs=[ConfigEntry("min.insync.replicas", "1",
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
