"""``__consumer_offsets``' records and partitions as Kafka's group coordinator makes them
(mapping/group/offsets_topic.py): the key and value layouts of OffsetCommitKey v1 and
OffsetCommitValue v3, and ``Utils.abs(groupId.hashCode()) % 50``."""

from __future__ import annotations

import struct

import pytest

from mapping.group.offsets_topic import (
    OFFSETS_TOPIC_PARTITIONS,
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    kafka_abs,
    partition_for,
)

INT_MIN = -(1 << 31)


def _java_hash_by_hand(text: str) -> int:
    """String.hashCode spelled out as Java runs it: int arithmetic that wraps at every step,
    over UTF-16 code units."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        unit = int.from_bytes(data[i : i + 2], "big")
        h = 31 * h + unit
        h = (h + (1 << 31)) % (1 << 32) - (1 << 31)  # Java's int overflow
    return h


# (group, String.hashCode(), Utils.abs(hash) % 50), printed by OpenJDK 17 (a throwaway
# H.java calling s.hashCode() and Kafka's Utils.abs)
JAVA = [
    ("hello", 99162322, 22),
    ("polygenelubricants", INT_MIN, 0),  # Integer.MIN_VALUE: Utils.abs gives 0
    ("console-consumer-12345", 158455506, 6),
    ("my-group", -1906497762, 12),
    ("groupé", -1237460406, 6),
    ("über-gruppe", -650381771, 21),
    ("\U0001f600", 1772899, 49),  # outside the BMP: two UTF-16 units
    ("zzzzzzzz", -1910022912, 12),
]


@pytest.mark.parametrize(("group", "hashed", "partition"), JAVA)
def test_groups_land_where_kafka_puts_them(group: str, hashed: int, partition: int) -> None:
    assert java_string_hash(group) == _java_hash_by_hand(group) == hashed
    assert partition_for(group) == partition
    assert partition_for(group, OFFSETS_TOPIC_PARTITIONS) == partition


def test_kafka_abs_is_not_the_partitioners_mask() -> None:
    """Kafka's Utils.abs is Math.abs (MIN_VALUE: 0); masking the sign bit (toPositive)
    would put every group with a negative hash elsewhere."""
    assert kafka_abs(-5) == 5 and kafka_abs(7) == 7 and kafka_abs(INT_MIN) == 0
    negative = [g for g, h, _ in JAVA if h < 0 and h != INT_MIN]
    assert negative
    for group in negative:
        masked = (java_string_hash(group) & 0x7FFFFFFF) % OFFSETS_TOPIC_PARTITIONS
        assert masked != partition_for(group)


def test_hash_of_the_empty_group_and_a_long_one() -> None:
    assert java_string_hash("") == 0 and partition_for("") == 0
    long_name = "g" * 249 + "ñ"
    assert java_string_hash(long_name) == _java_hash_by_hand(long_name)


def test_key_layout_is_version_1() -> None:
    """int16 version 1, int16-prefixed UTF-8 group and topic, int32 partition."""
    key = encode_key("grüppe", "orders", 7)
    group = "grüppe".encode()
    expected = (
        struct.pack(">h", 1)
        + struct.pack(">h", len(group)) + group
        + struct.pack(">h", 6) + b"orders"
        + struct.pack(">i", 7)
    )  # fmt: skip
    assert key == expected
    assert decode_key(key) == OffsetKey("grüppe", "orders", 7)


def test_value_layout_is_version_3() -> None:
    """int16 version 3, int64 offset, int32 leader epoch, string metadata, int64 commit
    timestamp (no expire timestamp: that was version 1 only)."""
    offset = (1_700_000_000_000 << 10) | 5  # a time-encoded offset, above 2^50
    value = encode_value(offset, -1, "meta", 1_700_000_000_123)
    expected = (
        struct.pack(">hqi", 3, offset, -1)
        + struct.pack(">h", 4) + b"meta"
        + struct.pack(">q", 1_700_000_000_123)
    )  # fmt: skip
    assert value == expected
    assert decode_value(value) == OffsetValue(offset, -1, "meta", 1_700_000_000_123)
    assert decode_value(encode_value(0, 12, "", 0)) == OffsetValue(0, 12, "", 0)


def test_decoding_refuses_what_it_does_not_know() -> None:
    group_metadata_key = struct.pack(">hh", 2, 1) + b"g"  # Kafka's version 2: a group's state
    with pytest.raises(ValueError, match="version 2"):
        decode_key(group_metadata_key)
    with pytest.raises(ValueError, match="value version 1"):
        decode_value(struct.pack(">hqh", 1, 5, 0) + struct.pack(">qq", 1, -1))
    with pytest.raises(ValueError):
        decode_key(encode_key("g", "t", 0)[:-1])
    with pytest.raises(ValueError, match="left over"):
        decode_value(encode_value(1, -1, "", 2) + b"x")
    # a version 0 key reads alike (Kafka wrote them before 0.10)
    assert decode_key(struct.pack(">h", 0) + encode_key("g", "t", 1)[2:]) == OffsetKey("g", "t", 1)


def test_a_string_longer_than_an_int16_length_is_refused() -> None:
    with pytest.raises(ValueError, match="int16"):
        encode_value(1, -1, "m" * 40_000, 2)
