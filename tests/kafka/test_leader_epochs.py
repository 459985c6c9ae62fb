"""Leader epochs (KIP-320, mapping/replication/leader_epochs.py): the Redis primary a pod reached
is an
epoch, reported by Metadata, ListOffsets and every fetched batch, and OffsetForLeaderEpoch
answers where each epoch ended, as Kafka does. A new primary (a failover) is simulated here
by registering another replid, as a pod's connection to a promoted replica would; the real
failover is in tests/deploy/test_truncation.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis

from adapter.kafka import errors
from adapter.kafka.versions import FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH
from mapping.connection import scripts
from mapping.core.keys import Keys
from mapping.replication.leader_epochs import EPOCH_BASE_S, kafka_leader_epoch_call
from tests.support.kafka import RawKafka, fetch_body, fetched, produce_values
from tests.support.pods import RF1, Pod

Request = OFFSET_FOR_LEADER_EPOCH.request
Topic = Request.OffsetForLeaderTopic
Partition = Topic.OffsetForLeaderPartition


def _metadata_epoch(raw: RawKafka, topic: str) -> int:
    asked = METADATA.request.MetadataRequestTopic(name=topic)
    body = METADATA.request[12](topics=[asked], allow_auto_topic_creation=True)
    (answer,) = raw.call(METADATA, 12, body).topics
    return answer.partitions[0].leader_epoch


def _end_of(raw: RawKafka, topic: str, epoch: int, current: int = -1, version: int = 4) -> Any:
    """OffsetForLeaderEpoch's answer for partition 0: (error, leader epoch, end offset)."""
    wanted = Partition(partition=0, current_leader_epoch=current, leader_epoch=epoch)
    body = Request[version](replica_id=-1, topics=[Topic(topic=topic, partitions=[wanted])])
    (answer,) = raw.call(OFFSET_FOR_LEADER_EPOCH, version, body).topics[0].partitions
    return answer.error_code, answer.leader_epoch, answer.end_offset


def _list_offsets_epoch(raw: RawKafka, topic: str, timestamp: int) -> tuple[int, int]:
    request = LIST_OFFSETS.request
    spec = request.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp
    )
    body = request[5](
        replica_id=-1,
        isolation_level=0,
        topics=[request.ListOffsetsTopic(name=topic, partitions=[spec])],
    )
    found = raw.call(LIST_OFFSETS, 5, body).topics[0].partitions[0]
    return found.offset, found.leader_epoch


def _batch_epochs(raw: RawKafka, topic: str) -> list[int]:
    """The PartitionLeaderEpoch of each fetched batch (bytes 12-15 of its header)."""
    part, _ = fetched(raw.call(FETCH, 12, fetch_body(topic, 0, 0)))
    data, epochs = bytes(part.records or b""), []
    while len(data) >= 17:
        length = int.from_bytes(data[8:12], "big")
        epochs.append(int.from_bytes(data[12:16], "big", signed=True))
        data = data[12 + length :]
    return epochs


def test_epochs_are_reported_and_offset_for_leader_epoch_answers_their_ends(
    redis_url: str, start_pod: Any, topic: str
) -> None:
    prefix = f"epochs-{uuid.uuid4().hex[:8]}"
    pod: Pod = start_pod(redis_url, *RF1, "--key-prefix", prefix)
    registry = Keys(prefix).kafka_leader_epochs
    with RawKafka(pod.kafka_port) as raw, redis.Redis.from_url(redis_url) as admin:
        first = _metadata_epoch(raw, topic)  # (creates the topic)
        # the pod's connections registered their primary: seconds since 2024 at least
        assert first >= int(time.time()) - EPOCH_BASE_S - 3600
        a = produce_values(raw, topic, 0, b"a")
        b = produce_values(raw, topic, 0, b"b")
        assert set(_batch_epochs(raw, topic)) == {first}
        assert _list_offsets_epoch(raw, topic, -1) == (b + 1, first)

        # the current epoch ends at the high watermark, in every version
        assert _end_of(raw, topic, first, current=first) == (errors.NONE, first, b + 1)
        for version in (0, 1, 2, 3):
            code, _, end = _end_of(raw, topic, first, version=version)
            assert (code, end) == (errors.NONE, b + 1)
        # a client with a newer epoch than the pods know, or an older one: Kafka's errors
        assert _end_of(raw, topic, first, current=first + 1)[0] == errors.UNKNOWN_LEADER_EPOCH
        assert _end_of(raw, topic, first, current=first - 1)[0] == errors.FENCED_LEADER_EPOCH
        assert _end_of(raw, topic, first + 1) == (errors.NONE, -1, -1)  # no such epoch
        # before any registration: epoch 0, the same log as the first registered epoch
        assert _end_of(raw, topic, 0) == (errors.NONE, 0, b + 1)

        # another primary (a promoted replica): the next epoch, from its registration on
        time.sleep(0.005)  # (b's millisecond is over: b stays in the first epoch)
        admin.execute_command(*scripts.as_eval(kafka_leader_epoch_call(registry, "f" * 40)))
        c = produce_values(raw, topic, 0, b"c")
        assert _end_of(raw, topic, 2**31 - 1) == (errors.NONE, -1, -1)
        code, answered, end = _end_of(raw, topic, first)
        assert (code, answered, end) == (errors.NONE, first, b + 1)  # where c's epoch began
        assert _end_of(raw, topic, 0) == (errors.NONE, 0, b + 1)
        second = _metadata_epoch(raw, topic)
        assert second > first
        assert _end_of(raw, topic, second, current=second) == (errors.NONE, second, c + 1)
        assert _end_of(raw, topic, first, current=first)[0] == errors.FENCED_LEADER_EPOCH
        # a batch carries its last record's epoch: a position after it is in that epoch
        assert _batch_epochs(raw, topic)[-1] == second
        # a Fetch with the epoch of its metadata from before: fenced, as Kafka does
        body = fetch_body(topic, 0, 0)
        body.topics[0].partitions[0].current_leader_epoch = first
        part, records = fetched(raw.call(FETCH, 12, body))
        assert (part.error_code, records) == (errors.FENCED_LEADER_EPOCH, [])
        body.topics[0].partitions[0].current_leader_epoch = second
        part, records = fetched(raw.call(FETCH, 12, body))
        assert (part.error_code, [r.value for r in records]) == (errors.NONE, [b"a", b"b", b"c"])
        assert _list_offsets_epoch(raw, topic, a >> 10) == (a, first)
        assert _list_offsets_epoch(raw, topic, -1) == (c + 1, second)


def test_a_registration_with_its_own_start_keeps_the_earliest(redis_client: redis.Redis) -> None:
    """A Cluster node without the registry is registered with the start its own clock gave
    (ARGV[3]); when several pods register it, the earliest start stays, so every record the
    node appended after any pod's clock read is in the new epoch."""
    key = f"t-{uuid.uuid4().hex[:8]}:kafka:{{leader_epochs}}"
    first = scripts.call_sync(redis_client, kafka_leader_epoch_call(key, "a" * 40, 5_000_000))
    later = scripts.call_sync(redis_client, kafka_leader_epoch_call(key, "a" * 40, 6_000_000))
    assert later == first  # a later start changes nothing
    earlier = scripts.call_sync(redis_client, kafka_leader_epoch_call(key, "a" * 40, 4_000_000))
    epoch, start, replid = earlier[0].decode().split()
    assert (int(start), replid, len(earlier)) == (4_000_000, "a" * 40, 1)
    assert int(epoch) == int(first[0].decode().split()[0])  # the same epoch, moved earlier
    other = scripts.call_sync(redis_client, kafka_leader_epoch_call(key, "b" * 40, 7_000_000))
    assert int(other[1].decode().split()[0]) > int(epoch)  # a new node: the next epoch
