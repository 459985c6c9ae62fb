"""An idempotent producer's batches stay in order across an append that failed.

A producer keeps several batches of one partition in flight. When Redis fails one of them
(not run: CLUSTERDOWN, a refused connect; or outcome unknown), the pod answers it with a
retriable code, but the batches after it may reach Redis once it is back, before the
failed one is sent again: the produce script refuses them with OUT_OF_ORDER_SEQUENCE_NUMBER
(a gap). librdkafka reads that as "skipped sequence numbers" and bumps its epoch, and after
a bump it sends every unacknowledged batch again under new sequence numbers, also one of
another partition whose earlier attempt did reach Redis: stored twice (seen in the cluster
failover test, tests/deploy/test_cluster_failover.py). A Kafka broker never answers so: a
leader that could not take a batch cannot take the next one either.

So a pod remembers, per (topic, partition, producer id, epoch), the first batch it failed,
and answers a later batch of that producer that the script refused as ahead of its state
(UNKNOWN_PRODUCER_ID) with the same retriable "not written" error: the client sends the
failed batch again first, and the gap closes.

A gap before the first batch the pod failed is none of the pod's: every earlier batch of
that producer was answered (a producer sends its batches in order, and a failed one again
before the rest), so the gap is acknowledged records a Redis failover took back (the
promoted replica lacked them; without --redis-wait-replicas, docs/durability.md). That
batch, sent again, is appended after the gap (``first_failed``: kafka/produce.lua's
lost_gap): the lost records stay lost, nothing is stored twice, and the producer goes on,
where any error would be fatal to librdkafka (the batch is its head of line and a retry).
Any other gap is answered UNKNOWN_PRODUCER_ID, as Kafka answered a producer whose state it
lost before KIP-360: librdkafka bumps its epoch and sends its batches again from sequence 0
when that batch is its first unacknowledged one and not a retry (docs/kafka.md).
"""

from __future__ import annotations

import time
from collections.abc import Hashable

# How long a failed batch is remembered: a producer retries it within its
# message.timeout.ms (librdkafka's default: 5 minutes), or bumps its epoch.
HOLD_S = 300.0
# At most this many remembered failures; the oldest go first.
MAX_KEPT = 10_000


class SequenceFence:
    def __init__(self, hold_s: float = HOLD_S, max_kept: int = MAX_KEPT) -> None:
        self.hold_s = hold_s
        self.max_kept = max_kept
        self._failed: dict[Hashable, tuple[int, float]] = {}  # key -> (base seq, when)

    def failed(self, key: Hashable, base_sequence: int) -> None:
        """A batch of ``key`` failed: it was not written, or may not have been."""
        now = time.monotonic()
        known = self._failed.get(key)
        if known is not None and known[0] <= base_sequence and now - known[1] < self.hold_s:
            return  # an earlier failed batch is the one to send first
        self._failed.pop(key, None)  # re-inserted: dicts keep insertion order (oldest first)
        self._failed[key] = (base_sequence, now)
        while len(self._failed) > self.max_kept:
            del self._failed[next(iter(self._failed))]

    def written(self, key: Hashable) -> None:
        """A batch of ``key`` was stored (or found stored): the sequence has no gap there."""
        self._failed.pop(key, None)

    def first_failed(self, key: Hashable, base_sequence: int) -> bool:
        """Whether the batch of ``key`` at ``base_sequence`` is the first one this pod failed
        (and none of that producer was stored since): a gap before it was not this pod's."""
        known = self._failed.get(key)
        return (
            known is not None
            and known[0] == base_sequence
            and time.monotonic() - known[1] < self.hold_s
        )

    def behind_failure(self, key: Hashable, base_sequence: int) -> bool:
        """Whether a batch of ``key`` comes after one that failed (its gap is the pod's)."""
        known = self._failed.get(key)
        if known is None:
            return False
        if time.monotonic() - known[1] >= self.hold_s:
            del self._failed[key]
            return False
        return base_sequence > known[0]
