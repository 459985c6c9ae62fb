"""Latency histograms that merge across processes, and their percentiles."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

# Log-scale buckets of ~0.5%: exact enough for p50/p99/p999, tiny to ship between processes.
_SCALE = 200.0


def bucket(seconds: float) -> int:
    return int(math.log1p(max(seconds, 0.0) * 1e6) * _SCALE)


def bucket_us(index: int) -> float:
    """The upper edge of a bucket, in microseconds."""
    return math.expm1((index + 1) / _SCALE)


@dataclass
class Histogram:
    counts: Counter[int] = field(default_factory=Counter)

    def add(self, seconds: float, weight: int = 1) -> None:
        self.counts[bucket(seconds)] += weight

    def merge(self, other: Histogram) -> None:
        self.counts.update(other.counts)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def percentile_us(self, fraction: float) -> float | None:
        total = self.total
        if total == 0:
            return None
        rank = fraction * total
        seen = 0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if seen >= rank:
                return bucket_us(index)
        return bucket_us(max(self.counts))
