"""What operators' tools read, through kafka-python's admin client and the raw protocol against
two pods: DescribeTopicPartitions page by page (KIP-966), DescribeLogDirs (each replica's
stream and its bytes in Redis, on the broker Metadata places it on), DescribeProducers
(idempotent and transactional producers' state, an open transaction's first offset)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from adapter.kafka.versions import DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, DESCRIBE_TOPIC_PARTITIONS
from mapping.core.keys import Keys
from tests.support.kafka import KAFKA_PODS_PREFIX, RawKafka
from tests.support.pods import Pod
from tests.support.waiting import wait_until

UNKNOWN_TOPIC, INVALID_REQUEST = 3, 42


@pytest.fixture
def admin(kafka_pods: tuple[Pod, Pod]) -> Iterator:
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=kafka_pods[0].bootstrap, request_timeout_ms=10000)
    yield client
    client.close()


def _node_ids(admin, pods: tuple[Pod, Pod]) -> list[int]:
    """The broker ids of the two pods, in the pods' order."""
    by_port = {b["port"]: b["broker_id"] for b in admin.describe_cluster()["brokers"]}
    return [by_port[pod.kafka_port] for pod in pods]


def _create(admin, name: str, assignment: dict[int, list[int]]) -> None:
    from kafka.admin import NewTopic

    reply = admin.create_topics([NewTopic(name, replica_assignments=assignment)])
    assert [t["error_code"] for t in reply["topics"]] == [0]


def test_describe_topic_partitions_pages_through_topics(
    kafka_pods: tuple[Pod, Pod], admin, topic: str
) -> None:
    a, b = _node_ids(admin, kafka_pods)
    first, second = topic + "-a", topic + "-b"
    _create(admin, first, {p: [a, b] if p % 2 else [b, a] for p in range(5)})
    _create(admin, second, {p: [a] for p in range(3)})
    metadata = {t["name"]: t for t in admin.describe_topics([first, second])}

    page = admin.describe_topic_partitions([second, first], response_partition_limit=4)
    assert [t["name"] for t in page["topics"]] == [first]  # name order
    assert [p["partition_index"] for p in page["topics"][0]["partitions"]] == [0, 1, 2, 3]
    assert page["next_cursor"] == {"topic_name": first, "partition_index": 4}
    rest = admin.describe_topic_partitions(
        [second, first], response_partition_limit=4, cursor=page["next_cursor"]
    )
    assert [(t["name"], len(t["partitions"])) for t in rest["topics"]] == [(first, 1), (second, 3)]
    assert rest["next_cursor"] is None

    described = {t["name"]: t for t in page["topics"] + rest["topics"]}
    for name in (first, second):
        shown, known = described[name], metadata[name]
        assert str(shown["topic_id"]) == str(known["topic_id"])
        assert not shown["is_internal"] and shown["error_code"] == 0
    by_partition = {p["partition_index"]: p for p in metadata[first]["partitions"]}
    for part in page["topics"][0]["partitions"] + rest["topics"][0]["partitions"]:
        known = by_partition[part["partition_index"]]
        for field in ("replica_nodes", "leader_id", "isr_nodes", "leader_epoch"):
            assert part[field] == known[field]  # as Metadata says
        assert part["replica_nodes"] == ([a, b] if part["partition_index"] % 2 else [b, a])
        assert part["eligible_leader_replicas"] is None

    # a limit met exactly at a topic's end: the cursor names the next topic's start
    exact = admin.describe_topic_partitions([first, second], response_partition_limit=5)
    assert exact["next_cursor"] == {"topic_name": second, "partition_index": 0}
    # a topic that does not exist is answered, and not created
    missing = topic + "-none"
    unknown = admin.describe_topic_partitions([missing])["topics"]
    assert [(t["name"], t["error_code"]) for t in unknown] == [(missing, UNKNOWN_TOPIC)]
    assert missing not in admin.list_topics()
    # every topic, from a cursor on
    listing = admin.describe_topic_partitions(
        [], cursor={"topic_name": first, "partition_index": 2}
    )
    names = [t["name"] for t in listing["topics"]]
    assert names[:2] == [first, second] and names == sorted(names)
    assert [p["partition_index"] for p in listing["topics"][0]["partitions"]] == [2, 3, 4]


def test_describe_topic_partitions_refuses_a_cursor_outside_the_list(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    request = DESCRIBE_TOPIC_PARTITIONS.request[0]
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        for cursor in (
            request.Cursor(topic_name=topic + "-other", partition_index=0),
            request.Cursor(topic_name=topic, partition_index=-1),
        ):
            body = request(
                topics=[request.TopicRequest(name=topic)],
                response_partition_limit=10,
                cursor=cursor,
            )
            reply = raw.call(DESCRIBE_TOPIC_PARTITIONS, 0, body)
            assert [(t.name, t.error_code) for t in reply.topics] == [(topic, INVALID_REQUEST)]
        # the connection goes on
        body = request(topics=[request.TopicRequest(name=topic)], response_partition_limit=0)
        reply = raw.call(DESCRIBE_TOPIC_PARTITIONS, 0, body)
        assert [t.error_code for t in reply.topics] == [UNKNOWN_TOPIC]


def _produce(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list = []
    for i in range(count):
        producer.produce(
            topic, b"x" * 1000, partition=i % partitions, on_delivery=lambda e, m: failed.append(e)
        )
    producer.flush(30)
    assert failed == [None] * count


def test_describe_log_dirs_sizes_each_replica_on_its_broker(
    kafka_pods: tuple[Pod, Pod], admin, topic: str, redis_client: redis.Redis
) -> None:
    a, b = _node_ids(admin, kafka_pods)
    _create(admin, topic, {0: [a, b], 1: [b, a], 2: [a, b]})
    _produce(kafka_pods[0].bootstrap, topic, 3, 300)
    keys = Keys(KAFKA_PODS_PREFIX)

    def dirs() -> dict[int, dict]:
        answers = admin.describe_log_dirs({topic: [0, 1, 2, 7]}, brokers=[a, b])
        return {answer["broker"]: answer["log_dirs"] for answer in answers}

    def caught_up() -> bool:
        return all(
            p["offset_lag"] == 0
            for found in dirs().values()
            for t in found[0]["topics"]
            for p in t["partitions"]
        )

    wait_until(caught_up)
    found = dirs()
    hosted = {}
    for broker, (log_dir,) in found.items():
        assert (log_dir["log_dir"], log_dir["error_code"]) == (f"/redis/{KAFKA_PODS_PREFIX}", 0)
        assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]  # (v4: Redis' memory)
        (described,) = log_dir["topics"]
        assert described["name"] == topic
        for p in described["partitions"]:
            assert not p["is_future_key"]
            hosted[(broker, p["partition_index"])] = p["partition_size"]
    # each replica on the broker the assignment names (partition 7 does not exist: left out)
    assert set(hosted) == {(a, 0), (b, 0), (b, 1), (a, 1), (a, 2), (b, 2)}
    for p, leader, follower in ((0, a, b), (1, b, a)):
        pk = keys.partition(topic, p)
        assert hosted[(leader, p)] == redis_client.memory_usage(pk.log)
        assert hosted[(follower, p)] == redis_client.memory_usage(pk.replica(1))
        assert hosted[(leader, p)] > 100 * 1000  # a hundred 1 kB records each
    # a topic named twice is one topic
    request = DESCRIBE_LOG_DIRS.request[2]
    twice = request(
        topics=[
            request.DescribableLogDirTopic(topic=topic, partitions=[0]),
            request.DescribableLogDirTopic(topic=topic, partitions=[1, 0]),
        ]
    )
    with RawKafka(kafka_pods[1].kafka_port) as raw:
        (result,) = raw.call(DESCRIBE_LOG_DIRS, 2, twice).results
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        (topic, [0, 1])
    ]
    # every topic: a broker lists the replicas it holds, and only those
    single = topic + "-single"
    _create(admin, single, {0: [a]})
    for broker, holds in ((a, True), (b, False)):
        everything = admin.describe_log_dirs(brokers=[broker])[0]["log_dirs"][0]["topics"]
        names = {t["name"] for t in everything}
        assert topic in names and (single in names) == holds


def test_describe_log_dirs_in_every_version(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    with RawKafka(kafka_pods[0].kafka_port) as raw:
        for version in range(5):
            request = DESCRIBE_LOG_DIRS.request[version]
            body = request(topics=[request.DescribableLogDirTopic(topic=topic, partitions=[0])])
            reply = raw.call(DESCRIBE_LOG_DIRS, version, body)
            (result,) = reply.results
            assert (result.error_code, result.log_dir, result.topics) == (
                0,
                f"/redis/{KAFKA_PODS_PREFIX}",
                [],  # no such topic: nothing hosted
            )
            if version >= 3:
                assert reply.error_code == 0
            if version >= 4:
                assert result.total_bytes > 0


def test_describe_producers_shows_idempotent_and_transactional_state(
    kafka_pods: tuple[Pod, Pod], admin, topic: str
) -> None:
    from confluent_kafka import Producer
    from kafka import TopicPartition
    from kafka.errors import UnknownTopicOrPartitionError

    a, _ = _node_ids(admin, kafka_pods)
    _create(admin, topic, {0: [a], 1: [a]})
    pod = kafka_pods[1]
    before = int(time.time() * 1000)
    idempotent = Producer({"bootstrap.servers": pod.bootstrap, "enable.idempotence": True})
    for _ in range(7):
        idempotent.produce(topic, b"v", partition=0)
    assert idempotent.flush(15) == 0
    transactional = Producer(
        {"bootstrap.servers": pod.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"}
    )
    transactional.init_transactions(15)
    transactional.begin_transaction()
    transactional.produce(topic, b"t", partition=1)
    assert transactional.flush(15) == 0

    states = admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    (plain,) = states[TopicPartition(topic, 0)].active_producers
    assert (plain.producer_epoch, plain.last_sequence, plain.current_transaction_start_offset) == (
        0,
        6,
        -1,
    )
    assert before - 5000 <= plain.last_timestamp <= time.time() * 1000 + 5000
    (open_txn,) = states[TopicPartition(topic, 1)].active_producers
    assert open_txn.producer_id != plain.producer_id
    assert (open_txn.last_sequence, open_txn.coordinator_epoch) == (0, -1)
    # the transaction's first offset here: the offset of its one record
    with RawKafka(pod.kafka_port) as raw:
        request = DESCRIBE_PRODUCERS.request[0]
        body = request(topics=[request.TopicRequest(name=topic, partition_indexes=[1, 5])])
        (described,) = raw.call(DESCRIBE_PRODUCERS, 0, body).topics
    one, beyond = described.partitions
    assert beyond.error_code == UNKNOWN_TOPIC  # no partition 5
    earliest = admin.list_partition_offsets({TopicPartition(topic, 1): -2})  # its one record
    assert (
        one.active_producers[0].current_txn_start_offset
        == earliest[TopicPartition(topic, 1)].offset
    )

    transactional.commit_transaction(15)
    after = admin.describe_producers([TopicPartition(topic, 1)])
    (closed,) = after[TopicPartition(topic, 1)].active_producers
    assert (closed.producer_id, closed.current_transaction_start_offset) == (
        open_txn.producer_id,
        -1,
    )
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_producers([TopicPartition(topic + "-none", 0)], broker_id=a)
