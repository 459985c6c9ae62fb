"""FNV-1a 32-bit partitioning, as in the seed broker: the compiled hash (mapping/topic/_fnv.c)
and the pure one give the same numbers."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mapping.topic import partitioner
from mapping.topic.partitioner import fnv1a_32_pure, partition_for

compiled = pytest.importorskip(
    "mapping.topic._fnv",
    reason="the C extension is not built (setup.py builds it only where a C compiler is)",
)
HASHES = [fnv1a_32_pure, compiled.fnv1a_32]


@pytest.mark.parametrize("fnv1a_32", HASHES)
@pytest.mark.parametrize(
    ("data", "digest"),
    [(b"", 0x811C9DC5), (b"a", 0xE40C292C), (b"foobar", 0xBF9CF968)],
)
def test_fnv1a_reference_vectors(
    fnv1a_32: Callable[[bytes], int], data: bytes, digest: int
) -> None:
    assert fnv1a_32(data) == digest


@given(st.binary(max_size=300))
def test_the_compiled_hash_is_the_pure_one(data: bytes) -> None:
    assert compiled.fnv1a_32(data) == fnv1a_32_pure(data)
    assert compiled.fnv1a_32(bytearray(data)) == fnv1a_32_pure(data)


def test_the_pods_hash_is_the_compiled_one_unless_pure_python_is_asked_for() -> None:
    expected = fnv1a_32_pure if os.environ.get("ADAPTER_PURE_PYTHON") else compiled.fnv1a_32
    assert partitioner.fnv1a_32 is expected


def test_a_key_that_is_not_bytes_is_refused() -> None:
    with pytest.raises(TypeError):
        compiled.fnv1a_32("user1")


def test_user1_goes_to_partition_2_of_3() -> None:
    assert partition_for(b"user1", 3) == 2


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_in_range_and_stable(key: bytes, partitions: int) -> None:
    p = partition_for(key, partitions)
    assert 0 <= p < partitions
    assert partition_for(key, partitions) == p
    assert partition_for(key, 1) == 0
