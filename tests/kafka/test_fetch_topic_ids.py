"""Fetch v13-17 on live pods: topics named by topic id (KIP-516). With the raw client: every
version reads by id, an id no topic has is UNKNOWN_TOPIC_ID (sessionless and in a session,
which keeps it until forgotten), incremental sessions by id (adds, forgets by id), a session
of the other kind refused, and a topic deleted and created again under its name being
another topic. With confluent-kafka, which negotiates Fetch v16 (librdkafka 2.x; it opens no
sessions): a group reading everything once, through a topic re-created meanwhile.
kafka-python (Fetch v12, ListOffsets v9 negotiated) and aiokafka read as before."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from adapter.kafka import errors
from adapter.kafka.versions import FETCH, METADATA
from tests.support.kafka import RawKafka, partition_records, produce_values
from tests.support.pods import Pod
from tests.support.waiting import wait_until

VERSION = FETCH.max_version  # 17
Positions = dict[uuid.UUID, dict[int, int]]  # topic id -> partition -> fetch offset


def create_topic(pod: Pod, topic: str, partitions: int) -> uuid.UUID:
    """Create ``topic``; its id, as Metadata reports it."""
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic_id(pod, topic)


def delete_topic(pod: Pod, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    admin.delete_topics([topic])[topic].result(30)


def topic_id(pod: Pod, topic: str) -> uuid.UUID:
    with RawKafka(pod.kafka_port) as raw:
        asked = METADATA.request.MetadataRequestTopic(name=topic)
        body = METADATA.request[12](topics=[asked], allow_auto_topic_creation=False)
        (answer,) = raw.call(METADATA, 12, body).topics
    assert answer.error_code == errors.NONE
    return answer.topic_id


def fetch(
    raw: RawKafka,
    session_id: int,
    epoch: int,
    positions: Positions | None = None,
    forgotten: dict[uuid.UUID, list[int]] | None = None,
    version: int = VERSION,
) -> Any:
    """One Fetch (v13+) in session ``session_id`` at ``epoch``, naming topics by id."""
    request = FETCH.request
    topic, part = request.FetchTopic, request.FetchTopic.FetchPartition
    body = request[version](
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[
            topic(topic_id=t, partitions=[
                part(partition=p, fetch_offset=o, log_start_offset=-1, partition_max_bytes=1 << 20)
                for p, o in parts.items()
            ])
            for t, parts in (positions or {}).items()
        ],
        forgotten_topics_data=[
            request.ForgottenTopic(topic_id=t, partitions=ps) for t, ps in (forgotten or {}).items()
        ],
        rack_id="",
    )  # fmt: skip
    return raw.call(FETCH, version, body)


def answered(response: Any) -> dict[tuple[uuid.UUID, int], tuple[int, int, list[bytes]]]:
    """(topic id, partition) -> (error, high watermark, values)."""
    out = {}
    for topic in response.responses:
        for part in topic.partitions:
            values = [r.value for r in partition_records(part)]
            out[(topic.topic_id, part.partition_index)] = (
                part.error_code, part.high_watermark, values,
            )  # fmt: skip
    return out


@pytest.mark.parametrize("version", range(13, 18))
def test_every_version_by_id_reads_and_answers_unknown_ids(
    kafka_pods: tuple[Pod, Pod], topic: str, version: int
) -> None:
    a, b = kafka_pods
    known = create_topic(a, topic, 2)
    nobody = uuid.uuid4()
    with RawKafka(b.kafka_port) as raw:
        first = produce_values(raw, topic, 1, b"x", b"y")
        reply = fetch(raw, 0, -1, {known: {1: 0, 5: 0}, nobody: {0: 0, 3: 0}}, version=version)
        assert (reply.error_code, reply.session_id) == (errors.NONE, 0)
        assert [t.topic_id for t in reply.responses] == [known, nobody]
        assert answered(reply) == {
            (known, 1): (errors.NONE, first + 2, [b"x", b"y"]),
            (known, 5): (errors.UNKNOWN_TOPIC_OR_PARTITION, -1, []),  # a known id, no partition
            (nobody, 0): (errors.UNKNOWN_TOPIC_ID, -1, []),
            (nobody, 3): (errors.UNKNOWN_TOPIC_ID, -1, []),
        }
        if version >= 16:  # no partition answered NOT_LEADER_OR_FOLLOWER: no leaders to tell
            assert reply.node_endpoints == []


def test_incremental_sessions_by_topic_id(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, b = kafka_pods
    first_id = create_topic(a, topic, 3)
    second_id = create_topic(a, f"{topic}-2", 1)
    nobody = uuid.uuid4()
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as producer:
        full = fetch(raw, 0, 0, {first_id: {0: 0, 1: 0}, nobody: {0: 0}})
        session = full.session_id
        assert full.error_code == errors.NONE and session > 0
        assert answered(full) == {
            (first_id, 0): (errors.NONE, 0, []),
            (first_id, 1): (errors.NONE, 0, []),
            (nobody, 0): (errors.UNKNOWN_TOPIC_ID, -1, []),
        }
        # the unknown id stays in the session and is answered at every fetch (an error)
        idle = fetch(raw, session, 1)
        assert answered(idle) == {(nobody, 0): (errors.UNKNOWN_TOPIC_ID, -1, [])}
        # forgotten by id; another topic added by id
        added = fetch(raw, session, 2, {second_id: {0: 0}}, forgotten={nobody: [0]})
        assert answered(added) == {(second_id, 0): (errors.NONE, 0, [])}
        assert answered(fetch(raw, session, 3)) == {}

        offset = produce_values(producer, topic, 1, b"new")
        wait_until(lambda: answered(fetch(raw, 0, -1, {first_id: {1: 0}}))[(first_id, 1)][1] > 0)
        got = fetch(raw, session, 4)
        assert answered(got) == {(first_id, 1): (errors.NONE, offset + 1, [b"new"])}

        # partition 1 forgotten by id: its records are not answered any more
        assert answered(fetch(raw, session, 5, forgotten={first_id: [1]})) == {}
        produce_values(producer, topic, 1, b"gone")
        later = produce_values(producer, topic, 0, b"kept")
        wait_until(lambda: answered(fetch(raw, 0, -1, {first_id: {0: 0}}))[(first_id, 0)][1] > 0)
        assert answered(fetch(raw, session, 6)) == {
            (first_id, 0): (errors.NONE, later + 1, [b"kept"])
        }

        # Fetch v12 (by name) in a session made by v13+: Kafka's FETCH_SESSION_TOPIC_ID_ERROR
        request = FETCH.request[12]
        by_name = request(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=session, session_epoch=7, topics=[], forgotten_topics_data=[], rack_id="",
        )  # fmt: skip
        refused = raw.call(FETCH, 12, by_name)
        assert (refused.error_code, refused.session_id, refused.responses) == (
            errors.FETCH_SESSION_TOPIC_ID_ERROR, 0, [],
        )  # fmt: skip
        assert fetch(raw, session, 7).error_code == errors.NONE  # the session lives on


def test_a_topic_created_again_is_another_topic_by_id(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """Deleted and created again under its name, a topic has a new id: the old id is
    UNKNOWN_TOPIC_ID, sessionless and in a session that held it, while the new one reads the
    new topic; a client then replaces the old id by the new one in its session (the Java
    client's FetchSessionHandler forgets the old and adds the new in one request)."""
    a, b = kafka_pods
    old = create_topic(a, topic, 1)
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        produce_values(raw, topic, 0, b"before")
        session = fetch(raw, 0, 0, {old: {0: 0}}).session_id
        assert session > 0
        delete_topic(b, topic)
        new = create_topic(b, topic, 1)
        assert new != old
        offset = produce_values(other, topic, 0, b"after")
        # (a pod that has not heard of the deletion yet may first answer a read refused as
        # deleted: UNKNOWN_TOPIC_OR_PARTITION)
        for pod_raw in (raw, other):
            wait_until(
                lambda r=pod_raw: (
                    answered(fetch(r, 0, -1, {old: {0: 0}}))
                    == {(old, 0): (errors.UNKNOWN_TOPIC_ID, -1, [])}
                )
            )
        stale = fetch(raw, session, 1)
        assert answered(stale) == {(old, 0): (errors.UNKNOWN_TOPIC_ID, -1, [])}
        replaced = fetch(raw, session, 2, {new: {0: 0}}, forgotten={old: [0]})
        assert answered(replaced) == {(new, 0): (errors.NONE, offset + 1, [b"after"])}


def _fetch_versions_sent(lines: list[str]) -> set[str]:
    """The Fetch versions librdkafka's protocol debug log says it sent ("v16")."""
    return {
        line.split("Sent FetchRequest (")[1].split(",")[0]
        for line in lines
        if "Sent FetchRequest (" in line
    }


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_confluent_kafka_groups_read_by_topic_id_through_a_topic_created_again(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """confluent-kafka (librdkafka 2.x) negotiates Fetch v16: two consumers in a group read
    every record once from the two pods; the topic is then deleted and created again (a new
    id): fetches by the old id get UNKNOWN_TOPIC_ID (UNKNOWN_TOPIC_OR_PARTITION from a pod
    that has not heard of the deletion yet), librdkafka refreshes its metadata and reads the
    new topic's records by the new id."""
    a, b = kafka_pods
    create_topic(a, topic, 4)
    handler = _Lines()
    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": pod.bootstrap,
                "group.id": f"{topic}-g",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "topic.metadata.refresh.interval.ms": 1000,
                "debug": "protocol,fetch",
                "logger": logger,
            }
        )  # fmt: skip
        for pod in (a, b)
    ]
    got: list[bytes] = []

    def poll(seconds: float, until: int) -> None:
        deadline = time.monotonic() + seconds
        while len(got) < until and time.monotonic() < deadline:
            for consumer in consumers:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    got.append(message.value())

    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5})
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        before = [f"old-{i}".encode() for i in range(40)]
        for i, value in enumerate(before):
            producer.produce(topic, value, partition=i % 4)
        assert producer.flush(30) == 0
        poll(60, len(before))
        poll(1, len(before) + 1)  # nothing more comes (no record twice)
        assert sorted(got) == sorted(before)
        assert _fetch_versions_sent(handler.lines) == {"v16"}

        delete_topic(b, topic)
        create_topic(b, topic, 4)
        after = [f"new-{i}".encode() for i in range(40)]
        for i, value in enumerate(after):
            producer.produce(topic, value, partition=i % 4)
        assert producer.flush(30) == 0
        poll(60, len(before) + len(after))
        poll(1, len(before) + len(after) + 1)
        assert sorted(got) == sorted(before + after)
        assert _fetch_versions_sent(handler.lines) == {"v16"}
    finally:
        for consumer in consumers:
            consumer.close()
        logger.removeHandler(handler)


def test_kafka_python_and_aiokafka_read_as_before(
    kafka_pods: tuple[Pod, Pod], topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python stays at Fetch v12 (its highest) and takes ListOffsets v9 now offered;
    aiokafka its own versions: both read every record."""
    a, b = kafka_pods
    create_topic(a, topic, 2)
    with RawKafka(a.kafka_port) as raw:
        values = [b"r0", b"r1", b"r2"]
        first = produce_values(raw, topic, 0, *values)
    caplog.set_level(logging.DEBUG, logger="kafka.net.connection")
    consumer = KafkaConsumer(
        bootstrap_servers=b.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    try:
        tp = KTopicPartition(topic, 0)
        consumer.assign([tp])
        found = consumer.offsets_for_times({tp: 0})[tp]
        assert found is not None and found.offset == first
        assert [m.value for m in consumer] == values
    finally:
        consumer.close()
    sent = caplog.text
    assert "ListOffsetsRequest(version=9" in sent and "FetchRequest(version=12" in sent

    async def aiokafka_reads() -> list[bytes]:
        reader = AIOKafkaConsumer(topic, bootstrap_servers=a.bootstrap,
                                  auto_offset_reset="earliest")  # fmt: skip
        await reader.start()
        try:
            out: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(out) < len(values) and time.monotonic() < deadline:
                for records in (await reader.getmany(timeout_ms=200)).values():
                    out += [r.value for r in records]
            return out
        finally:
            await reader.stop()

    assert asyncio.run(aiokafka_reads()) == values
