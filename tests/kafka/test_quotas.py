"""Kafka's client quotas: AlterClientQuotas / DescribeClientQuotas through any pod (the
quotas live in Redis), Kafka's error codes for bad requests with nothing stored, and a
producer over its byte-rate quota slowed to it, with throttle_time_ms, while another client
on the same pod keeps its own rate; the pod's metrics show the quota entity's bytes and
throttle time. A client over its request_percentage is throttled (its neighbour is not), and
a Fetch over consumer_byte_rate is answered without records, which the next Fetch gets; a
ShareFetch over it keeps the records it acquired and carries the throttle time."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from adapter.kafka import protocol
from adapter.kafka.versions import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    METADATA,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
    Api,
)
from mapping.core.keys import Keys
from tests.support.kafka import RawKafka, fetch_body, fetched, produce_values
from tests.support.pods import RF1, Pod, scrape_metrics, start_all

AlterRequest = ALTER_CLIENT_QUOTAS.request
DescribeRequest = DESCRIBE_CLIENT_QUOTAS.request
PREFIX = f"quotas-{uuid.uuid4().hex[:8]}"
QUOTA = 200_000  # bytes per second


@pytest.fixture(scope="module")
def quota_pods(redis_url: str) -> Iterator[tuple[Pod, Pod]]:
    pods = [Pod(redis_url, *RF1, "--key-prefix", PREFIX, metrics=True) for _ in range(2)]
    start_all(pods)
    yield pods[0], pods[1]
    for pod in pods:
        pod.stop()


def _alter(
    port: int, entries: list[tuple[dict[str, str | None], list[tuple[str, float, bool]]]], *,
    validate_only: bool = False, version: int = 1,
) -> list[tuple[int, str | None]]:  # fmt: skip
    request = AlterRequest[version]
    body = request(
        entries=[
            request.EntryData(
                entity=[
                    request.EntryData.EntityData(entity_type=t, entity_name=n)
                    for t, n in entity.items()
                ],
                ops=[request.EntryData.OpData(key=k, value=v, remove=r) for k, v, r in ops],
            )
            for entity, ops in entries
        ],
        validate_only=validate_only,
    )
    with RawKafka(port) as raw:
        reply = raw.call(ALTER_CLIENT_QUOTAS, version, body)
    return [(e.error_code, e.error_message) for e in reply.entries]


def _describe(
    port: int, components: list[tuple[str, int, str | None]], *, strict: bool = False,
    version: int = 0,
) -> Any:  # fmt: skip
    request = DescribeRequest[version]
    body = request(
        components=[
            request.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components
        ],
        strict=strict,
    )
    with RawKafka(port) as raw:
        return raw.call(DESCRIBE_CLIENT_QUOTAS, version, body)


def _entries(reply: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in reply.entries
    }


def test_alter_and_describe_through_any_pod(
    quota_pods: tuple[Pod, Pod], redis_client: redis.Redis
) -> None:
    a, b = quota_pods
    stored = Keys(PREFIX).client_quotas
    alice = {"user": "alice", "client-id": None}
    results = _alter(
        a.kafka_port,
        [
            (alice, [("producer_byte_rate", 1024.0, False), ("request_percentage", 50.0, False)]),
            ({"client-id": "bad"}, [("no_such_quota", 1.0, False)]),
            ({"client-id": "fraction"}, [("consumer_byte_rate", 1.5, False)]),
            ({"group": "g"}, [("producer_byte_rate", 1.0, False)]),
        ],
    )
    assert results == [
        (0, None),
        (42, "Invalid configuration key no_such_quota"),
        (42, "consumer_byte_rate cannot be a fractional value."),
        (42, "Unhandled client quota entity type: group"),
    ]
    # validate_only: answered, nothing stored
    assert _alter(
        a.kafka_port, [({"user": "bob"}, [("producer_byte_rate", 10.0, False)])],
        validate_only=True,
    ) == [(0, None)]  # fmt: skip
    for version in (0, 1):
        reply = _describe(b.kafka_port, [("user", 2, None)], version=version)
        assert reply.error_code == 0
        assert _entries(reply) == {
            (("client-id", None), ("user", "alice")): {
                "producer_byte_rate": 1024.0,
                "request_percentage": 50.0,
            }
        }
    assert len(redis_client.hgetall(stored)) == 2  # the bad entries stored nothing
    assert _entries(_describe(b.kafka_port, [("user", 0, "alice")], strict=True)) == {}
    bad = _describe(b.kafka_port, [("user", 0, None)])
    assert (bad.error_code, bad.error_message) == (
        42,
        "Request specified MATCH_TYPE_EXACT, but set match string to null.",
    )
    # removed: gone everywhere
    assert _alter(
        b.kafka_port,
        [(alice, [("producer_byte_rate", 0.0, True), ("request_percentage", 0.0, True)])],
    ) == [(0, None)]  # fmt: skip
    assert _entries(_describe(a.kafka_port, [])) == {}
    assert redis_client.hlen(stored) == 0


def _produce_for(
    bootstrap: str, topic: str, client_id: str, seconds: float, throttles: list[int]
) -> float:
    """Produce 1 KiB records as fast as the pod takes them; the bytes per second delivered.
    (Kafka's rate counts at least ten 1 s windows: a new client may send ten seconds' worth
    at once, then little until that first sample ages out; over ten seconds, the quota.)"""
    delivered = [0]

    def done(err: Any, msg: Any) -> None:
        if err is None:
            delivered[0] += len(msg.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    value = b"x" * 1024
    start = time.monotonic()
    while time.monotonic() < start + seconds:
        try:
            producer.produce(topic, value, on_delivery=done)
        except BufferError:
            producer.poll(0.01)
            continue
        producer.poll(0)
    rate = delivered[0] / (time.monotonic() - start)
    producer.purge()
    producer.flush(10)
    return rate


def test_producer_over_its_quota_is_slowed_to_it(quota_pods: tuple[Pod, Pod], topic: str) -> None:
    a, _ = quota_pods
    # one partition: both producers write to the one pod that leads it (quotas are per pod)
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10) is None
    assert _alter(a.kafka_port, [({"client-id": "slow"}, [("producer_byte_rate", QUOTA, False)])])
    slow_throttles: list[int] = []
    fast_throttles: list[int] = []
    rates: dict[str, float] = {}

    def fast() -> None:
        rates["fast"] = _produce_for(a.bootstrap, topic, "fast", 10, fast_throttles)

    other = threading.Thread(target=fast)
    other.start()
    rates["slow"] = _produce_for(a.bootstrap, topic, "slow", 10, slow_throttles)
    other.join()

    assert abs(rates["slow"] - QUOTA) <= 0.2 * QUOTA, rates
    assert rates["fast"] > 2 * QUOTA, rates
    assert slow_throttles and max(slow_throttles) > 0
    assert not any(fast_throttles)
    # the entity's series (its client id; no user part), none for clients without a quota,
    # on the pod that leads the partition (either: both scraped, summed)
    quota_series: dict[tuple[str, str, str], float] = {}
    for pod in quota_pods:
        assert pod.metrics_port is not None
        for (name, labels), value in scrape_metrics(pod.metrics_port).items():
            label = dict(labels)
            if name.startswith("adapter_quota_") and label["quota"] == "producer_byte_rate":
                series = (name, label["user"], label["client_id"])
                quota_series[series] = quota_series.get(series, 0.0) + value
    assert quota_series["adapter_quota_bytes_total", "", "slow"] >= rates["slow"] * 10
    assert quota_series["adapter_quota_throttle_seconds_total", "", "slow"] > 0
    assert {client for _, _, client in quota_series} == {"slow"}, quota_series


def _call_as(raw: RawKafka, client_id: str, api: Api, version: int, body: Any) -> Any:
    """``raw.call`` under another client id."""
    raw.correlation_id += 1
    raw.sock.sendall(protocol.encode_request(api, version, body, raw.correlation_id, client_id))
    reply = raw.receive(api, version)
    assert reply.header.correlation_id == raw.correlation_id
    return reply


def _metadata_throttles(raw: RawKafka, client_id: str, seconds: float, *, until: bool) -> list[int]:
    """Metadata requests one after the other for ``seconds`` (or, ``until``, up to the first
    throttled one): the throttle time of each answer."""
    body = METADATA.request[12](topics=None, allow_auto_topic_creation=False)
    throttles: list[int] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        throttles.append(_call_as(raw, client_id, METADATA, 12, body).throttle_time_ms)
        if until and throttles[-1] > 0:
            break
    return throttles


def test_request_percentage_throttles_its_client_only(quota_pods: tuple[Pod, Pod]) -> None:
    a, _ = quota_pods
    # 0.01 % of one thread: 1 ms of handling per 10 s window, a few Metadata requests
    busy = {"client-id": "busy"}
    assert _alter(a.kafka_port, [(busy, [("request_percentage", 0.01, False)])]) == [(0, None)]
    try:
        with RawKafka(a.kafka_port) as raw:
            first = _metadata_throttles(raw, "busy", 5, until=True)
            assert first[-1] > 0, first  # throttled once the quota reached the pod
            after = _metadata_throttles(raw, "busy", 2, until=False)
            idle = _metadata_throttles(raw, "idle", 2, until=False)
        assert any(after), after
        assert not any(idle)
        # muted up to a window after each answer: far fewer requests than its neighbour
        assert len(after) * 4 < len(idle), (len(after), len(idle))
        # its handling time is a metric of its entity
        assert any(
            name == "adapter_quota_request_seconds_total"
            and ("client_id", "busy") in labels
            and value > 0
            for (name, labels), value in scrape_metrics(a.metrics_port).items()
        )
    finally:
        _alter(a.kafka_port, [(busy, [("request_percentage", 0.0, True)])])


def test_throttled_fetch_is_answered_without_records(
    quota_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = quota_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10) is None
    # one record of 6000 bytes: over 500 B/s on its own (its 10 s window holds 5000 bytes)
    thirsty = {"client-id": "thirsty"}
    assert _alter(a.kafka_port, [(thirsty, [("consumer_byte_rate", 500.0, False)])]) == [(0, None)]
    try:
        with RawKafka(a.kafka_port) as raw:
            offset = produce_values(raw, topic, 0, b"v" * 6000)
            deadline = time.monotonic() + 5
            while True:  # until the quota reached the pod: then the Fetch is throttled
                reply = _call_as(raw, "thirsty", FETCH, 12, fetch_body(topic, 0, offset))
                if reply.throttle_time_ms > 0 or time.monotonic() > deadline:
                    break
            assert reply.throttle_time_ms > 0
            assert reply.error_code == 0 and reply.responses == []
            # another client reads the record meanwhile
            _, records = fetched(_call_as(raw, "other", FETCH, 12, fetch_body(topic, 0, offset)))
            assert [r.value for r in records] == [b"v" * 6000]
            # without the quota, the same Fetch gets it after the mute
            _alter(a.kafka_port, [(thirsty, [("consumer_byte_rate", 0.0, True)])])
            deadline = time.monotonic() + 5
            while True:
                reply = _call_as(raw, "thirsty", FETCH, 12, fetch_body(topic, 0, offset))
                if reply.responses or time.monotonic() > deadline:
                    break
            _, records = fetched(reply)
            assert [r.value for r in records] == [b"v" * 6000]
    finally:
        _alter(a.kafka_port, [(thirsty, [("consumer_byte_rate", 0.0, True)])])


def test_throttled_share_fetch_keeps_its_records(quota_pods: tuple[Pod, Pod], topic: str) -> None:
    """Share consumers' records count against consumer_byte_rate; a throttled ShareFetch
    still carries what it acquired (the records are the member's until acknowledged)."""
    a, _ = quota_pods
    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    assert admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10) is None
    sharer = {"client-id": "sharer"}
    assert _alter(a.kafka_port, [(sharer, [("consumer_byte_rate", 500.0, False)])]) == [(0, None)]
    group, member = f"sq-{topic}", uuid.uuid4().hex[:22]
    client = redis.Redis.from_url(a.redis_url or "")
    client.hset(Keys(PREFIX).group_configs(group), "share.auto.offset.reset", "earliest")
    client.close()
    heartbeat, fetch = SHARE_GROUP_HEARTBEAT.request[1], SHARE_FETCH.request
    try:
        with RawKafka(a.kafka_port) as raw:
            for _ in range(20):
                produce_values(raw, topic, 0, b"s" * 3000)
            topic_id = None
            for _ in range(50):  # the assignment names the topic once its metadata is there
                joined = _call_as(raw, "sharer", SHARE_GROUP_HEARTBEAT, 1, heartbeat(
                    group_id=group, member_id=member, member_epoch=0, rack_id=None,
                    subscribed_topic_names=[topic],
                ))  # fmt: skip
                if joined.assignment and joined.assignment.topic_partitions:
                    topic_id = joined.assignment.topic_partitions[0].topic_id
                    break
                time.sleep(0.1)
            assert topic_id is not None
            wanted = [fetch.FetchTopic(topic_id=topic_id, partitions=[
                fetch.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=[])
            ])]  # fmt: skip
            deadline, epoch = time.monotonic() + 10, 0
            while True:  # one record a request, until the quota reached the pod
                reply = _call_as(raw, "sharer", SHARE_FETCH, 1, fetch[1](
                    group_id=group, member_id=member, share_session_epoch=epoch,
                    max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, max_records=1,
                    batch_size=1, topics=wanted if epoch == 0 else [],
                    forgotten_topics_data=[],
                ))  # fmt: skip
                epoch += 1
                assert reply.error_code == 0, reply
                if reply.throttle_time_ms > 0 or time.monotonic() > deadline:
                    break
            assert reply.throttle_time_ms > 0
            (part,) = reply.responses[0].partitions
            assert part.acquired_records and part.records
    finally:
        _alter(a.kafka_port, [(sharer, [("consumer_byte_rate", 0.0, True)])])
