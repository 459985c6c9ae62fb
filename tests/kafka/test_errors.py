"""Error paths of a live pod's Kafka listener, provoked with the raw client: each code a
client can meet on produce/fetch, idempotent retries, and what closes a connection."""

from __future__ import annotations

import struct
import threading

import pytest
import redis

from adapter.kafka import errors, protocol
from adapter.kafka.versions import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    FETCH,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
)
from mapping.core.keys import Keys
from tests.support.kafka import RawKafka, batch, fetch_body, fetched, partition_reply, produce_body
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


def _create(raw: RawKafka, topic: str) -> None:
    body = METADATA.request[12](
        topics=[METADATA.request.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
    )
    reply = raw.call(METADATA, 12, body)
    assert reply.topics[0].error_code == errors.NONE


def _produce(raw: RawKafka, topic: str, partition: int, data: bytes, acks: int = 1):
    return partition_reply(raw.call(PRODUCE, 9, produce_body(topic, partition, data, acks)))


def test_unknown_topic_and_partition(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        assert (
            _produce(raw, topic, 0, batch([b"v"])).error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        )
        _create(raw, topic)
        assert (
            _produce(raw, topic, 3, batch([b"v"])).error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        )
        part, _ = fetched(raw.call(FETCH, 12, fetch_body(topic, 7, 0)))
        assert part.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION
        # the connection is still usable
        assert _produce(raw, topic, 0, batch([b"v"])).error_code == errors.NONE


def test_corrupt_crc_and_message_too_large(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        data = bytearray(batch([b"value"]))
        data[-1] ^= 0xFF
        assert _produce(raw, topic, 0, bytes(data)).error_code == errors.CORRUPT_MESSAGE
        huge = batch([b"x" * (5 << 20)])  # the pods allow 4 MiB
        assert _produce(raw, topic, 0, huge).error_code == errors.MESSAGE_TOO_LARGE
        part, got = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert part.high_watermark == 0 and got == []  # nothing was stored


def test_fetch_offsets_and_the_high_watermark(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        _create(raw, topic)
        part, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert (part.error_code, part.high_watermark, got) == (errors.NONE, 0, [])
        base = _produce(raw, topic, 0, batch([b"a", b"b", b"c"])).base_offset
        part, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, 0)))
        # offset 0 on a log that lost nothing reads from its first record
        assert [(r.offset, r.value) for r in got] == [
            (base, b"a"),
            (base + 1, b"b"),
            (base + 2, b"c"),
        ]
        assert part.high_watermark == base + 3
        part, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, base + 1)))
        assert [r.value for r in got] == [b"b", b"c"]
        part, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, base + 3)))
        assert (part.error_code, got) == (errors.NONE, [])
        part, _ = fetched(other.call(FETCH, 12, fetch_body(topic, 0, base + 4)))
        assert part.error_code == errors.OFFSET_OUT_OF_RANGE
        part, _ = fetched(other.call(FETCH, 12, fetch_body(topic, 0, -7)))
        assert part.error_code == errors.OFFSET_OUT_OF_RANGE  # and the connection stays
        _, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, base)))
        assert len(got) == 3


def test_a_long_poll_wakes_on_a_new_record(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """The fetch waits up to 30 s; it can only hold the record if a notification woke it."""
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port, timeout=60) as poller:
        _create(raw, topic)
        start = _produce(raw, topic, 1, batch([b"first"])).base_offset + 1
        replies: list = []
        waiting = threading.Thread(
            target=lambda: replies.append(
                poller.call(FETCH, 12, fetch_body(topic, 1, start, max_wait_ms=30_000))
            )
        )
        waiting.start()
        # produce again until the poll answered (the first produce may precede its read)
        while waiting.is_alive():
            _produce(raw, topic, 1, batch([b"later"]))
            waiting.join(0.5)
        _, got = fetched(replies[0])
        assert got and got[0].value == b"later" and got[0].offset >= start


def test_idempotent_retries_are_stored_once(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        _create(raw, topic)
        ids = raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
            transactional_id=None, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1
        ))  # fmt: skip
        assert ids.error_code == errors.NONE
        pid = ids.producer_id

        def send(seq: int, values: list[bytes], epoch: int = 0, via: RawKafka = raw):
            data = batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            return _produce(via, topic, 0, data)

        first = send(0, [b"a", b"b"])
        assert first.error_code == errors.NONE
        retried = send(0, [b"a", b"b"], via=other)  # a retry through another pod
        assert (retried.error_code, retried.base_offset) == (errors.NONE, first.base_offset)
        # ahead of the state stored: UNKNOWN_PRODUCER_ID (librdkafka bumps its epoch, KIP-360)
        assert send(5, [b"gap"]).error_code == errors.UNKNOWN_PRODUCER_ID
        # behind it and not a batch kept: out of order
        assert send(1, [b"b"]).error_code == errors.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert send(2, [b"c"]).error_code == errors.NONE
        bumped = send(0, [b"d"], epoch=1)
        assert bumped.error_code == errors.NONE
        assert send(3, [b"old epoch"], epoch=0).error_code == errors.INVALID_PRODUCER_EPOCH
        _, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert [r.value for r in got] == [b"a", b"b", b"c", b"d"]


def test_produce_answers_the_log_start_offset(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """Kafka's Produce answer carries the partition's log start offset whatever its status
    (a Java producer told UNKNOWN_PRODUCER_ID with -1 there sends the batch again until its
    delivery timeout): 0 while nothing was removed, as Fetch answers, then one past what
    DeleteRecords removed; through the module's append and the script's (a compacted topic)."""
    a, _ = kafka_pods
    compacted = f"{topic}-compacted"
    make, trim = CREATE_TOPICS.request, DELETE_RECORDS.request[2]
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        made = raw.call(CREATE_TOPICS, 7, make[7](
            topics=[make.CreatableTopic(
                name=compacted, num_partitions=1, replication_factor=1, assignments=[],
                configs=[make.CreatableTopic.CreatableTopicConfig(
                    name="cleanup.policy", value="compact")],
            )],
            timeout_ms=5000, validate_only=False,
        ))  # fmt: skip
        # (a null message, as Kafka's controller answers a topic made; kafkajs checks it)
        assert (made.topics[0].error_code, made.topics[0].error_message) == (errors.NONE, None)
        pid = raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
            transactional_id=None, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1
        )).producer_id  # fmt: skip
        for name in (topic, compacted):

            def send(seq: int, values: list[bytes], name: str = name) -> tuple[int, int, int]:
                data = batch(values, producer_id=pid, producer_epoch=0, base_sequence=seq)
                answer = _produce(raw, name, 0, data)
                return answer.error_code, answer.base_offset, answer.log_start_offset

            code, base, log_start = send(0, [b"a", b"b"])
            assert (code, log_start) == (errors.NONE, 0), name
            assert send(0, [b"a", b"b"]) == (errors.NONE, base, 0)  # a retry
            assert send(5, [b"gap"]) == (errors.UNKNOWN_PRODUCER_ID, -1, 0)
            cut = base + 1
            trimmed = raw.call(DELETE_RECORDS, 2, trim(
                topics=[trim.DeleteRecordsTopic(name=name, partitions=[
                    trim.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=cut)
                ])],
                timeout_ms=5000,
            )).topics[0].partitions[0]  # fmt: skip
            assert (trimmed.error_code, trimmed.low_watermark) == (errors.NONE, cut)
            code, _, log_start = send(2, [b"c"])
            assert (code, log_start) == (errors.NONE, cut), name
            assert send(5, [b"gap"]) == (errors.UNKNOWN_PRODUCER_ID, -1, cut)
            assert send(1, [b"b"]) == (errors.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, cut)


def test_init_producer_id_never_hands_out_an_id_it_is_told(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """Without a transactional id every InitProducerId gets a new id at epoch 0, whatever id
    and epoch it names (Kafka's rule): @platformatic/kafka sends 0/0, and three such
    producers writing one partition with sequence 0 each get their own record stored."""
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        _create(raw, topic)

        def init(via: RawKafka, producer_id: int, epoch: int) -> tuple[int, int]:
            reply = via.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
                transactional_id=None, transaction_timeout_ms=1000,
                producer_id=producer_id, producer_epoch=epoch,
            ))  # fmt: skip
            assert reply.error_code == errors.NONE
            return reply.producer_id, reply.producer_epoch

        named = [init(via, 0, 0) for via in (raw, other, raw)]
        assert [epoch for _, epoch in named] == [0, 0, 0]
        assert len({pid for pid, _ in named}) == 3
        bumped = init(raw, named[0][0], 0)  # a KIP-360 bump of its own id: a new one too
        assert bumped[1] == 0 and bumped[0] not in {pid for pid, _ in named}
        offsets = []
        for pid, epoch in named:
            data = batch([f"from {pid}".encode()], producer_id=pid, producer_epoch=epoch,
                         base_sequence=0)  # fmt: skip
            reply = _produce(raw, topic, 0, data)
            assert reply.error_code == errors.NONE
            offsets.append(reply.base_offset)
        assert len(set(offsets)) == 3
        _, got = fetched(other.call(FETCH, 12, fetch_body(topic, 0, 0)))
        assert sorted(r.value for r in got) == sorted(f"from {pid}".encode() for pid, _ in named)


def test_idle_producers_state_expires(redis_url: str, topic: str) -> None:
    """A producer idle for longer than --kafka-producer-id-expiration-ms loses its sequence
    state in the partition (dropped by the next idempotent append there) and is taken as new
    when it comes back; an active producer keeps its state."""
    prefix = f"expiry-{topic}"
    pod = Pod(
        redis_url, *RF1, "--key-prefix", prefix,
        "--kafka-producer-id-expiration-ms", "500",
    ).start()  # fmt: skip
    client = redis.Redis.from_url(redis_url)
    pk = Keys(prefix).partition(topic, 0)
    try:
        with RawKafka(pod.kafka_port) as raw:
            _create(raw, topic)
            idle, active = (
                raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
                    transactional_id=None, transaction_timeout_ms=1000,
                    producer_id=-1, producer_epoch=-1,
                )).producer_id
                for _ in range(2)
            )  # fmt: skip

            def send(pid: int, seq: int, value: bytes) -> int:
                data = batch([value], producer_id=pid, producer_epoch=0, base_sequence=seq)
                return _produce(raw, topic, 0, data).error_code

            assert send(idle, 0, b"idle 0") == errors.NONE
            assert send(active, 0, b"active 0") == errors.NONE
            assert client.hexists(pk.producers, idle)
            # within the period a gap is refused: the state is there
            assert send(idle, 5, b"gap") == errors.UNKNOWN_PRODUCER_ID
            sequence = iter(range(1, 10_000))
            wait_until(
                lambda: (
                    send(active, next(sequence), b"active") == errors.NONE
                    and not client.hexists(pk.producers, idle)
                ),
                timeout=10,
                interval=0.1,
            )
            assert client.zscore(pk.producer_times, idle) is None
            assert client.hexists(pk.producers, active)
            # back after expiry: a new producer, any sequence accepted
            assert send(idle, 5, b"idle again") == errors.NONE
            assert send(idle, 6, b"idle next") == errors.NONE
            assert send(idle, 9, b"gap again") == errors.UNKNOWN_PRODUCER_ID
    finally:
        client.close()
        pod.stop()


def test_a_producer_whose_state_was_taken_back_goes_on(redis_url: str, topic: str) -> None:
    """A Redis failover without --redis-wait-replicas can take back a producer's last
    batches (its state in the partition rewound here by hand) and the producer id counter's
    last INCRs (the counter deleted): the producer's next batch, ahead of the state, gets
    UNKNOWN_PRODUCER_ID (OUT_OF_ORDER_SEQUENCE_NUMBER would be fatal to librdkafka), the
    epoch bump librdkafka then makes locally (same id, epoch + 1, sequence 0) is taken, and
    no producer id is handed out twice."""
    prefix = f"rewound-{topic}"
    pod = Pod(redis_url, *RF1, "--key-prefix", prefix).start()
    client = redis.Redis.from_url(redis_url)
    keys = Keys(prefix)
    pk = keys.partition(topic, 0)
    try:
        with RawKafka(pod.kafka_port) as raw:
            _create(raw, topic)

            def init() -> int:
                reply = raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
                    transactional_id=None, transaction_timeout_ms=1000,
                    producer_id=-1, producer_epoch=-1,
                ))  # fmt: skip
                assert (reply.error_code, reply.producer_epoch) == (errors.NONE, 0)
                return reply.producer_id

            pid = init()

            def send(seq: int, value: bytes, epoch: int = 0) -> int:
                data = batch([value], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
                return _produce(raw, topic, 0, data).error_code

            assert send(0, b"kept") == errors.NONE
            state_after_kept = client.hget(pk.producers, pid)
            assert send(1, b"lost 1") == errors.NONE
            assert send(2, b"lost 2") == errors.NONE
            client.hset(pk.producers, pid, state_after_kept)  # the failover's rollback
            assert send(3, b"next") == errors.UNKNOWN_PRODUCER_ID
            assert send(0, b"bumped 0", epoch=1) == errors.NONE
            assert send(1, b"bumped 1", epoch=1) == errors.NONE
            # a newer epoch whose first batches were taken back: ahead of the state too
            client.hset(pk.producers, pid, state_after_kept)
            assert send(2, b"bumped 2", epoch=1) == errors.UNKNOWN_PRODUCER_ID
            assert send(0, b"bumped again 0", epoch=2) == errors.NONE
            assert send(0, b"retry", epoch=2) == errors.NONE  # a retry: stored once
            _, got = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
            assert [r.value for r in got] == [
                b"kept", b"lost 1", b"lost 2", b"bumped 0", b"bumped 1", b"bumped again 0"
            ]  # fmt: skip

            # the counter's last INCRs taken back: the next id is still a new one
            client.delete(keys.kafka_producer_ids)
            assert init() > pid
    finally:
        client.close()
        pod.stop()


def test_acks_zero_gets_no_response_and_order_is_kept(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        raw.send(PRODUCE, 9, produce_body(topic, 0, batch([b"quiet"]), acks=0))
        # pipelined: two requests before reading; answers come in request order
        first = raw.send(API_VERSIONS, 3, API_VERSIONS.request[3](
            client_software_name="t", client_software_version="1"
        ))  # fmt: skip
        second = raw.send(FETCH, 12, fetch_body(topic, 0, 0))
        assert raw.receive(API_VERSIONS, 3).header.correlation_id == first
        reply = raw.receive(FETCH, 12)
        assert reply.header.correlation_id == second
        _, got = fetched(reply)
        assert [r.value for r in got] == [b"quiet"]


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">i", 200 << 20),  # above --kafka-max-request-bytes
        struct.pack(">ihhi", 8, 999, 0, 1),  # an API key the pod does not implement
        # versions outside the served range: CreateTopics v8, Produce v12, ListOffsets v8
        # (an empty answer would read as success)
        struct.pack(">ihhih", 14, 19, 8, 1, -1) + b"\x00\x00\x00\x00",
        struct.pack(">ihhih", 10, 0, 12, 1, -1),
        struct.pack(">ihhih", 10, 2, 8, 1, -1),
    ],
)
def test_what_closes_a_connection(kafka_pods: tuple[Pod, Pod], frame: bytes) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        raw.sock.sendall(frame)
        assert raw.closed_by_peer()
    with RawKafka(a.kafka_port) as raw:  # the pod still answers
        assert raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE


def test_an_unsupported_version_is_answered(kafka_pods: tuple[Pod, Pod]) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        raw.sock.sendall(struct.pack(">ihhi", 10, API_VERSIONS.key, 77, 5) + b"\x00\x00")
        reply = raw.receive(API_VERSIONS, 0)
        assert (reply.header.correlation_id, reply.error_code) == (5, errors.UNSUPPORTED_VERSION)
        assert raw.call(API_VERSIONS, 3, API_VERSIONS.request[3](
            client_software_name="t", client_software_version="1"
        )).error_code == errors.NONE  # fmt: skip


def test_thousands_of_pipelined_requests_in_one_write_are_answered_in_order(
    kafka_pods: tuple[Pod, Pod],
) -> None:
    """More requests than a connection keeps open at once (100), all in one write: the rest
    wait unstarted, and every one is answered, in order."""
    a, _ = kafka_pods
    body = API_VERSIONS.request[0]()
    with RawKafka(a.kafka_port) as raw:
        frames = []
        for _ in range(3000):
            raw.correlation_id += 1
            frames.append(protocol.encode_request(API_VERSIONS, 0, body, raw.correlation_id, "p"))
        raw.sock.sendall(b"".join(frames))
        seen = [raw.receive(API_VERSIONS, 0).header.correlation_id for _ in range(3000)]
        assert seen == list(range(1, 3001))


def test_every_implemented_version_is_answered(kafka_pods: tuple[Pod, Pod]) -> None:
    """A default (empty) request of every API in every advertised version gets its response
    on the same connection."""
    from adapter.kafka.versions import IMPLEMENTED

    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        for api in IMPLEMENTED.values():
            for version in range(api.min_version, api.max_version + 1):
                body = api.request[version]()
                if api is PRODUCE:
                    body.acks = 1  # acks=0 has no response
                reply = raw.call(api, version, body)
                assert reply.header is not None, (api.name, version)


@pytest.mark.parametrize(
    ("api", "version", "body"),
    [
        # Metadata v1: one topic whose name is a null string
        (METADATA, 1, struct.pack(">ih", 1, -1)),
        # Produce v3: null transactional id, acks 1, timeout, one topic with a null name,
        # one partition (index 0) with null records
        (PRODUCE, 3, struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", -1)
         + struct.pack(">iii", 1, 0, -1)),
        # Fetch v4: replica -1, wait 0, min 0, max 1 MiB, isolation 0, one null-named topic
        (FETCH, 4, struct.pack(">iiiib", -1, 0, 0, 1 << 20, 0) + struct.pack(">ih", 1, -1)
         + struct.pack(">iiqi", 1, 0, 0, 1 << 20)),
    ],
)  # fmt: skip
def test_null_topic_names_get_an_error_not_a_closed_connection(
    kafka_pods: tuple[Pod, Pod], api, version: int, body: bytes
) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        header = struct.pack(">hhih", api.key, version, 99, 1) + b"t"
        frame = header + body
        raw.sock.sendall(struct.pack(">i", len(frame)) + frame)
        reply = raw.receive(api, version)
        assert reply.header.correlation_id == 99
        assert raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).error_code == errors.NONE


def test_fetch_pages_hold_every_record_below_their_high_watermark(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """The V1 short-page defect, checked on Kafka Fetch: after new writes, a fetch from 0 on
    either pod returns every record below the high watermark it reports."""
    a, b = kafka_pods
    produced: list[int] = []
    with RawKafka(a.kafka_port) as raw, RawKafka(b.kafka_port) as other:
        _create(raw, topic)
        for round_ in range(8):
            reply = _produce(raw, topic, 1, batch([f"v{round_}".encode()]), acks=-1)
            assert reply.error_code == errors.NONE
            produced.append(reply.base_offset)
            for via in (raw, other):
                part, got = fetched(via.call(FETCH, 12, fetch_body(topic, 1, 0)))
                assert part.high_watermark > produced[-1]
                assert [r.offset for r in got] == [o for o in produced if o < part.high_watermark]
