"""FNV-1a 32-bit partitioning, as in the seed broker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mapping.topic.partitioner import fnv1a_32, partition_for


@pytest.mark.parametrize(
    ("data", "digest"),
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],
)
def test_fnv1a_reference_vectors(data: bytes, digest: int) -> None:
    assert fnv1a_32(data) == digest


def test_user1_goes_to_partition_2_of_3() -> None:
    assert partition_for(b"user1", 3) == 2


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_stable(key: bytes, partitions: int) -> None:
    p = partition_for(key, partitions)
    assert 0 <= p < partitions
    assert partition_for(key, partitions) == p
    assert partition_for(key, 1) == 0
