"""Kafka 3.9's old versions over the wire with the raw client: Produce v0-2 with magic 0/1
MessageSets, Fetch v0-3 down-converted, ListOffsets v0, OffsetCommit/OffsetFetch v0-1,
CreateTopics/DeleteTopics/DescribeConfigs v0, Metadata, FindCoordinator, InitProducerId
v0. (Versions outside the served range: test_errors.py and test_core.py; every version of
the group APIs: test_group_versions.py.)"""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest

from adapter.kafka import errors
from adapter.kafka.versions import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    PRODUCE,
)
from tests.support.kafka import (
    RawKafka,
    Record,
    batch,
    encode_batch,
    encode_message_set,
    fetch_body,
    fetch_offsets,
    fetched,
    partition_reply,
    produce_body,
)
from tests.support.pods import Pod

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
STAMP = 1_700_000_000_000  # what the producer sets (magic 1 keeps it, magic 0 has none)
RECORDS = [Record(b"k%d" % i, b"value %d" % i, STAMP + i, []) for i in range(3)]
TOPIC_CONFIG = 2  # DescribeConfigs' resource type


def _create(raw: RawKafka, topic: str, **configs: str) -> None:
    """CreateTopics v0 (kafka-go's): one partition, one replica, these configs."""
    request = CREATE_TOPICS.request
    creatable = request.CreatableTopic
    body = request[0](
        topics=[creatable(
            name=topic, num_partitions=1, replication_factor=1, assignments=[],
            configs=[creatable.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )],
        timeout_ms=5000,
    )  # fmt: skip
    (created,) = raw.call(CREATE_TOPICS, 0, body).topics
    assert (created.name, created.error_code) == (topic, errors.NONE)


def _produce(raw: RawKafka, topic: str, data: bytes, version: int) -> Any:
    body = produce_body(topic, 0, data, version=version)
    return partition_reply(raw.call(PRODUCE, version, body))


def _fetch(raw: RawKafka, topic: str, version: int, offset: int = 0) -> tuple[Any, list, int]:
    """(partition answer, records, magic of the first batch) of a Fetch in ``version``."""
    part, records = fetched(raw.call(FETCH, version, fetch_body(topic, 0, offset, version=version)))
    data = bytes(part.records or b"")
    return part, records, data[16] if data else -1


@pytest.mark.parametrize(
    ("version", "magic", "codec"),
    [(0, 0, 0), (1, 0, GZIP), (1, 0, SNAPPY), (2, 1, 0), (2, 1, GZIP), (2, 1, SNAPPY),
     (2, 1, LZ4)],
)  # fmt: skip
def test_old_producers_records_are_read_by_every_fetch_version(
    kafka_pods: tuple[Pod, Pod], topic: str, version: int, magic: int, codec: int
) -> None:
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        sent = encode_message_set(RECORDS, magic=magic, compression=codec)
        before = time.time() * 1000
        answer = _produce(raw, topic, sent, version)
        assert answer.error_code == errors.NONE
    with RawKafka(b.kafka_port) as raw:
        seen = {}
        for fetch_version in (0, 1, 2, 3, 4, 12):
            part, records, format_magic = _fetch(raw, topic, fetch_version)
            assert part.error_code == errors.NONE
            assert part.high_watermark == records[-1].offset + 1
            assert format_magic == (0 if fetch_version < 2 else 1 if fetch_version < 4 else 2)
            assert [(r.key, r.value) for r in records] == [(r.key, r.value) for r in RECORDS]
            seen[fetch_version] = records
    offsets = [r.offset for r in seen[12]]
    assert offsets[0] == answer.base_offset
    assert all([r.offset for r in records] == offsets for records in seen.values())
    if magic == 1:  # the producer's CreateTime, kept
        assert [r.timestamp for r in seen[12]] == [r.timestamp for r in RECORDS]
        assert [r.timestamp for r in seen[2]] == [r.timestamp for r in RECORDS]
    else:  # no timestamp in magic 0: readers see the append time
        assert all(abs(r.timestamp - before) < 60_000 for r in seen[12])
        assert {r.timestamp for r in seen[0]} == {None}


def test_records_with_headers_go_to_old_fetches_without_them(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        data = encode_message_set([Record(b"k", b"v", STAMP, [])], magic=1)
        headed = encode_batch([Record(b"h", b"with header", STAMP, [("name", b"x")])])
        assert _produce(raw, topic, headed, 9).error_code == errors.NONE
        assert _produce(raw, topic, data, 2).error_code == errors.NONE
        _, records, magic = _fetch(raw, topic, 3)
        assert magic == 1
        assert [(r.key, r.value, list(r.headers)) for r in records] == [
            (b"h", b"with header", []), (b"k", b"v", [])
        ]  # fmt: skip
        _, records, _ = _fetch(raw, topic, 12)
        assert list(records[0].headers) == [("name", b"x")]


def _sealed(data: bytearray) -> bytes:
    """A message whose CRC was recomputed after a change (so it passes the CRC check)."""
    from binascii import crc32

    struct.pack_into(">I", data, 12, crc32(data[16:]))
    return bytes(data)


def test_bad_message_sets_are_answered_and_the_connection_goes_on(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    a, _ = kafka_pods
    good = encode_message_set(RECORDS, magic=1)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    zstd_wrapper = bytearray(encode_message_set(RECORDS[:1], magic=1, compression=GZIP))
    zstd_wrapper[17] = ZSTD
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        cases = [
            (bytes(bad_crc), 2, errors.CORRUPT_MESSAGE),
            (good[:-3], 2, errors.CORRUPT_MESSAGE),
            (encode_message_set(RECORDS[:1], magic=0) + good, 2, errors.INVALID_RECORD),
            (encode_message_set(RECORDS, magic=1, compression=GZIP) * 2, 1, errors.INVALID_RECORD),
            (_sealed(zstd_wrapper), 2, errors.INVALID_RECORD),
            (b"", 0, errors.INVALID_RECORD),  # no messages
            (good, 3, errors.UNSUPPORTED_FOR_MESSAGE_FORMAT),  # v3+: magic 2 only
        ]  # fmt: skip
        for data, version, code in cases:
            assert _produce(raw, topic, data, version).error_code == code, (version, code)
        assert _produce(raw, topic, good, 2).error_code == errors.NONE
        assert _produce(raw, topic, batch([b"magic 2 in v2"]), 2).error_code == errors.NONE
        _, records, _ = _fetch(raw, topic, 2)
        assert [r.value for r in records] == [r.value for r in RECORDS] + [b"magic 2 in v2"]


def test_topics_old_fetches_cannot_read(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """A zstd topic answers Fetch v0-9 UNSUPPORTED_COMPRESSION_TYPE; one with
    message.downconversion.enable=false answers v0-3 UNSUPPORTED_VERSION (Kafka 3.9's)."""
    a, _ = kafka_pods
    zstd, closed = f"{topic}-zstd", f"{topic}-closed"
    with RawKafka(a.kafka_port) as raw:
        _create(raw, zstd, **{"compression.type": "zstd"})
        _create(raw, closed, **{"message.downconversion.enable": "false"})
        for name in (zstd, closed):
            assert _produce(raw, name, batch([b"v"]), 9).error_code == errors.NONE
        for version, code in (
            (2, errors.UNSUPPORTED_COMPRESSION_TYPE),
            (9, errors.UNSUPPORTED_COMPRESSION_TYPE),
            (10, errors.NONE),
        ):
            part, records, _ = _fetch(raw, zstd, version)
            assert part.error_code == code, version
            assert len(records) == (1 if code == errors.NONE else 0)
        for version, code in ((1, errors.UNSUPPORTED_VERSION), (3, errors.UNSUPPORTED_VERSION),
                              (4, errors.NONE)):  # fmt: skip
            part, records, _ = _fetch(raw, closed, version)
            assert (part.error_code, len(records)) == (code, 1 if code == errors.NONE else 0)


def _list_offsets_v0(raw: RawKafka, topic: str, timestamp: int, max_num: int) -> Any:
    request = LIST_OFFSETS.request
    partition = request.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, timestamp=timestamp, max_num_offsets=max_num
    )
    body = request[0](replica_id=-1, topics=[request.ListOffsetsTopic(
        name=topic, partitions=[partition]
    )])  # fmt: skip
    return raw.call(LIST_OFFSETS, 0, body).topics[0].partitions[0]


def test_list_offsets_v0_answers_offset_lists(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """Burrow and Sarama ask ListOffsets v0 for latest (-1) or earliest (-2), one offset."""
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        empty = _list_offsets_v0(raw, topic, -1, 1)
        assert (empty.error_code, list(empty.old_style_offsets)) == (errors.NONE, [0])
        first = _produce(raw, topic, batch([b"a", b"b"]), 9).base_offset
        end = _fetch(raw, topic, 12)[0].high_watermark
        assert list(_list_offsets_v0(raw, topic, -1, 1).old_style_offsets) == [end]
        assert list(_list_offsets_v0(raw, topic, -2, 1).old_style_offsets) == [first]
        assert list(_list_offsets_v0(raw, topic, -1, 5).old_style_offsets) == [end, first]
        assert list(_list_offsets_v0(raw, topic, 0, 5).old_style_offsets) == []  # before it all
        unknown = _list_offsets_v0(raw, f"{topic}-none", -1, 1)
        assert unknown.error_code == errors.UNKNOWN_TOPIC_OR_PARTITION


def _commit(raw: RawKafka, version: int, group: str, topic: str, offset: int) -> int:
    request = OFFSET_COMMIT.request[version]
    topic_type = request.OffsetCommitRequestTopic
    partition = topic_type.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, commit_timestamp=-1,
        committed_metadata="old",
    )  # fmt: skip
    body = request(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                   topics=[topic_type(name=topic, partitions=[partition])])  # fmt: skip
    return raw.call(OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


def test_offset_commit_and_fetch_v0_v1_share_the_store(
    kafka_pods: tuple[Pod, Pod], topic: str
) -> None:
    """v0 stored offsets in ZooKeeper in old Kafka: here it is a commit like any other; v1's
    commit timestamp is accepted (offsets expire by the pod's retention)."""
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic)
        assert _commit(raw, 0, "old-group-0", topic, 42) == errors.NONE
        assert _commit(raw, 1, "old-group-1", topic, 43) == errors.NONE
    for group, offset in (("old-group-0", 42), ("old-group-1", 43)):
        for version in (0, 1, 9):
            (found,) = fetch_offsets(b, group, topic, [0], version)
            assert (found.committed_offset, found.metadata, found.error_code) == (
                offset, "old", errors.NONE
            )  # fmt: skip


def test_admin_v0(kafka_pods: tuple[Pod, Pod], topic: str) -> None:
    """CreateTopics v0 (above), DescribeConfigs v0 (is_default for what is not set),
    DeleteTopics v0, Metadata v0."""
    a, _ = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        _create(raw, topic, **{"retention.ms": "60000"})
        (shown,) = raw.call(METADATA, 0, METADATA.request[0](
            topics=[METADATA.request.MetadataRequestTopic(name=topic)]
        )).topics  # fmt: skip
        assert (shown.name, len(shown.partitions)) == (topic, 1)
        request = DESCRIBE_CONFIGS.request
        body = request[0](resources=[request.DescribeConfigsResource(
            resource_type=TOPIC_CONFIG, resource_name=topic,
            configuration_keys=["retention.ms", "cleanup.policy"],
        )])  # fmt: skip
        (result,) = raw.call(DESCRIBE_CONFIGS, 0, body).results
        assert result.error_code == errors.NONE
        assert {(c.name, c.value, c.is_default) for c in result.configs} == {
            ("retention.ms", "60000", False), ("cleanup.policy", "delete", True)
        }  # fmt: skip
        deleted = raw.call(DELETE_TOPICS, 0, DELETE_TOPICS.request[0](
            topic_names=[topic], timeout_ms=5000
        )).responses  # fmt: skip
        assert [(d.name, d.error_code) for d in deleted] == [(topic, errors.NONE)]


def test_the_lowest_versions_of_the_other_apis(kafka_pods: tuple[Pod, Pod]) -> None:
    a, b = kafka_pods
    with RawKafka(a.kafka_port) as raw:
        offered = raw.call(API_VERSIONS, 0, API_VERSIONS.request[0]()).api_keys
        assert {k.api_key: k.min_version for k in offered}[PRODUCE.key] == 0
        coordinator = raw.call(FIND_COORDINATOR, 0, FIND_COORDINATOR.request[0](key="old-g"))
        assert coordinator.error_code == errors.NONE
        assert coordinator.port in (a.kafka_port, b.kafka_port)
        producer = raw.call(INIT_PRODUCER_ID, 0, INIT_PRODUCER_ID.request[0](
            transactional_id=None, transaction_timeout_ms=60000
        ))  # fmt: skip
        assert (producer.error_code, producer.producer_epoch) == (errors.NONE, 0)
        assert producer.producer_id > 0
