"""DeleteTopics and CreatePartitions (grow only) through admin clients and a raw client, and
``adapter topic alter --partitions``: one code path (mapping/operations/topic_lifecycle.py), and
every
pod hears of the change (the other pod's cached settings are dropped). Topic ids: new at
each creation, stored with the topic, found by id; a producer that knew the topic before it
was made again follows the new one (librdkafka's 0107)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from adapter.cli import main
from adapter.client import Client
from adapter.client.client import RequestFailed
from adapter.kafka import errors
from adapter.kafka.versions import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, METADATA
from mapping.core.keys import Keys
from mapping.topic.partitioner import partition_for
from tests.support.kafka import KAFKA_PODS_PREFIX, RawKafka
from tests.support.pods import Pod
from tests.support.waiting import wait_until


def _admin(pod: Pod) -> AdminClient:
    return AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})


def _create(pod: Pod, topic: str, partitions: int) -> None:
    admin = _admin(pod)  # alive until the result is in
    created = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=10)
    assert created[topic].result(10) is None


def _metadata_partitions(pod: Pod, topic: str) -> tuple[int, int]:
    """(error code, partition count) of ``topic`` in the pod's Metadata (never creates it)."""
    with RawKafka(pod.kafka_port) as raw:
        body = METADATA.request[12](
            topics=[METADATA.request[12].MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False,
        )
        (answer,) = raw.call(METADATA, 12, body).topics
        return answer.error_code, len(answer.partitions)


def _key_for_partition(partition: int, partitions: int) -> str:
    return next(
        k
        for k in (f"k{i}" for i in range(10_000))
        if partition_for(k.encode(), partitions) == partition
    )


# --- DeleteTopics ----------------------------------------------------------------------------


def test_confluent_admin_deletes_a_topic_every_pod_forgets(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    _create(a, topic, 2)
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        produced = v1.produce(topic, "k", "before")  # pod b caches the topic
        assert v1.consume(topic, produced.partition, 0).records
        admin_a = _admin(a)
        deleted = admin_a.delete_topics([topic], request_timeout=10)
        assert deleted[topic].result(10) is None
        assert _metadata_partitions(b, topic)[0] == errors.UNKNOWN_TOPIC_OR_PARTITION
        # pod b (auto-creation on) makes it anew, empty, with its defaults
        assert v1.consume(topic, produced.partition, 0).records == []
    missing = admin_a.delete_topics([topic + "-none"], request_timeout=10)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        missing[topic + "-none"].result(10)


def test_kafka_python_admin_deletes_topics(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    a, b = kafka_pods
    _create(a, topic, 1)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=5000)
    try:
        admin.delete_topics([topic])
        assert _metadata_partitions(a, topic)[0] == errors.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
    finally:
        admin.close()


def test_delete_topics_by_name_in_every_version_and_by_id(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = kafka_pods
    request = DELETE_TOPICS.request
    with RawKafka(a.kafka_port) as raw:
        for version in range(1, 6):
            name = f"{topic}-v{version}"
            _create(a, name, 1)
            body = request[version](topic_names=[name, "bad name"], timeout_ms=5000)
            ok, bad = raw.call(DELETE_TOPICS, version, body).responses
            assert (ok.name, ok.error_code) == (name, errors.NONE)
            assert bad.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        _create(a, topic, 1)
        body = request[6](
            topics=[
                request[6].DeleteTopicState(name=topic),
                request[6].DeleteTopicState(name=None, topic_id=uuid.uuid4()),
            ],
            timeout_ms=5000,
        )
        by_name, by_id = raw.call(DELETE_TOPICS, 6, body).responses
        assert (by_name.name, by_name.error_code) == (topic, errors.NONE)
        assert by_id.error_code == errors.UNKNOWN_TOPIC_ID
        assert _metadata_partitions(a, topic)[0] == errors.UNKNOWN_TOPIC_OR_PARTITION
        # by the id Metadata gave (the Java admin's deleteTopics(TopicCollection.ofTopicIds))
        other = f"{topic}-by-id"
        _create(a, other, 1)
        topic_id = _metadata_by_id(raw, None, other).topic_id
        body = request[6](
            topics=[request[6].DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000
        )
        (deleted,) = raw.call(DELETE_TOPICS, 6, body).responses
        assert (deleted.name, deleted.topic_id, deleted.error_code) == (
            other,
            topic_id,
            errors.NONE,
        )
        assert _metadata_partitions(a, other)[0] == errors.UNKNOWN_TOPIC_OR_PARTITION


def _metadata_by_id(raw: RawKafka, topic_id: uuid.UUID | None, name: str | None = None) -> Any:
    """Metadata v12 for one topic, asked by id (or by name when ``topic_id`` is None)."""
    entry = METADATA.request.MetadataRequestTopic
    # by id, as the Java admin asks: an empty name (its schema's default) beside the id
    asked = entry(name="", topic_id=topic_id) if topic_id is not None else entry(name=name)
    body = METADATA.request[12](topics=[asked], allow_auto_topic_creation=False)
    (answer,) = raw.call(METADATA, 12, body).topics
    return answer


def test_metadata_answers_a_topic_asked_for_by_id(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """The Java admin's describeTopics(TopicCollection.ofTopicIds(...)) asks Metadata by id
    (name null): the topic comes back with its name, id and partitions, through either pod;
    an id no topic has gets UNKNOWN_TOPIC_ID with the id echoed (a zero id there fails the
    Java client)."""
    a, b = kafka_pods
    _create(a, topic, 3)
    with RawKafka(a.kafka_port) as raw_a, RawKafka(b.kafka_port) as raw_b:
        by_name = _metadata_by_id(raw_a, None, topic)
        assert by_name.error_code == errors.NONE and by_name.topic_id.int
        for raw in (raw_a, raw_b):
            by_id = _metadata_by_id(raw, by_name.topic_id)
            assert (by_id.error_code, by_id.name, by_id.topic_id) == (
                errors.NONE,
                topic,
                by_name.topic_id,
            )
            assert sorted(p.partition_index for p in by_id.partitions) == [0, 1, 2]
        unknown = uuid.uuid4()
        missing = _metadata_by_id(raw_a, unknown)
        assert (missing.error_code, missing.name, missing.topic_id) == (
            errors.UNKNOWN_TOPIC_ID,
            None,
            unknown,
        )


# --- CreatePartitions ------------------------------------------------------------------------


def test_confluent_admin_grows_a_topic_and_the_other_pod_partitions_keys_by_the_new_count(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    _create(a, topic, 3)
    new_key = _key_for_partition(4, 6)  # a partition only the grown topic has
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        assert v1.produce(topic, new_key, "old").partition == partition_for(new_key.encode(), 3)
        with pytest.raises(RequestFailed, match="invalid partition"):
            v1.consume(topic, 4, 0)  # pod b has the count 3 cached
        admin_a = _admin(a)
        grown = admin_a.create_partitions([NewPartitions(topic, 6)], request_timeout=10)
        assert grown[topic].result(10) is None
        # pod b hears of it (pub/sub) and reads the count again
        wait_until(lambda: v1.produce(topic, new_key, "new").partition == 4)
        assert [v for _, v in v1.consume(topic, 4, 0).records] == [b"new"]
    assert _metadata_partitions(b, topic) == (errors.NONE, 6)
    assert _metadata_partitions(a, topic) == (errors.NONE, 6)
    producer = Producer({"bootstrap.servers": b.bootstrap})  # Kafka produce to a new partition
    delivered: list = []
    producer.produce(
        topic, b"kafka", partition=5, on_delivery=lambda e, m: delivered.append((e, m.partition()))
    )
    assert producer.flush(10) == 0
    assert delivered == [(None, 5)]
    admin_b = _admin(b)
    for count in (6, 2):  # the same count, fewer
        refused = admin_b.create_partitions([NewPartitions(topic, count)], request_timeout=10)
        with pytest.raises(KafkaException, match="INVALID_PARTITIONS"):
            refused[topic].result(10)
    missing = admin_b.create_partitions([NewPartitions(topic + "-x", 9)], request_timeout=10)
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC_OR_PART"):
        missing[topic + "-x"].result(10)


def test_new_partitions_of_a_replicated_topic_are_replicated(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """The replicators play the new partitions: acks=all (min ISR 2 of 3) succeeds there."""
    a, b = kafka_pods
    admin = _admin(a)
    new = NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})
    assert admin.create_topics([new], request_timeout=10)[topic].result(10) is None
    with Client("127.0.0.1", b.port, timeout=30) as v1:
        assert v1.produce(topic, "k", "first", acks="all").partition == 0
        grown = admin.create_partitions([NewPartitions(topic, 3)], request_timeout=10)
        assert grown[topic].result(10) is None
        key = _key_for_partition(2, 3)
        wait_until(lambda: v1.produce(topic, key, "new", acks="all").partition == 2)
        assert b"new" in [v for _, v in v1.consume(topic, 2, 0).records]  # committed


def test_a_v1_group_rebalances_onto_the_new_partitions(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    _create(a, topic, 2)
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        joined = v1.join("g", topic, "c1")
        assert joined.assigned == [0, 1]
        admin = _admin(a)
        grown = admin.create_partitions([NewPartitions(topic, 4)], request_timeout=10)
        assert grown[topic].result(10) is None

        def rebalanced() -> bool:
            try:
                v1.heartbeat("g", topic, "c1", joined.generation)
            except RequestFailed as exc:
                assert "GENERATION_MISMATCH" in str(exc)
                return True
            return False

        wait_until(rebalanced)  # once pod b heard of the new count
        again = v1.join("g", topic, "c1")
        assert again.generation > joined.generation
        assert again.assigned == [0, 1, 2, 3]


def test_kafka_python_admin_grows_a_topic(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KNewPartitions

    a, b = kafka_pods
    _create(a, topic, 1)
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=5000)
    try:
        admin.create_partitions({topic: KNewPartitions(total_count=3)})
    finally:
        admin.close()
    assert _metadata_partitions(a, topic) == (errors.NONE, 3)


def test_create_partitions_validate_only_and_every_version(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = kafka_pods
    _create(a, topic, 1)
    request = CREATE_PARTITIONS.request
    with RawKafka(a.kafka_port) as raw:
        body = request[0](
            topics=[request[0].CreatePartitionsTopic(name=topic, count=5, assignments=None)],
            timeout_ms=5000, validate_only=True,
        )  # fmt: skip
        (result,) = raw.call(CREATE_PARTITIONS, 0, body).results
        assert result.error_code == errors.NONE
        assert _metadata_partitions(a, topic) == (errors.NONE, 1)  # only validated
        for version in range(4):
            count = 2 + version
            body = request[version](
                topics=[request[version].CreatePartitionsTopic(name=topic, count=count)],
                timeout_ms=5000, validate_only=False,
            )  # fmt: skip
            (result,) = raw.call(CREATE_PARTITIONS, version, body).results
            assert (result.name, result.error_code) == (topic, errors.NONE)
            assert _metadata_partitions(a, topic) == (errors.NONE, count)


def test_topic_alter_partitions_command(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_url: str
) -> None:
    a, b = kafka_pods
    _create(a, topic, 2)
    assert _metadata_partitions(b, topic) == (errors.NONE, 2)  # cached by pod b
    env = {"ADAPTER_REDIS_URL": redis_url, "ADAPTER_KEY_PREFIX": KAFKA_PODS_PREFIX}
    grown = CliRunner().invoke(main, ["topic", "alter", topic, "--partitions", "4"], env=env)
    assert grown.exit_code == 0, grown.output
    assert f"altered topic={topic} partitions=2->4" in grown.output
    wait_until(lambda: _metadata_partitions(b, topic) == (errors.NONE, 4))
    shrink = CliRunner().invoke(main, ["topic", "alter", topic, "--partitions", "3"], env=env)
    assert shrink.exit_code != 0
    assert "can only grow" in shrink.output
    missing = CliRunner().invoke(
        main, ["topic", "alter", topic + "-x", "--partitions", "3"], env=env
    )
    assert missing.exit_code != 0 and "no topic" in missing.output


# --- topic ids (issue 20, item 10) -----------------------------------------------------------


def _create_raw(raw: RawKafka, topic: str, partitions: int) -> Any:
    """CreateTopics v7 (the version that answers the topic id); its one result."""
    request = CREATE_TOPICS.request
    body = request[7](
        topics=[
            request.CreatableTopic(
                name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
                configs=[],
            )
        ],
        timeout_ms=5000,
        validate_only=False,
    )  # fmt: skip
    (result,) = raw.call(CREATE_TOPICS, 7, body).topics
    return result


def _delete_by_id(raw: RawKafka, topic_id: uuid.UUID) -> Any:
    request = DELETE_TOPICS.request
    body = request[6](topics=[request[6].DeleteTopicState(name=None, topic_id=topic_id)],
                      timeout_ms=5000)  # fmt: skip
    (result,) = raw.call(DELETE_TOPICS, 6, body).responses
    return result


def test_a_topic_made_again_is_another_topic_with_a_new_id(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_client
) -> None:
    """Each creation gives the topic a new random id, stored in its hash and answered by
    CreateTopics and by Metadata through every pod; the deleted topic's id is unknown from
    then on (Metadata and DeleteTopics by it answer UNKNOWN_TOPIC_ID, and the topic made
    again under the same name is not deleted by it)."""
    a, b = kafka_pods
    keys = Keys(KAFKA_PODS_PREFIX)
    with RawKafka(a.kafka_port) as raw_a, RawKafka(b.kafka_port) as raw_b:
        created = _create_raw(raw_a, topic, 4)
        assert created.error_code == errors.NONE
        assert created.topic_id is not None and created.topic_id.int  # (v7 answers it)
        first = created.topic_id
        assert redis_client.hget(keys.topic(topic), "topic_id") == str(first).encode()
        assert redis_client.hget(keys.topic_ids, str(first)) == topic.encode()
        for raw in (raw_a, raw_b):
            assert _metadata_by_id(raw, None, topic).topic_id == first

        deleted = _delete_by_id(raw_b, first)
        assert (deleted.name, deleted.error_code) == (topic, errors.NONE)
        again = _create_raw(raw_b, topic, 2)
        assert again.error_code == errors.NONE
        second = again.topic_id
        assert second.int and second != first
        for raw in (raw_a, raw_b):
            by_name = _metadata_by_id(raw, None, topic)
            assert (by_name.topic_id, len(by_name.partitions)) == (second, 2)
            assert _metadata_by_id(raw, second).name == topic
            old = _metadata_by_id(raw, first)
            assert (old.error_code, old.name) == (errors.UNKNOWN_TOPIC_ID, None)
        assert _delete_by_id(raw_a, first).error_code == errors.UNKNOWN_TOPIC_ID
        assert _metadata_by_id(raw_a, None, topic).topic_id == second  # still there
        assert not redis_client.hexists(keys.topic_ids, str(first))


def test_a_topic_made_by_older_code_gets_one_id_on_first_read(
    kafka_pods: tuple[Pod, Pod], topic: str, redis_client
) -> None:
    """A topic hash written before topic ids were stored has none: the first pod that
    reads it gives it one (atomically: both pods, asking at once, answer the same), kept
    in the hash and the id index, so Metadata and DeleteTopics find it by id."""
    a, b = kafka_pods
    keys = Keys(KAFKA_PODS_PREFIX)
    redis_client.hset(keys.topic(topic), mapping={"partitions": 2, "replication_factor": 1,
                                                  "min_insync_replicas": 1})  # fmt: skip
    redis_client.sadd(keys.topics, topic)
    with RawKafka(a.kafka_port) as raw_a, RawKafka(b.kafka_port) as raw_b:
        ids = {_metadata_by_id(raw, None, topic).topic_id for raw in (raw_a, raw_b, raw_a)}
        assert len(ids) == 1
        (topic_id,) = ids
        assert topic_id.int
        assert redis_client.hget(keys.topic(topic), "topic_id") == str(topic_id).encode()
        assert redis_client.hget(keys.topic_ids, str(topic_id)) == topic.encode()
        assert _metadata_by_id(raw_b, topic_id).name == topic
        assert _delete_by_id(raw_b, topic_id).error_code == errors.NONE
        assert _metadata_partitions(a, topic)[0] == errors.UNKNOWN_TOPIC_OR_PARTITION


def test_a_producer_that_knew_the_topic_flushes_once_it_is_made_again_with_fewer_partitions(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """librdkafka's test 0107: a producer writes to a topic of four partitions; the topic is
    deleted and made again with two. The producer sees a new topic id, so it takes the new
    partition count: once it has heard of the new topic, every record it sends is
    delivered and flush empties its queue (with the old id it kept four partitions, and
    the records it put into 2 and 3 stayed queued until they timed out)."""
    a, b = kafka_pods
    _create(a, topic, 4)
    failures: list[Any] = []
    delivered: list[Any] = []

    def report(error: Any, message: Any) -> None:
        (failures if error is not None else delivered).append(error or message)

    producer = Producer({
        "bootstrap.servers": b.bootstrap,
        "allow.auto.create.topics": False,  # (its Metadata must not make the topic itself)
        "topic.metadata.refresh.interval.ms": 500,
        "message.timeout.ms": 20_000,
    })  # fmt: skip
    for i in range(40):
        producer.produce(topic, key=f"k{i}", value=b"before", on_delivery=report)
    assert producer.flush(15) == 0
    assert not failures and {m.partition() for m in delivered} == {0, 1, 2, 3}

    admin = _admin(a)
    assert admin.delete_topics([topic], request_timeout=10)[topic].result(10) is None
    _create(a, topic, 2)

    def heard_of_the_new_topic() -> bool:
        found = producer.list_topics(topic, timeout=5).topics.get(topic)
        return found is not None and found.error is None and len(found.partitions) == 2

    wait_until(heard_of_the_new_topic)
    delivered.clear()
    for i in range(40):
        producer.produce(topic, key=f"k{i}", value=b"after", on_delivery=report)
    assert producer.flush(10) == 0  # (0107 allows 5 s)
    assert failures == []
    assert len(delivered) == 40 and {m.partition() for m in delivered} == {0, 1}
    with Client("127.0.0.1", a.port, timeout=10) as v1:
        values = [v for p in (0, 1) for _, v in v1.consume(topic, p, 0).records]
    assert values == [b"after"] * 40
