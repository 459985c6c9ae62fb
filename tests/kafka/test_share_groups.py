"""Share groups (KIP-932) with confluent-kafka's ShareConsumer on two pods sharing one Redis:
records handed out one member at a time, acknowledged (implicitly, or explicitly: accept,
release, reject), read_committed with a transactional producer; and raw requests for what
the client cannot provoke: ShareFetch v2's record_limit mode, RENEW, member epoch fencing,
a leaving member's records released at once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from adapter.kafka.errors import FENCED_MEMBER_EPOCH, NONE, UNKNOWN_MEMBER_ID
from adapter.kafka.share_fetch import RECORD_LIMIT, acquired_ranges, rotated
from adapter.kafka.versions import SHARE_ACKNOWLEDGE, SHARE_FETCH, SHARE_GROUP_HEARTBEAT
from mapping.core.keys import Keys
from tests.kafka.group_helpers import GROUP_PREFIX, POD_ARGS, produce
from tests.support.kafka import RawKafka, partition_records
from tests.support.pods import Pod, start_all
from tests.support.share_groups import earliest, share_consumer

PARTITIONS = 3
PER_PARTITION = 10
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


@pytest.fixture(scope="module")
def share_pods(redis_url: str) -> Iterator[list[Pod]]:
    pods = [Pod(redis_url, *POD_ARGS) for _ in range(2)]
    start_all(pods)
    yield pods
    for pod in pods:
        pod.stop()


def _topic(pods: list[Pod], topic: str) -> str:
    admin = AdminClient({"bootstrap.servers": pods[0].bootstrap})
    futures = admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)
    produce(pods[0].bootstrap, topic, PARTITIONS, PER_PARTITION)
    return topic


def _earliest(pod: Pod, group: str, **more: str) -> None:
    """The group starts at the log's start (``more``: other group configs), as DescribeConfigs
    then shows."""
    earliest(pod, group, **more)
    admin = AdminClient({"bootstrap.servers": pod.bootstrap})
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result(timeout=15)
    assert entries["share.auto.offset.reset"].value == "earliest"
    assert entries["share.delivery.count.limit"].value == "5"


def _poll(consumer: ShareConsumer, timeout: float = 0.5) -> list:
    return [m for m in consumer.poll(timeout) if m.error() is None]


def _values(messages: list) -> list[bytes]:
    return [m.value() for m in messages]


def _expected() -> list[bytes]:
    return sorted(f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION))


def test_one_share_consumer_gets_every_record_once(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = share_consumer(share_pods[0], group)
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            got += _values(_poll(consumer))
            if len(got) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(3):  # nothing more comes: implicitly accepted, never redelivered
            got += _values(_poll(consumer))
    finally:
        consumer.close()
    assert sorted(got) == _expected()


def test_two_share_consumers_on_two_pods_split_the_records(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumers = [share_consumer(pod, group) for pod in share_pods]
    got: list[list[bytes]] = [[], []]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])
        for _ in range(60):
            for i, consumer in enumerate(consumers):
                got[i] += _values(_poll(consumer, 0.3))
            if len(got[0]) + len(got[1]) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(2):
            for i, consumer in enumerate(consumers):
                got[i] += _values(_poll(consumer, 0.3))
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(got[0] + got[1]) == _expected()  # each record to one of them, once
    assert not set(got[0]) & set(got[1])


def _explicit(pod: Pod, group: str) -> ShareConsumer:
    return share_consumer(pod, group, **{"share.acknowledgement.mode": "explicit"})


def test_released_records_come_back_with_a_higher_delivery_count(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = _explicit(share_pods[0], group)
    counts: dict[bytes, list[int]] = {}
    try:
        consumer.subscribe([topic])
        for _ in range(80):
            messages = _poll(consumer)
            for m in messages:
                counts.setdefault(m.value(), []).append(m.delivery_count())
                # each record released on its first delivery, accepted on its second
                consumer.acknowledge(m, RELEASE if len(counts[m.value()]) == 1 else ACCEPT)
            if messages:
                consumer.commit_sync(10)
            if len(counts) == PARTITIONS * PER_PARTITION and all(
                len(c) == 2 for c in counts.values()
            ):
                break
    finally:
        consumer.close()
    assert sorted(counts) == _expected()
    assert {tuple(c) for c in counts.values()} == {(1, 2)}


def test_rejected_records_are_never_delivered_again(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    consumer = _explicit(share_pods[1], group)
    seen: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            messages = _poll(consumer)
            for m in messages:
                seen.append(m.value())
                consumer.acknowledge(m, REJECT)
            if messages:
                consumer.commit_sync(10)
            if len(seen) >= PARTITIONS * PER_PARTITION:
                break
        for _ in range(3):
            seen += _values(_poll(consumer))
    finally:
        consumer.close()
    assert sorted(seen) == _expected()  # each once: rejected, archived
    client = redis.Redis.from_url(redis_url)
    keys = Keys(GROUP_PREFIX)
    for p in range(PARTITIONS):  # nothing of the group is in flight
        pending = client.xpending(keys.partition(topic, p).log, keys.share_consumer_group(group))
        assert pending["pending"] == 0
    client.close()


def test_acquired_ranges_never_span_offsets_between_records() -> None:
    pairs = [(10, 1), (11, 1), (12, 2), (20, 2), (21, 2)]
    assert acquired_ranges(pairs) == [(10, 11, 1), (12, 12, 2), (20, 21, 2)]


def test_rotated_starts_each_request_at_another_partition() -> None:
    partitions = [(uuid.UUID(int=1), p) for p in range(3)]
    assert rotated(partitions, 4) == partitions[1:] + partitions[:1]
    assert rotated([], 3) == []


# Raw requests: what the client cannot provoke.


def _join(raw: RawKafka, group: str, member: str, topic: str) -> tuple[int, uuid.UUID]:
    """(member epoch, topic id) of ``member`` joining ``group`` subscribed to ``topic``."""
    request = SHARE_GROUP_HEARTBEAT.request[1]
    for _ in range(50):  # the assignment names the topic once its metadata is there
        reply = raw.call(SHARE_GROUP_HEARTBEAT, 1, request(
            group_id=group, member_id=member, member_epoch=0, rack_id=None,
            subscribed_topic_names=[topic],
        ))  # fmt: skip
        assert reply.error_code == NONE
        if reply.assignment and reply.assignment.topic_partitions:
            return reply.member_epoch, reply.assignment.topic_partitions[0].topic_id
        time.sleep(0.1)
    raise AssertionError("no assignment")


def _heartbeat(raw: RawKafka, group: str, member: str, epoch: int) -> Any:
    request = SHARE_GROUP_HEARTBEAT.request[1]
    return raw.call(SHARE_GROUP_HEARTBEAT, 1, request(
        group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
        subscribed_topic_names=None,
    ))  # fmt: skip


Acks = dict[int, list[tuple[int, int, list[int]]]]  # partition -> (first, last, types)


def _share_fetch(
    raw: RawKafka, group: str, member: str, session_epoch: int, topic_id: uuid.UUID,
    partitions: list[int], *, max_records: int = 500, mode: int = 0, acks: Acks | None = None,
    max_wait_ms: int = 500, renew: bool = False, expected: int = NONE,
    max_bytes: int = 1 << 20,
) -> Any:  # fmt: skip
    request = SHARE_FETCH.request
    part = request.FetchTopic.FetchPartition
    batch = part.AcknowledgementBatch
    wanted = [
        part(partition_index=p, acknowledgement_batches=[
            batch(first_offset=f, last_offset=last, acknowledge_types=types)
            for f, last, types in (acks or {}).get(p, [])
        ])
        for p in partitions
    ]  # fmt: skip
    body = request[2](
        group_id=group, member_id=member, share_session_epoch=session_epoch,
        max_wait_ms=max_wait_ms, min_bytes=0 if renew else 1, max_bytes=0 if renew else max_bytes,
        max_records=max_records, batch_size=max_records, share_acquire_mode=mode,
        is_renew_ack=renew,
        topics=[request.FetchTopic(topic_id=topic_id, partitions=wanted)],
        forgotten_topics_data=[],
    )  # fmt: skip
    reply = raw.call(SHARE_FETCH, 2, body)
    assert reply.error_code == expected, reply
    return reply


def _acknowledge(
    raw: RawKafka, group: str, member: str, session_epoch: int, topic_id: uuid.UUID,
    acks: Acks, *, renew: bool = False,
) -> Any:  # fmt: skip
    request = SHARE_ACKNOWLEDGE.request
    topic = request.AcknowledgeTopic
    part = topic.AcknowledgePartition
    batch = part.AcknowledgementBatch
    body = request[2](
        group_id=group, member_id=member, share_session_epoch=session_epoch,
        is_renew_ack=renew,
        topics=[topic(topic_id=topic_id, partitions=[
            part(partition_index=p, acknowledgement_batches=[
                batch(first_offset=f, last_offset=last, acknowledge_types=types)
                for f, last, types in batches
            ])
            for p, batches in acks.items()
        ])],
    )  # fmt: skip
    reply = raw.call(SHARE_ACKNOWLEDGE, 2, body)
    assert reply.error_code == NONE, reply
    return reply


def _acquired(reply: Any) -> dict[int, list[tuple[int, int, int]]]:
    """partition -> (first offset, last offset, delivery count) of a ShareFetch answer."""
    return {
        part.partition_index: [
            (a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records
        ]
        for topic in reply.responses
        for part in topic.partitions
        if part.acquired_records
    }


def _count(acquired: dict[int, list[tuple[int, int, int]]]) -> int:
    return sum(last - first + 1 for ranges in acquired.values() for first, last, _ in ranges)


def _accept_all(acquired: dict[int, list[tuple[int, int, int]]]) -> Acks:
    return {p: [(f, last, [ACCEPT]) for f, last, _ in ranges] for p, ranges in acquired.items()}


def test_record_limit_mode_never_hands_out_more_than_max_records(
    share_pods: list[Pod], topic: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw:
        _, topic_id = _join(raw, group, member, topic)
        partitions = list(range(PARTITIONS))
        total, epoch, acks = 0, 0, {}
        values: list[bytes] = []
        for _ in range(100):
            reply = _share_fetch(
                raw, group, member, epoch, topic_id, partitions, max_records=4,
                mode=RECORD_LIMIT, acks=acks,
            )  # fmt: skip
            epoch += 1
            acquired = _acquired(reply)
            assert _count(acquired) <= 4  # over every partition of the request
            values += [
                r.value for t in reply.responses for part in t.partitions
                for r in partition_records(part)
            ]  # fmt: skip
            total += _count(acquired)
            acks = _accept_all(acquired)
            if total >= PARTITIONS * PER_PARTITION:
                break
    assert sorted(values) == _expected()


def test_max_bytes_is_a_soft_bound_over_the_request(share_pods: list[Pod], topic: str) -> None:
    """Kafka's MaxBytes: the first record whatever its size, then only what fits, over all
    the request's partitions; MaxBytes 0 acquires nothing."""
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw:
        _, topic_id = _join(raw, group, member, topic)
        partitions = list(range(PARTITIONS))
        nothing = _share_fetch(raw, group, member, 0, topic_id, partitions, max_bytes=0,
                               max_wait_ms=0)  # fmt: skip
        assert _count(_acquired(nothing)) == 0
        for epoch in (1, 2):
            one = _share_fetch(raw, group, member, epoch, topic_id, partitions, max_bytes=1)
            assert _count(_acquired(one)) == 1
        everything = _share_fetch(raw, group, member, 3, topic_id, partitions)
        assert _count(_acquired(everything)) == PARTITIONS * PER_PARTITION - 2


def test_a_partition_nobody_wrote_starts_at_the_first_fetch(
    share_pods: list[Pod], topic: str
) -> None:
    """A member fetching a partition that has no record yet starts its share-partition
    there (latest, the default, is the empty log's start): the record written next is
    delivered, as Kafka delivers it from log end offset 0."""
    group = f"s-{topic}"
    admin = AdminClient({"bootstrap.servers": share_pods[0].bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(15)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw:
        _, topic_id = _join(raw, group, member, topic)
        assert _acquired(_share_fetch(raw, group, member, 0, topic_id, [0], max_wait_ms=0)) == {}
        produce(share_pods[1].bootstrap, topic, 1, 1)
        got = _acquired(_share_fetch(raw, group, member, 1, topic_id, [0], max_wait_ms=3000))
        assert _count(got) == 1


def _lock_ms(redis_url: str, group: str, lock_ms: int) -> None:
    """A lock shorter than the group configs' bounds allow (15 s at least), written where
    the pods read the group's configs, so that the test takes seconds."""
    client = redis.Redis.from_url(redis_url)
    client.hset(Keys(GROUP_PREFIX).group_configs(group), "share.record.lock.duration.ms", lock_ms)
    client.close()


def test_renew_keeps_a_record_past_its_lock(
    share_pods: list[Pod], topic: str, redis_url: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _lock_ms(redis_url, group, 3000)
    _topic(share_pods, topic)
    holder, other = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw, RawKafka(share_pods[1].kafka_port) as raw2:
        _, topic_id = _join(raw, group, holder, topic)
        _join(raw2, group, other, topic)
        time.sleep(1.1)  # the pods' cached group configs (1 s) read the short lock
        reply = _share_fetch(raw, group, holder, 0, topic_id, [0], max_records=1)
        assert reply.acquisition_lock_timeout_ms == 3000
        (first, last, count), *_ = _acquired(reply)[0]
        assert (first, last, count) == (first, first, 1)
        epoch, other_epoch = 1, 0
        started = time.monotonic()
        while time.monotonic() - started < 6:  # twice the lock
            renewal = {0: [(first, first, [RENEW])]}
            answer = _acknowledge(raw, group, holder, epoch, topic_id, renewal, renew=True)
            epoch += 1
            assert answer.acquisition_lock_timeout_ms == 3000
            assert answer.responses[0].partitions[0].error_code == NONE
            taken = _acquired(_share_fetch(raw2, group, other, other_epoch, topic_id, [0],
                                           max_wait_ms=0))  # fmt: skip
            other_epoch += 1
            assert first not in {f for f, _, _ in taken.get(0, [])}  # still the holder's
            other_acks = _accept_all(taken)
            if other_acks:
                _acknowledge(raw2, group, other, other_epoch, topic_id, other_acks)
                other_epoch += 1
            time.sleep(0.5)
        # a renewal is no delivery: released, it comes back with its delivery count 2
        _acknowledge(raw, group, holder, epoch, topic_id, {0: [(first, first, [RELEASE])]})
        for _ in range(50):
            got = _acquired(_share_fetch(raw2, group, other, other_epoch, topic_id, [0]))
            other_epoch += 1
            mine = [r for r in got.get(0, []) if r[0] == first]
            if mine:
                assert mine == [(first, first, 2)]
                break
            if got:
                _acknowledge(raw2, group, other, other_epoch, topic_id, _accept_all(got))
                other_epoch += 1
        else:
            raise AssertionError("the released record never came back")


def test_renew_needs_a_request_that_says_so(share_pods: list[Pod], topic: str) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw:
        _, topic_id = _join(raw, group, member, topic)
        (first, _, _), *_ = _acquired(_share_fetch(raw, group, member, 0, topic_id, [0]))[0]
        answer = _acknowledge(raw, group, member, 1, topic_id, {0: [(first, first, [RENEW])]})
        assert answer.responses[0].partitions[0].error_code == 42  # INVALID_REQUEST


def test_a_renewing_share_fetch_only_acknowledges(share_pods: list[Pod], topic: str) -> None:
    """KIP-1222: a v2 ShareFetch with IsRenewAck renews and fetches nothing; its MaxBytes,
    MinBytes, MaxRecords and MaxWaitMs must be 0 (INVALID_REQUEST otherwise)."""
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw:
        _, topic_id = _join(raw, group, member, topic)
        (first, _, _), *_ = _acquired(_share_fetch(raw, group, member, 0, topic_id, [0]))[0]
        renewal = {0: [(first, first, [RENEW])]}
        _share_fetch(
            raw, group, member, 1, topic_id, [0], acks=renewal, renew=True, max_records=500,
            max_wait_ms=0, expected=42,
        )  # fmt: skip
        reply = _share_fetch(  # (the refused request took no session epoch)
            raw, group, member, 1, topic_id, [0], acks=renewal, renew=True, max_records=0,
            max_wait_ms=0,
        )  # fmt: skip
        (part,) = reply.responses[0].partitions
        assert part.acknowledge_error_code == NONE
        assert not part.acquired_records and not partition_records(part)


def test_a_stale_member_epoch_is_fenced(share_pods: list[Pod], topic: str) -> None:
    group = f"s-{topic}"
    _topic(share_pods, topic)
    member = uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw, RawKafka(share_pods[1].kafka_port) as raw2:
        epoch, _ = _join(raw, group, member, topic)
        _join(raw2, group, uuid.uuid4().hex[:22], topic)  # the group epoch moves on
        assert _heartbeat(raw2, group, member, epoch + 1).error_code == FENCED_MEMBER_EPOCH
        renewed = _heartbeat(raw2, group, member, epoch)  # its own epoch: answered the new one
        assert (renewed.error_code, renewed.member_epoch) == (NONE, epoch + 1)
        _join(raw2, group, uuid.uuid4().hex[:22], topic)
        assert _heartbeat(raw, group, member, epoch + 1).member_epoch == epoch + 2
        # behind the member's epoch and its previous one (0 would be a rejoin)
        assert _heartbeat(raw, group, member, epoch).error_code == FENCED_MEMBER_EPOCH
        assert _heartbeat(raw, group, "nobody", epoch).error_code == UNKNOWN_MEMBER_ID


def test_a_member_that_leaves_releases_its_records_at_once(
    share_pods: list[Pod], topic: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    leaver, stayer = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw, RawKafka(share_pods[1].kafka_port) as raw2:
        epoch, topic_id = _join(raw, group, leaver, topic)
        held = _acquired(_share_fetch(raw, group, leaver, 0, topic_id, [0]))[0]
        assert _count({0: held}) == PER_PARTITION  # the lock: 30 s
        _join(raw2, group, stayer, topic)
        assert _acquired(_share_fetch(raw2, group, stayer, 0, topic_id, [0], max_wait_ms=0)) == {}
        assert _heartbeat(raw, group, leaver, -1).error_code == NONE
        got: list[tuple[int, int, int]] = []
        for epoch in range(1, 40):  # within the leave's grace (2 s), not after the lock (30 s)
            got = _acquired(_share_fetch(raw2, group, stayer, epoch, topic_id, [0])).get(0, [])
            if got:
                break
        # every record, with the one delivery it had counted
        assert [(f, c) for f, _, c in got] == [(f, 2) for f, _, _ in held]
        assert _count({0: got}) == PER_PARTITION


def test_acknowledgements_sent_with_a_leave_still_apply(share_pods: list[Pod], topic: str) -> None:
    """A client closing sends its leave and its last acknowledgements together (librdkafka
    does, to different pods): the acknowledgements find the records still the member's."""
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    leaver, stayer = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw, RawKafka(share_pods[1].kafka_port) as raw2:
        _, topic_id = _join(raw, group, leaver, topic)
        held = _acquired(_share_fetch(raw, group, leaver, 0, topic_id, [0]))
        assert _count(held) == PER_PARTITION
        with RawKafka(share_pods[1].kafka_port) as coordinator:
            assert _heartbeat(coordinator, group, leaver, -1).error_code == NONE
        answer = _acknowledge(raw, group, leaver, 1, topic_id, _accept_all(held))
        assert answer.responses[0].partitions[0].error_code == NONE
        _join(raw2, group, stayer, topic)
        time.sleep(2.5)  # past the leave's grace: nothing is left to release
        again = _acquired(_share_fetch(raw2, group, stayer, 0, topic_id, [0], max_wait_ms=0))
        assert again == {}


def test_closing_a_share_session_releases_its_records(share_pods: list[Pod], topic: str) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group)
    _topic(share_pods, topic)
    first, second = uuid.uuid4().hex[:22], uuid.uuid4().hex[:22]
    with RawKafka(share_pods[0].kafka_port) as raw, RawKafka(share_pods[1].kafka_port) as raw2:
        _, topic_id = _join(raw, group, first, topic)
        _join(raw2, group, second, topic)
        held = _acquired(_share_fetch(raw, group, first, 0, topic_id, [1]))[1]
        _share_fetch(raw, group, first, -1, topic_id, [])  # the session closes
        got = _acquired(_share_fetch(raw2, group, second, 0, topic_id, [1]))[1]
        assert [(f, c) for f, _, c in got] == [(f, 2) for f, _, _ in held]


def test_read_committed_skips_aborted_records_and_waits_for_open_ones(
    share_pods: list[Pod], topic: str
) -> None:
    group = f"s-{topic}"
    _earliest(share_pods[0], group, share_isolation_level="read_committed")
    admin = AdminClient({"bootstrap.servers": share_pods[0].bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(timeout=15)
    producer = Producer({
        "bootstrap.servers": share_pods[0].bootstrap, "transactional.id": f"tx-{topic}",
        "socket.timeout.ms": 5000,
    })  # fmt: skip
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"open-then-aborted-{i}".encode(), partition=0)
    producer.flush(15)
    consumer = share_consumer(share_pods[1], group)
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(6):  # the transaction is open: its records wait
            got += _values(_poll(consumer))
        assert got == []
        producer.abort_transaction(15)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"committed-{i}".encode(), partition=0)
        producer.commit_transaction(15)
        for _ in range(60):
            got += _values(_poll(consumer))
            if len(got) >= 3:
                break
        for _ in range(3):
            got += _values(_poll(consumer))
    finally:
        consumer.close()
    assert sorted(got) == [f"committed-{i}".encode() for i in range(3)]
