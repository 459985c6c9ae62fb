"""Incremental fetch sessions (KIP-227) on a live pod: the protocol with the raw client
(creation, incremental adds and forgets, epochs, long-polls on the session's partitions,
unknown sessions after a restart or on another pod, a full cache), which clients open
sessions, and real clients reading everything exactly once on many partitions."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as ATopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from adapter.kafka import errors
from adapter.kafka.versions import FETCH
from mapping.connection.embedded import free_port
from tests.support.kafka import RawKafka, partition_records, produce_values
from tests.support.pods import RF1, Pod, scrape_metrics
from tests.support.waiting import wait_until

VERSION = 12


def create_topic(port: int, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def fetch(
    raw: RawKafka,
    session_id: int,
    epoch: int,
    topic: str,
    positions: dict[int, int] | None = None,
    forgotten: tuple[int, ...] = (),
    max_wait_ms: int = 0,
) -> Any:
    """One Fetch v12 in session ``session_id`` at ``epoch`` naming ``positions`` (partition
    -> fetch offset) and forgetting ``forgotten``."""
    request = FETCH.request
    body = request[VERSION](
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=[request.FetchTopic(topic=topic, partitions=[
            request.FetchTopic.FetchPartition(
                partition=p, fetch_offset=o, log_start_offset=-1, partition_max_bytes=1 << 20
            ) for p, o in positions.items()
        ])] if positions else [],
        forgotten_topics_data=[request.ForgottenTopic(topic=topic, partitions=list(forgotten))]
        if forgotten else [],
        rack_id="",
    )  # fmt: skip
    return raw.call(FETCH, VERSION, body)


def answered(response: Any) -> dict[int, tuple[int, int, list[bytes]]]:
    """partition -> (error, high watermark, values) of a one-topic response."""
    out = {}
    for topic in response.responses:
        for part in topic.partitions:
            values = [r.value for r in partition_records(part)]
            out[part.partition_index] = (part.error_code, part.high_watermark, values)
    return out


def test_a_session_answers_only_the_partitions_with_something_to_say(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    create_topic(a.kafka_port, topic, 4)
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as producer:
        full = fetch(raw, 0, 0, topic, {0: 0, 1: 0, 2: 0})
        session = full.session_id
        assert full.error_code == errors.NONE and session > 0
        assert answered(full) == {p: (errors.NONE, 0, []) for p in (0, 1, 2)}  # all of them

        idle = fetch(raw, session, 1, topic)
        assert (idle.error_code, idle.session_id, answered(idle)) == (errors.NONE, session, {})

        first = produce_values(producer, topic, 1, b"x", b"y")
        wait_until(lambda: answered(fetch(raw, 0, -1, topic, {1: 0}))[1][1] == first + 2)
        got = fetch(raw, session, 2, topic)
        assert answered(got) == {1: (errors.NONE, first + 2, [b"x", b"y"])}  # only partition 1

        # moved on past them: nothing new to say (the high watermark was told)
        assert answered(fetch(raw, session, 3, topic, {1: first + 2})) == {}

        # partition 3 added, partition 2 forgotten: records in 2 are not answered any more
        added = fetch(raw, session, 4, topic, {3: 0}, forgotten=(2,))
        assert answered(added) == {3: (errors.NONE, 0, [])}  # a new partition: told once
        produce_values(producer, topic, 2, b"gone")
        third = produce_values(producer, topic, 3, b"z")
        wait_until(lambda: answered(fetch(raw, 0, -1, topic, {3: 0}))[3][1] == third + 1)
        assert answered(fetch(raw, session, 5, topic)) == {3: (errors.NONE, third + 1, [b"z"])}

        # the session's partition 1 still reads from where the client said it was
        late = produce_values(producer, topic, 1, b"w")
        wait_until(lambda: answered(fetch(raw, 0, -1, topic, {1: 0}))[1][1] == late + 1)
        assert answered(fetch(raw, session, 6, topic, {3: third + 1})) == {
            1: (errors.NONE, late + 1, [b"w"])
        }


def test_a_moved_log_start_is_answered_in_the_session(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """DeleteRecords (and retention) publish the moved log start on the partition's hw
    channel, so a caught-up session partition is looked at again and told."""
    a, b = kafka_pods
    create_topic(a.kafka_port, topic, 2)
    with RawKafka(a.kafka_port) as raw:
        first = produce_values(raw, topic, 0, b"a", b"b", b"c")
        full = fetch(raw, 0, 0, topic, {0: first + 3, 1: 0})
        session = full.session_id
        # caught up: nothing to say (the wait lets the pod settle them: listened to, quiet)
        assert answered(fetch(raw, session, 1, topic, max_wait_ms=500)) == {}
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.kafka_port}"})
        (deleted,) = admin.delete_records([TopicPartition(topic, 0, first + 2)]).values()
        assert deleted.result(10).low_watermark == first + 2
        moved = fetch(raw, session, 2, topic, max_wait_ms=5_000)  # woken by the notice
        assert [(p.partition_index, p.log_start_offset) for p in moved.responses[0].partitions] == [
            (0, first + 2)
        ]


def test_session_errors_and_closing_a_session(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, b = kafka_pods
    create_topic(a.kafka_port, topic, 1)
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        session = fetch(raw, 0, 0, topic, {0: 0}).session_id
        for response, error in [
            (fetch(raw, session, 2, topic), errors.INVALID_FETCH_SESSION_EPOCH),
            (fetch(raw, session + 1, 1, topic), errors.FETCH_SESSION_ID_NOT_FOUND),
            (fetch(other, session, 1, topic), errors.FETCH_SESSION_ID_NOT_FOUND),  # a pod's own
        ]:
            assert (response.error_code, response.session_id, answered(response)) == (
                error, 0, {},
            )  # fmt: skip
        assert fetch(raw, session, 1, topic).error_code == errors.NONE  # it lives on
        sessionless = fetch(raw, session, -1, topic, {0: 0})  # closes it
        assert (sessionless.session_id, list(answered(sessionless))) == (0, [0])
        assert fetch(raw, session, 2, topic).error_code == errors.FETCH_SESSION_ID_NOT_FOUND


def test_an_incremental_fetch_waits_on_the_partitions_of_its_session(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, b = kafka_pods
    create_topic(a.kafka_port, topic, 3)
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as producer:
        session = fetch(raw, 0, 0, topic, {0: 0, 1: 0, 2: 0}).session_id
        assert answered(fetch(raw, session, 1, topic)) == {}
        # the request names no partition: the long-poll is on the session's
        timer = threading.Timer(0.3, lambda: produce_values(producer, topic, 2, b"late"))
        timer.start()
        try:
            woken = fetch(raw, session, 2, topic, max_wait_ms=8_000)  # (raw: 10 s)
        finally:
            timer.join()
        assert [(p, values) for p, (_, _, values) in answered(woken).items()] == [(2, [b"late"])]


def test_sessions_are_lost_with_a_restart_and_the_client_starts_again(
    redis_url: str, topic: str
) -> None:
    kafka_port = free_port()
    pod = Pod(redis_url, *RF1, kafka_port=kafka_port).start()
    try:
        create_topic(kafka_port, topic, 2)
        with RawKafka(kafka_port) as raw:
            session = fetch(raw, 0, 0, topic, {0: 0, 1: 0}).session_id
            produce_values(raw, topic, 0, b"before")
            assert answered(fetch(raw, session, 1, topic))[0][2] == [b"before"]
        pod.stop()
        pod = Pod(redis_url, *RF1, kafka_port=kafka_port).start()
        with RawKafka(kafka_port) as raw:
            lost = fetch(raw, session, 2, topic)
            assert (lost.error_code, answered(lost)) == (errors.FETCH_SESSION_ID_NOT_FOUND, {})
            again = fetch(raw, 0, 0, topic, {0: 1, 1: 0})
            assert again.session_id > 0 and set(answered(again)) == {0, 1}
    finally:
        pod.stop()


def test_a_full_cache_answers_full_fetches_without_a_session(
    start_pod: Any, redis_url: str, topic: str
) -> None:
    one = start_pod(redis_url, *RF1, "--kafka-fetch-session-slots", "1")
    none = start_pod(redis_url, *RF1, "--kafka-fetch-session-slots", "0")
    create_topic(one.kafka_port, topic, 2)
    with RawKafka(one.kafka_port) as raw, RawKafka(none.kafka_port) as other:
        first = fetch(raw, 0, 0, topic, {0: 0}).session_id
        # the only slot holds a session younger than Kafka's 120 s: none for this one
        second = fetch(raw, 0, 0, topic, {0: 0, 1: 0})
        assert first > 0 and second.session_id == 0 and set(answered(second)) == {0, 1}
        assert fetch(raw, first, 1, topic).error_code == errors.NONE
        third = fetch(other, 0, 0, topic, {0: 0, 1: 0})
        assert third.session_id == 0 and set(answered(third)) == {0, 1}


def test_which_clients_open_sessions(start_pod: Any, redis_url: str, topic: str) -> None:
    """librdkafka (confluent-kafka) and aiokafka send sessionless fetches (session 0, epoch
    -1, or a version without sessions); kafka-python opens a session and goes on
    incrementally: the pod's counts of the Fetch requests it got, by kind, say so."""
    metrics_port = free_port()
    pod = start_pod(redis_url, *RF1, "--metrics-port", str(metrics_port))
    bootstrap = f"127.0.0.1:{pod.kafka_port}"
    create_topic(pod.kafka_port, topic, 3)

    def kinds() -> dict[str, float]:
        samples = scrape_metrics(metrics_port)
        return {
            dict(labels)["kind"]: value
            for (name, labels), value in samples.items()
            if name == "adapter_kafka_fetches_total"
        }

    confluent = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"{topic}-c", "fetch.wait.max.ms": 50,
    })  # fmt: skip
    confluent.subscribe([topic])
    deadline = time.monotonic() + 30
    while kinds()["sessionless"] < 5 and time.monotonic() < deadline:
        confluent.poll(0.2)
    confluent.close()
    assert kinds()["sessionless"] >= 5
    assert kinds() == {"sessionless": kinds()["sessionless"], "full": 0, "incremental": 0,
                       "session_error": 0}  # fmt: skip

    async def aiokafka_reads() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50)
        await consumer.start()
        try:
            consumer.assign([ATopicPartition(topic, p) for p in range(3)])
            before = kinds()["sessionless"]
            deadline = time.monotonic() + 30
            while kinds()["sessionless"] < before + 5 and time.monotonic() < deadline:
                await consumer.getmany(timeout_ms=200)
        finally:
            await consumer.stop()

    before = kinds()["sessionless"]
    asyncio.run(aiokafka_reads())
    assert kinds()["sessionless"] >= before + 5
    assert (kinds()["full"], kinds()["incremental"]) == (0, 0)

    python = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=f"{topic}-p", fetch_max_wait_ms=50
    )
    deadline = time.monotonic() + 30
    while kinds()["incremental"] < 5 and time.monotonic() < deadline:
        python.poll(timeout_ms=200)
    python.close()
    seen = kinds()
    assert seen["full"] >= 1 and seen["incremental"] >= 5 and seen["session_error"] == 0


def test_consumers_on_many_partitions_read_everything_once(
    start_pod: Any, redis_url: str, topic: str
) -> None:
    """Records keep arriving on 60 partitions while confluent-kafka consumers (sessionless,
    answered from the pod's views where nothing happened) and a kafka-python consumer (in a
    session, which a pod restart resets) read them: each reads every record once."""
    kafka_port = free_port()
    pod = Pod(redis_url, *RF1, kafka_port=kafka_port).start()
    bootstrap = f"127.0.0.1:{kafka_port}"
    partitions, rounds, per_round = 60, 6, 100
    try:
        create_topic(kafka_port, topic, partitions)
        confluent = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"{topic}-c",
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 100,
                }
            )  # fmt: skip
            for _ in range(2)
        ]
        for consumer in confluent:
            consumer.subscribe([topic])
        python = KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=f"{topic}-p",
            auto_offset_reset="earliest", fetch_max_wait_ms=100,
        )  # fmt: skip
        got_c: list[bytes] = []
        got_p: list[bytes] = []

        def poll() -> None:
            for consumer in confluent:
                message = consumer.poll(0.05)
                if message is not None and message.error() is None:
                    got_c.append(message.value())
            for records in python.poll(timeout_ms=50).values():
                got_p.extend(r.value for r in records)

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent: list[bytes] = []
        for r in range(rounds):
            for i in range(per_round):
                value = f"{r}-{i}".encode()
                producer.produce(topic, value, partition=(r * 7 + i * 13) % partitions)
                sent.append(value)
            producer.flush(30)
            if r == rounds // 2:  # every session this pod held is lost
                pod.stop()
                pod = Pod(redis_url, *RF1, kafka_port=kafka_port).start()
            for _ in range(10):
                poll()
        deadline = time.monotonic() + 60
        while (len(got_c) < len(sent) or len(got_p) < len(sent)) and time.monotonic() < deadline:
            poll()
        for _ in range(10):  # nothing more comes (no record twice)
            poll()
        for consumer in confluent:
            consumer.close()
        python.close()
        assert sorted(got_c) == sorted(sent)
        assert sorted(got_p) == sorted(sent)
    finally:
        pod.stop()
