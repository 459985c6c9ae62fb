"""``__consumer_offsets``: the pods mirror every committed offset there in Kafka's record
format (mapping/group/offsets_mirror.py), read here as a Kafka tool reads it: a confluent-kafka
consumer on the group's partition (``Utils.abs(hashCode) % 50``), records decoded with
mapping/group/offsets_topic.py. Commits come from confluent-kafka consumers and V1 COMMIT,
deletions (OffsetDelete, DeleteGroups) are tombstones; the topic is internal and read only;
``--no-offsets-topic`` hides it; a mirror made on a deployment with offsets fills itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from adapter.client import Client, RequestFailed
from adapter.kafka import errors
from adapter.kafka.versions import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    METADATA,
    OFFSET_DELETE,
    PRODUCE,
)
from mapping.core.keys import Keys
from mapping.group.offsets_topic import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_value,
    partition_for,
)
from tests.support.kafka import RawKafka, batch, fetch_offsets, partition_reply, produce_body
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


@dataclass(frozen=True)
class MirrorRecord:
    key: OffsetKey
    value: OffsetValue | None  # None: a tombstone
    timestamp: int  # the record's CreateTime: the commit's (or deletion's) time


def mirror_records(pod: Pod, group: str) -> list[MirrorRecord]:
    """Every record of ``group`` in its partition of the mirror, oldest first."""
    partition = partition_for(group)
    consumer = Consumer(
        {"bootstrap.servers": pod.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
         "enable.auto.commit": False, "socket.timeout.ms": 5000}
    )  # fmt: skip
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(OFFSETS_TOPIC, partition), timeout=10
        )
        found: list[MirrorRecord] = []
        if high <= low:
            return found
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 15
        last = -1
        while last < high - 1 and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                last = message.offset()
                key = decode_key(message.key())
                if key.group == group:
                    value = None if message.value() is None else decode_value(message.value())
                    found.append(MirrorRecord(key, value, message.timestamp()[1]))
        assert last >= high - 1, f"read up to {last}, the high watermark is {high}"
        return found
    finally:
        consumer.close()


def latest(records: list[MirrorRecord]) -> dict[tuple[str, int], OffsetValue | None]:
    """The mirror's last word per (topic, partition): what a compacted reading keeps."""
    return {(r.key.topic, r.key.partition): r.value for r in records}


def _create(pod: Pod, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=10)[topic].result(10)


def _commit(pod: Pod, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=offsets, asynchronous=False)
    finally:
        consumer.close()


def test_kafka_commits_are_mirrored_in_kafkas_format(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """A confluent-kafka commit (through one pod) appears at once (read through the other)
    as an OffsetCommitKey v1 / OffsetCommitValue v3 record in the group's partition: the
    offset, the metadata, the leader epoch, and the commit time as the value's timestamp
    and the record's CreateTime."""
    a, b = kafka_pods
    _create(a, topic, 2)
    group = f"mirror-é-{uuid.uuid4().hex[:8]}"  # non-ASCII: UTF-16 hashing, UTF-8 strings
    before = int(time.time() * 1000)
    _commit(b, group, [
        TopicPartition(topic, 0, 1234, metadata="m0", leader_epoch=7),
        TopicPartition(topic, 1, 99),
    ])  # fmt: skip
    after = int(time.time() * 1000)

    def mirrored() -> dict:
        found = latest(mirror_records(a, group))
        return found if len(found) == 2 else {}

    found = wait_until(mirrored, timeout=15)
    first, second = found[(topic, 0)], found[(topic, 1)]
    assert first is not None and second is not None
    assert (first.offset, first.leader_epoch) == (1234, 7)
    # the metadata as the pods store it (OffsetFetch's answer): librdkafka sends its C
    # string's terminating NUL with it
    (stored,) = fetch_offsets(b, group, topic, [0], version=8)
    assert first.metadata == stored.metadata and first.metadata.rstrip("\0") == "m0"
    assert (second.offset, second.metadata, second.leader_epoch) == (99, "", -1)
    assert before - 1000 <= first.commit_timestamp <= after + 1000  # (Redis' clock)
    records = mirror_records(a, group)
    assert all(r.timestamp == r.value.commit_timestamp for r in records if r.value)
    assert {r.key.group for r in records} == {group}


def test_v1_commits_are_mirrored_coalesced(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """V1 COMMIT through one pod: the latest offset appears within about a second, and a
    burst of commits of one partition is written once or twice, not once per commit."""
    a, b = kafka_pods
    _create(a, topic, 1)
    group = f"mirror-v1-{uuid.uuid4().hex[:8]}"
    commits = 10
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        member = f"c-{uuid.uuid4().hex[:6]}"
        joined = v1.join(group, topic, member)
        v1.sync(group, topic, member, joined.generation)
        for offset in range(100, 100 + commits):
            v1.commit(group, topic, member, joined.generation, 0, offset)
    last = 100 + commits - 1

    def mirrored() -> list[MirrorRecord]:
        records = mirror_records(a, group)
        return records if records and records[-1].value.offset == last else []

    records = wait_until(mirrored, timeout=15)
    assert len(records) < commits
    value = records[-1].value
    assert (records[-1].key, value.leader_epoch, value.metadata) == (
        OffsetKey(group, topic, 0),
        -1,
        "",
    )


def test_deleted_offsets_become_tombstones(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """OffsetDelete writes a tombstone (null value) for each deleted partition's key, and
    DeleteGroups for every partition left, as Kafka's coordinator does."""
    a, b = kafka_pods
    _create(a, topic, 2)
    group = f"mirror-del-{uuid.uuid4().hex[:8]}"
    _commit(b, group, [TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 20)])
    request = OFFSET_DELETE.request[0]  # (confluent-kafka's admin has no OffsetDelete)
    asked = request.OffsetDeleteRequestTopic
    body = request(group_id=group, topics=[
        asked(name=topic, partitions=[asked.OffsetDeleteRequestPartition(partition_index=0)])
    ])  # fmt: skip
    with RawKafka(b.kafka_port) as raw:
        assert raw.call(OFFSET_DELETE, 0, body).error_code == errors.NONE
    wait_until(lambda: latest(mirror_records(a, group)).get((topic, 0), 1) is None, timeout=15)
    assert latest(mirror_records(a, group))[(topic, 1)].offset == 20
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 5000})
    admin.delete_consumer_groups([group])[group].result(15)
    wait_until(lambda: latest(mirror_records(a, group)).get((topic, 1), 1) is None, timeout=15)
    records = mirror_records(a, group)
    # the two commits (one script call: either order), then one tombstone per deletion
    assert sorted((r.key.partition, r.value.offset) for r in records[:2]) == [(0, 10), (1, 20)]
    assert [(r.key.partition, r.value) for r in records[2:]] == [(0, None), (1, None)]


def test_the_mirror_is_internal_and_read_only(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """Metadata lists it, internal, with 50 partitions; DescribeConfigs says compact; Kafka
    clients cannot write it (Produce, DeleteRecords: INVALID_TOPIC_EXCEPTION, as Kafka
    answers), delete it or add partitions (TOPIC_AUTHORIZATION_FAILED) or create it
    (INVALID_REQUEST); V1 may read it but not produce."""
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        request = METADATA.request
        for asked in ([request.MetadataRequestTopic(name=OFFSETS_TOPIC)], None):
            body = request[12](topics=asked, allow_auto_topic_creation=True)
            (answer,) = [t for t in raw.call(METADATA, 12, body).topics if t.name == OFFSETS_TOPIC]
            assert (answer.error_code, answer.is_internal) == (errors.NONE, True)
            assert len(answer.partitions) == OFFSETS_TOPIC_PARTITIONS
        reply = partition_reply(raw.call(PRODUCE, 9, produce_body(OFFSETS_TOPIC, 0, batch([b"v"]))))
        assert reply.error_code == errors.INVALID_TOPIC_EXCEPTION
        assert reply.error_message == f"Cannot append to internal topic {OFFSETS_TOPIC}"
        deleted = raw.call(DELETE_TOPICS, 5, DELETE_TOPICS.request[5](
            topic_names=[OFFSETS_TOPIC], timeout_ms=5000)).responses[0]  # fmt: skip
        assert deleted.error_code == errors.TOPIC_AUTHORIZATION_FAILED
        grow = CREATE_PARTITIONS.request[3]
        grown = raw.call(CREATE_PARTITIONS, 3, grow(
            topics=[grow.CreatePartitionsTopic(name=OFFSETS_TOPIC, count=60, assignments=None)],
            timeout_ms=5000, validate_only=False)).results[0]  # fmt: skip
        assert grown.error_code == errors.TOPIC_AUTHORIZATION_FAILED
        trim = DELETE_RECORDS.request[2]
        trimmed = raw.call(DELETE_RECORDS, 2, trim(
            topics=[trim.DeleteRecordsTopic(name=OFFSETS_TOPIC, partitions=[
                trim.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=-1)])],
            timeout_ms=5000)).topics[0].partitions[0]  # fmt: skip
        assert trimmed.error_code == errors.INVALID_TOPIC_EXCEPTION
        make = CREATE_TOPICS.request[7]
        made = raw.call(CREATE_TOPICS, 7, make(topics=[make.CreatableTopic(
            name=OFFSETS_TOPIC, num_partitions=1, replication_factor=1, assignments=[],
            configs=[])], timeout_ms=5000, validate_only=False)).topics[0]  # fmt: skip
        assert made.error_code == errors.INVALID_REQUEST
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.timeout.ms": 5000})
    resource = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS_TOPIC)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    with Client("127.0.0.1", b.port, timeout=10) as v1:
        with pytest.raises(RequestFailed, match="BAD_REQUEST.*internal to Kafka: read only"):
            v1.produce(OFFSETS_TOPIC, "k", "v")
        assert v1.consume(OFFSETS_TOPIC, 0, 0).high_watermark >= -1


# --- pods of their own (a fresh key prefix) ----------------------------------------------


@pytest.fixture
def prefix() -> str:
    return f"mirror-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def own_pods(redis_url: str, prefix: str) -> Iterator[list[Pod]]:
    started: list[Pod] = []
    yield started
    for pod in started:
        pod.stop()


def _start(redis_url: str, prefix: str, pods: list[Pod], *args: str) -> Pod:
    pod = Pod(redis_url, *RF1, "--key-prefix", prefix, *args).start()
    pods.append(pod)
    return pod


def test_no_offsets_topic_hides_it(
    redis_url: str, prefix: str, own_pods: list[Pod], topic: str
) -> None:
    """With ``--no-offsets-topic`` Metadata answers UNKNOWN_TOPIC_OR_PARTITION for it (and
    lists it nowhere) and commits make no such topic."""
    pod = _start(redis_url, prefix, own_pods, "--no-offsets-topic")
    _create(pod, topic, 1)
    _commit(pod, "g", [TopicPartition(topic, 0, 5)])
    with RawKafka(pod.kafka_port) as raw:
        request = METADATA.request
        body = request[12](
            topics=[request.MetadataRequestTopic(name=OFFSETS_TOPIC)],
            allow_auto_topic_creation=True,
        )
        (answer,) = raw.call(METADATA, 12, body).topics
        assert (answer.error_code, answer.is_internal) == (errors.UNKNOWN_TOPIC_OR_PARTITION, True)
        every = raw.call(METADATA, 12, request[12](topics=None, allow_auto_topic_creation=False))
        assert [t.name for t in every.topics] == [topic]
    client = redis.Redis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"{prefix}:*{OFFSETS_TOPIC}*")) == []
    finally:
        client.close()


def test_a_new_mirror_holds_the_offsets_committed_before_it(
    redis_url: str, prefix: str, own_pods: list[Pod], topic: str
) -> None:
    """Offsets committed while no pod mirrored them (an older deployment, or
    ``--no-offsets-topic``) are in the mirror as soon as a pod makes it, with their
    metadata and leader epoch, timed at their (group, topic)'s last commit."""
    before = _start(redis_url, prefix, own_pods, "--no-offsets-topic")
    _create(before, topic, 2)
    group = f"seeded-{uuid.uuid4().hex[:8]}"
    _commit(before, group, [
        TopicPartition(topic, 0, 11, metadata="x", leader_epoch=3),
        TopicPartition(topic, 1, 22),
    ])  # fmt: skip
    committed_ms = int(
        redis.Redis.from_url(redis_url).hget(Keys(prefix).group(group, topic).meta, "active_ms")
    )
    before.stop()
    own_pods.remove(before)
    after = _start(redis_url, prefix, own_pods)

    def seeded() -> dict:
        found = latest(mirror_records(after, group))
        return found if len(found) == 2 else {}

    found = wait_until(seeded, timeout=15)
    assert (found[(topic, 0)].offset, found[(topic, 0)].metadata.rstrip("\0")) == (11, "x")
    assert found[(topic, 0)].leader_epoch == 3
    assert found[(topic, 1)].offset == 22
    assert found[(topic, 1)].commit_timestamp == committed_ms
