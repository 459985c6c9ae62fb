"""Key -> partition, FNV-1a 32-bit as in the seed broker (``user1`` -> 2 of 3)."""

from __future__ import annotations

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193


def fnv1a_32(data: bytes) -> int:
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


def partition_for(key: bytes, partitions: int) -> int:
    return fnv1a_32(key) % partitions
