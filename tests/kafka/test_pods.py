"""Metadata over live pods (registration in Redis, one broker per advertised address,
leadership by a stable hash), Redis outages (KAFKA_STORAGE_ERROR, then recovery), and a
live Kafka port under random frames."""

from __future__ import annotations

import signal
import socket
import struct
import time
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.kafka import errors, protocol
from adapter.kafka.versions import API_VERSIONS, FETCH, METADATA, PRODUCE
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import Keys
from mapping.topic.brokers import KAFKA_REGISTER, kafka_register_call
from tests.support.kafka import RawKafka, batch, fetch_body, fetched, partition_reply, produce_body
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


def _metadata(port: int, topics: list[str] | None, create: bool = True):
    with RawKafka(port) as raw:
        wanted = (
            None
            if topics is None
            else [METADATA.request.MetadataRequestTopic(name=t) for t in topics]
        )
        return raw.call(METADATA, 12, METADATA.request[12](
            topics=wanted, allow_auto_topic_creation=create
        ))  # fmt: skip


def test_live_pods_are_the_brokers_and_leave_when_stopped(start_pod, redis_url: str) -> None:
    prefix = ("--key-prefix", f"meta-{uuid.uuid4().hex[:8]}")  # its own broker registry
    a = start_pod(redis_url, *prefix, *RF1)
    b = start_pod(redis_url, *prefix, *RF1)
    ports = {a.kafka_port, b.kafka_port}
    reply = _metadata(a.kafka_port, ["spread"])
    assert {broker.port for broker in reply.brokers} == ports
    (topic,) = reply.topics
    assert topic.error_code == errors.NONE and len(topic.partitions) == 3
    leaders = [p.leader_id for p in topic.partitions]
    assert len(set(leaders)) == 2  # three partitions spread over both
    # every pod tells the same story
    other = _metadata(b.kafka_port, ["spread"])
    assert [p.leader_id for p in other.topics[0].partitions] == leaders
    b.stop()
    wait_until(lambda: {x.port for x in _metadata(a.kafka_port, []).brokers} == {a.kafka_port})


def test_the_controller_is_the_pod_answering_not_a_killed_one(start_pod, redis_url: str) -> None:
    """A pod killed a moment ago stays registered for a TTL. Were it named the controller (the
    first broker by node id), librdkafka's CreateTopics would wait on its refused address
    until the request timed out; each pod names itself, and the topic is created."""
    from confluent_kafka.admin import AdminClient, NewTopic

    prefix = f"ctl-{uuid.uuid4().hex[:8]}"
    # node id 1: a registration left by a pod that is gone (nothing listens there)
    gone = redis.Redis.from_url(redis_url)
    gone.script_load(KAFKA_REGISTER.source)
    gone.execute_command(
        *kafka_register_call(Keys(prefix).kafka_brokers, "gone", "127.0.0.1:9", 60_000)
    )
    pod = start_pod(redis_url, "--key-prefix", prefix, *RF1)
    reply = _metadata(pod.kafka_port, [])
    assert sorted(b.port for b in reply.brokers) == sorted([9, pod.kafka_port])
    (here,) = [b.node_id for b in reply.brokers if b.port == pod.kafka_port]
    assert reply.controller_id == here
    admin = AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 10_000})
    topic = f"ctl-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=15)[topic].result(timeout=30)
    assert len(_metadata(pod.kafka_port, [topic], create=False).topics[0].partitions) == 2


def test_pods_sharing_an_advertised_address_are_one_broker(start_pod, redis_url: str) -> None:
    shared = (
        "--kafka-advertised-listener", "kafka.example:9093",
        "--key-prefix", f"shared-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    a = start_pod(redis_url, *shared)
    b = start_pod(redis_url, *shared)
    for port in (a.kafka_port, b.kafka_port):
        brokers = _metadata(port, []).brokers
        assert [(x.host, x.port) for x in brokers] == [("kafka.example", 9093)]


def test_auto_create_only_when_allowed(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, _ = kafka_pods
    refused = _metadata(a.kafka_port, [topic], create=False).topics[0]
    assert refused.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
    assert (
        _metadata(a.kafka_port, ["bad/name"]).topics[0].error_code == errors.INVALID_TOPIC_EXCEPTION
    )
    created = _metadata(a.kafka_port, [topic]).topics[0]
    assert created.error_code == errors.NONE
    listed = _metadata(a.kafka_port, None).topics
    assert topic in {t.name for t in listed}


def test_redis_down_is_a_storage_error_and_recovery_follows(
    own_redis: RedisProcess, start_pod, topic: str
) -> None:
    pod = start_pod(own_redis.url, *RF1, "--redis-timeout-ms", "500")
    _metadata(pod.kafka_port, [topic])
    with RawKafka(pod.kafka_port) as raw:
        ok = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"a"]))))
        assert ok.error_code == errors.NONE
        own_redis.kill()
        down = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"b"]))))
        assert down.error_code == errors.KAFKA_STORAGE_ERROR
        own_redis.start()

        def produced() -> bool:
            reply = raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"c"])))
            return partition_reply(reply).error_code == errors.NONE

        wait_until(produced, timeout=20, interval=0.2)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.one_of(
        st.binary(max_size=64),
        st.builds(
            lambda key, version, body: struct.pack(">ihhi", 8 + len(body), key, version, 1) + body,
            st.sampled_from([0, 1, 2, 3, 18, 22]) | st.integers(-5, 80),
            st.integers(-3, 20),
            st.binary(max_size=40),
        ),
        st.builds(lambda n: struct.pack(">i", n), st.integers(-(2**31), 2**31 - 1)),
    )
)
def test_random_frames_never_hurt_the_pod(kafka_pods: tuple[Pod, Pod], data: bytes) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as bystander:  # a connection open meanwhile
        with socket.create_connection(("127.0.0.1", a.kafka_port), timeout=5) as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError):
                pass
        request = API_VERSIONS.request[0]()
        assert bystander.call(API_VERSIONS, 0, request).error_code == errors.NONE
    with RawKafka(a.kafka_port) as raw:  # and a new one
        assert raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE


def test_acks_all_with_the_replicator_and_without_enough_replicas(
    start_pod, redis_url: str, topic: str
) -> None:
    """Three replicas: the built-in replicator acknowledges; with no replicator and followers
    dropping out at once, acks=all answers NOT_ENOUGH_REPLICAS_AFTER_APPEND (the record stays
    in the log, as V1's acks=all: never a code that says it was not written)."""
    replicated = start_pod(redis_url)
    _metadata(replicated.kafka_port, [topic])
    with RawKafka(replicated.kafka_port) as raw:
        body = produce_body(topic, 0, batch([b"replicated"]), acks=-1)
        assert partition_reply(raw.call(PRODUCE, 9, body)).error_code == errors.NONE
    lonely = start_pod(
        redis_url, "--no-replicator", "--replica-lag-max-ms", "0", "--key-prefix", "lonely"
    )
    _metadata(lonely.kafka_port, [topic])
    with RawKafka(lonely.kafka_port) as raw:
        body = produce_body(topic, 0, batch([b"alone"]), acks=-1)
        body.timeout_ms = 300
        reply = partition_reply(raw.call(PRODUCE, 9, body))
        assert reply.error_code == errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_idle_timeout_and_the_shared_connection_limit(start_pod, redis_url: str) -> None:
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "0.5", "--max-connections", "2")
    with RawKafka(pod.kafka_port) as idle:
        assert idle.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE
        assert idle.closed_by_peer()  # blocks until the pod closes it: the idle timeout
    with pod.client() as v1, RawKafka(pod.kafka_port) as kafka:
        assert v1.ping() == "pong"
        assert kafka.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE
        with RawKafka(pod.kafka_port) as third:  # V1 and Kafka share --max-connections
            assert third.closed_by_peer()


def test_sigterm_answers_open_kafka_requests_then_closes(
    start_pod, redis_url: str, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1)
    _metadata(pod.kafka_port, [topic])
    with RawKafka(pod.kafka_port) as raw:
        correlation_id = raw.send(FETCH, 12, fetch_body(topic, 0, 0, max_wait_ms=2000))
        pod.signal(signal.SIGTERM)
        reply = raw.receive(FETCH, 12)  # the long-poll still gets its answer
        assert reply.header.correlation_id == correlation_id
        assert reply.responses[0].partitions[0].error_code == errors.NONE
        assert raw.closed_by_peer()
    assert pod.process is not None and pod.process.wait(timeout=20) == 0


@pytest.mark.slow
def test_a_pod_killed_under_an_idempotent_producer_loses_and_duplicates_nothing(
    start_pod, redis_url: str, topic: str
) -> None:
    """SIGKILL one of two pods mid-stream: its registration expires, its partitions move to
    the other pod, the producer retries there; every acknowledged record is stored exactly
    once (retries of batches the dead pod had appended are recognised by their sequences)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    prefix = ("--key-prefix", f"kill-{uuid.uuid4().hex[:8]}")
    a = start_pod(redis_url, *prefix, *RF1)
    b = start_pod(redis_url, *prefix, *RF1)
    _metadata(a.kafka_port, [topic])
    producer = Producer({
        "bootstrap.servers": f"{a.bootstrap},{b.bootstrap}", "acks": "all",
        "enable.idempotence": True, "message.timeout.ms": 60000, "linger.ms": 5,
        "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
    })  # fmt: skip
    acked: list = []
    failed: list = []

    def report(err: object, msg: object) -> None:
        (failed if err else acked).append(err or msg)

    total = 3000
    for i in range(total):
        producer.produce(topic, value=b"%d" % i, partition=i % 3, on_delivery=report)
        if i == total // 3:
            a.kill()  # with batches in flight to it
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failed == []
    assert len(acked) == total

    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "kill",
                         "enable.auto.commit": False, "socket.timeout.ms": 5000})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    stored: list = []
    try:
        for _ in range(200):
            if len(stored) >= total:
                break
            stored += [m for m in consumer.consume(1000, 0.5) if m.error() is None]
    finally:
        consumer.close()
    values = [m.value() for m in stored]
    assert sorted(values) == sorted(b"%d" % i for i in range(total))  # once each
    assert {(m.partition(), m.offset()) for m in acked} == {
        (m.partition(), m.offset()) for m in stored
    }


def test_offsets_below_what_retention_removed_are_out_of_range(
    start_pod, redis_url: str, topic: str
) -> None:
    from adapter.kafka.versions import CREATE_TOPICS, LIST_OFFSETS

    pod = start_pod(redis_url, *RF1, "--retention-interval-ms", "100",
                    "--key-prefix", f"ret-{uuid.uuid4().hex[:8]}")  # fmt: skip
    request = CREATE_TOPICS.request
    retention = request.CreatableTopic.CreatableTopicConfig(name="retention.ms", value="0")
    with RawKafka(pod.kafka_port) as raw:
        created = raw.call(CREATE_TOPICS, 7, request[7](
            topics=[request.CreatableTopic(
                name=topic, num_partitions=1, replication_factor=1, assignments=[],
                configs=[retention],
            )],
            timeout_ms=5000, validate_only=False,
        ))  # fmt: skip
        assert created.topics[0].error_code == errors.NONE
        produced = partition_reply(
            raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"a", b"b"])))
        )
        assert produced.error_code == errors.NONE
        end = produced.base_offset + 2

        def trimmed() -> bool:
            part, _ = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
            return part.error_code == errors.OFFSET_OUT_OF_RANGE

        wait_until(trimmed, timeout=20)
        part, got = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, end)))
        assert (part.error_code, got, part.log_start_offset) == (errors.NONE, [], end)
        offsets = LIST_OFFSETS.request
        earliest = raw.call(LIST_OFFSETS, 7, offsets[7](
            replica_id=-1, isolation_level=0,
            topics=[offsets.ListOffsetsTopic(name=topic, partitions=[
                offsets.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-2)
            ])],
        ))  # fmt: skip
        assert earliest.topics[0].partitions[0].offset == end


def test_metrics_count_kafka_requests_by_api(start_pod, redis_url: str) -> None:
    import urllib.request

    from mapping.connection.embedded import free_port

    metrics_port = free_port()
    pod = start_pod(redis_url, "--metrics-port", str(metrics_port), "--metrics-host", "127.0.0.1")
    with RawKafka(pod.kafka_port) as raw:
        for _ in range(3):
            raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]())
        _metadata(pod.kafka_port, [])
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert 'adapter_kafka_requests_total{api="ApiVersions"} 3.0' in text
    assert 'adapter_kafka_requests_total{api="Metadata"} 1.0' in text
    assert 'adapter_kafka_request_seconds_count{api="ApiVersions"} 3.0' in text


def _valid_requests() -> list[tuple[object, int, bytes]]:
    """Encoded bodies (after the request header) of valid requests of the APIs whose any
    answer is immediate and harmless (no writes, no long-poll)."""
    from adapter.kafka.versions import DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, LIST_OFFSETS

    offsets = LIST_OFFSETS.request
    configs = DESCRIBE_CONFIGS.request
    topic = METADATA.request.MetadataRequestTopic
    bodies = [
        (METADATA, 12, METADATA.request[12](
            topics=[METADATA.request.MetadataRequestTopic(name="fuzz")],
            allow_auto_topic_creation=False,
        )),
        (METADATA, 1, METADATA.request[1](topics=[topic("f")])),
        (LIST_OFFSETS, 7, offsets[7](replica_id=-1, isolation_level=0, topics=[
            offsets.ListOffsetsTopic(name="fuzz", partitions=[
                offsets.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=-1)
            ])
        ])),
        (DESCRIBE_CONFIGS, 4, configs[4](resources=[
            configs.DescribeConfigsResource(resource_type=2, resource_name="fuzz",
                                            configuration_keys=None)
        ])),
        (DESCRIBE_CLUSTER, 0, DESCRIBE_CLUSTER.request[0]()),
        (API_VERSIONS, 3, API_VERSIONS.request[3](client_software_name="f",
                                                  client_software_version="1")),
    ]  # fmt: skip
    out = []
    for api, version, body in bodies:
        body.API_VERSION = version
        out.append((api, version, bytes(body.encode())))
    return out


VALID_REQUESTS = _valid_requests()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(range(len(VALID_REQUESTS))),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_mutated_request_bodies_are_answered(
    kafka_pods: tuple[Pod, Pod], which: int, mutations: list[tuple[int, int]]
) -> None:
    """Any body under a valid header gets an answer (INVALID_REQUEST when undecodable) and the
    connection stays usable, except where the API's response has no error code to carry
    the failure (an empty one would read as success): then the connection is closed. No
    handler fails on what a client sent, and the pod goes on serving."""
    a, _ = kafka_pods
    api, version, body = VALID_REQUESTS[which]
    mutated = bytearray(body)
    for position, value in mutations:
        mutated[position % len(mutated)] = value
    flexible = api.flexible(version)
    header = struct.pack(">hhih", api.key, version, 4242, 1) + b"f" + (b"\x00" if flexible else b"")
    frame = header + bytes(mutated)
    with RawKafka(a.kafka_port) as raw:
        raw.sock.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            head = raw.sock.recv(4, socket.MSG_WAITALL)
        except ConnectionResetError:
            head = b""
        if not head:  # closed: only when no response could carry INVALID_REQUEST
            assert not protocol.carries_error_code(api, version)
        else:
            (size,) = struct.unpack(">i", head)
            (correlation_id,) = struct.unpack(">i", raw._read(size)[:4])
            assert correlation_id == 4242
            assert raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE
    with RawKafka(a.kafka_port) as raw:
        assert raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE


def test_records_above_the_high_watermark_are_never_fetched(
    start_pod, redis_url: str, topic: str
) -> None:
    """Three replicas and no replicator: the followers stay in the ISR (caught up a moment
    ago) without acknowledging, so hw does not move: the appended records stay invisible."""
    pod = start_pod(redis_url, "--no-replicator", "--key-prefix", f"hw-{uuid.uuid4().hex[:8]}")
    _metadata(pod.kafka_port, [topic])
    with RawKafka(pod.kafka_port) as raw:
        produced = partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, batch([b"x"]))))
        assert produced.error_code == errors.NONE and produced.base_offset > 0
        part, got = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert (part.error_code, part.high_watermark, got) == (errors.NONE, 0, [])
        part, _ = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, produced.base_offset)))
        assert part.error_code == errors.OFFSET_OUT_OF_RANGE  # above Kafka's hw (0)


def test_a_client_that_reads_no_answers_is_cut_off(start_pod, redis_url: str, topic: str) -> None:
    """Pipelined fetches of ~900 KB each, never read: the pod stops reading and starting
    requests once the socket takes no more, and closes the connection after the idle
    timeout; other clients are served meanwhile."""
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "1")
    _metadata(pod.kafka_port, [topic])
    with RawKafka(pod.kafka_port) as raw:
        data = batch([b"x" * (128 << 10)] * 7)  # under the 1 MiB batch limit
        assert partition_reply(raw.call(PRODUCE, 9, produce_body(topic, 0, data))).error_code == 0
    greedy = socket.create_connection(("127.0.0.1", pod.kafka_port))
    try:
        greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        frame = protocol.encode_request(FETCH, 12, fetch_body(topic, 0, 0), 1, "greedy")
        greedy.setblocking(False)
        sent = 0
        for _ in range(500):  # as many as the pod takes before its reading pauses
            try:
                sent += greedy.send(frame)
            except BlockingIOError:
                break
        with RawKafka(pod.kafka_port) as other:
            assert other.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == 0
        wait_until(lambda: "took no answer" in pod.log(), timeout=20)
    finally:
        greedy.close()


def test_a_request_waiting_while_the_pod_was_stalled_is_answered(start_pod, redis_url: str) -> None:
    """A pod held up past the idle timeout (here SIGSTOP; in life a starved CPU or a long
    pause) runs its timers before it reads its sockets: a request that came meanwhile is
    read and answered, not closed unread as an idle connection (seen once in CI)."""
    pod = start_pod(redis_url, *RF1, "--idle-timeout-s", "1")
    assert pod.process is not None
    with RawKafka(pod.kafka_port) as raw:
        time.sleep(0.2)  # accepted
        pod.process.send_signal(signal.SIGSTOP)
        try:
            raw.send(API_VERSIONS, 0, API_VERSIONS.request[0]())
            time.sleep(1.5)
        finally:
            pod.process.send_signal(signal.SIGCONT)
        assert raw.receive(API_VERSIONS, 0).error_code == 0
