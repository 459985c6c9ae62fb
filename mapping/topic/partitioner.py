"""Key -> partition, FNV-1a 32-bit as in the seed broker (``user1`` -> 2 of 3). The hash is
compiled (mapping/topic/_fnv.c) where the install built it: every V1 PRODUCE and every
keyed row of the Spark sink takes it."""

from __future__ import annotations

from collections.abc import Callable

from mapping.core.compiled import compiled

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_32_pure(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


fnv1a_32: Callable[[bytes], int] = compiled("mapping.topic._fnv", "fnv1a_32") or fnv1a_32_pure


def partition_for(key: bytes, partitions: int) -> int:
    return fnv1a_32(key) % partitions
