"""Transactions, the partition side (mapping/partition/partition_txns.py, txn/add.lua,
txn/marker.lua,
kafka/produce.lua's checks) straight against Redis: registration and its epochs, the
transactional append's refusals, the last stable offset, markers as entries, commit and abort
as V1 CONSUME sees them, the aborted index, idempotent markers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.startup import pin_sequence_bits
from mapping.core import codec
from mapping.core.kafka_errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_EPOCH,
    INVALID_TXN_STATE,
)
from mapping.core.keys import Keys
from mapping.core.records import CONTROL_BYTES, PRODUCER_ID_BYTES
from mapping.partition.kafka import KafkaStore
from mapping.partition.partition_txns import MAX_SKIPPED_PAGES, PartitionTxns
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig, TopicDefaults
from mapping.topic.topics import Topics

BITS = 10
TOPIC = "txns"
PID = 7


class Parts:
    def __init__(self, store: KafkaStore, config: TopicConfig) -> None:
        self.store = store
        self.config = config
        self.txns = PartitionTxns(store.partitions)

    async def write(
        self, values: list[bytes], *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool
    ) -> tuple[int, int, int]:
        """(status, base offset, last offset) of one batch of ``values``."""
        records = [(b"k", v, 0, []) for v in values]
        result = await self.store.append_batch(self.config, 0, records, pid, epoch, seq, txn)
        return result.status, result.base_offset, result.last_offset

    async def consume(self, offset: int = 0, max_records: int = 1000) -> tuple[list[bytes], int]:
        """V1 CONSUME: the values, the hw answered."""
        result = await self.txns.start_consume(self.config, 0, offset, max_records)
        return [v for _, v in result.records], result.high_watermark

    async def raw(self) -> list[tuple[bytes, list[bytes]]]:
        log = self.store.keys.partition(TOPIC, 0).log
        return list(await self.store.partitions.batcher.call("XRANGE", log, "-", "+"))


async def _with_parts(redis_url: str, body: Callable[[Parts], Awaitable[None]]) -> None:
    client = connect(redis_url, 5.0)
    keys = Keys(f"txns-{uuid.uuid4().hex[:8]}")
    await pin_sequence_bits(client, keys, BITS)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        topics = Topics(batcher, keys, topic_defaults=TopicDefaults(1, 1, 1))
        store = KafkaStore(Partitions(batcher, keys, topics, sequence_bits=BITS))
        await body(Parts(store, await topics.topic(TOPIC)))
    finally:
        runner.cancel()
        await client.aclose()


def test_commit_makes_the_transaction_visible_and_the_marker_is_an_entry(redis_url: str) -> None:
    async def body(p: Parts) -> None:
        assert await p.txns.add(p.config, 0, PID, 0) == 0
        assert await p.txns.add(p.config, 0, PID, 0) == 0  # again: still registered
        assert await p.txns.open_transactions(p.config, 0) == [(PID, 0, -1)]
        written, before, _ = await p.write([b"before"], txn=False)
        assert written == 0
        lso_before = await p.txns.last_stable_offset(p.config, 0)
        status, first, last = await p.write([b"t1", b"t2"], pid=PID, epoch=0, seq=0, txn=True)
        assert status == 0
        assert await p.txns.open_transactions(p.config, 0) == [(PID, 0, first)]
        # the position a reader of every stable record reaches, however far the
        # transaction's first offset lies past it (offsets are sparse)
        assert await p.txns.last_stable_offset(p.config, 0) == before + 1 == lso_before
        assert (await p.write([b"after"], txn=False))[0] == 0  # behind the open transaction
        values, hw = await p.consume()
        assert values == [b"before"]
        assert hw == before  # V1 never reads past the last stable offset
        marker = await p.txns.write_marker(p.config, 0, PID, 0, commit=True)
        assert marker is not None and marker > last
        assert await p.txns.open_transactions(p.config, 0) == []
        values, hw = await p.consume()
        assert values == [b"before", b"t1", b"t2", b"after"]  # no marker
        assert hw == marker
        assert await p.txns.last_stable_offset(p.config, 0) == marker + 1
        # the marker: an entry of its own, at an offset like any record
        entries = await p.raw()
        marker_entry = entries[-1]
        assert codec.entry_offset(marker_entry[0], BITS) == marker
        fields = marker_entry[1]
        assert fields[0] == CONTROL_BYTES and fields[1] == b"commit"
        assert fields[2:6] == [b"pid", str(PID).encode(), b"pe", b"0"]
        assert PRODUCER_ID_BYTES in entries[1][1]  # a transactional record carries pid
        # a second marker finds nothing open: idempotent
        assert await p.txns.write_marker(p.config, 0, PID, 0, commit=True) is None
        assert len(await p.raw()) == len(entries)

    asyncio.run(_with_parts(redis_url, body))


def test_abort_hides_the_records_from_v1_and_lists_them(redis_url: str) -> None:
    async def body(p: Parts) -> None:
        await p.txns.add(p.config, 0, PID, 3)
        _, first, _ = await p.write([b"a1", b"a2"], pid=PID, epoch=3, seq=0, txn=True)
        await p.write([b"plain"], txn=False)
        marker = await p.txns.write_marker(p.config, 0, PID, 3, commit=False)
        assert marker is not None
        values, hw = await p.consume()
        assert values == [b"plain"]
        assert hw == marker
        ranges = await p.txns.aborted_ranges(p.config, 0, 0)
        assert ranges.listed(0, marker) == [(PID, first)]
        assert ranges.aborted(PID, first) and not ranges.aborted(PID, marker + 1)
        assert not ranges.aborted(PID + 1, first)
        # a new transaction of the same producer commits: only it shows
        await p.txns.add(p.config, 0, PID, 3)
        await p.write([b"c1"], pid=PID, epoch=3, seq=2, txn=True)
        await p.txns.write_marker(p.config, 0, PID, 3, commit=True)
        assert (await p.consume())[0] == [b"plain", b"c1"]
        # read from the aborted records on: they stay hidden
        assert (await p.consume(first))[0] == [b"plain", b"c1"]

    asyncio.run(_with_parts(redis_url, body))


def test_a_page_of_aborted_records_is_read_past(redis_url: str) -> None:
    async def body(p: Parts) -> None:
        await p.txns.add(p.config, 0, PID, 0)
        await p.write([b"x"] * 50, pid=PID, epoch=0, seq=0, txn=True)
        await p.txns.write_marker(p.config, 0, PID, 0, commit=False)
        await p.write([b"visible"], txn=False)
        # pages of 10: five of aborted records, one with the marker, then the record
        assert MAX_SKIPPED_PAGES > 6
        values, _ = await p.consume(0, max_records=10)
        assert values == [b"visible"]

    asyncio.run(_with_parts(redis_url, body))


def test_transactional_appends_are_refused_outside_the_transaction(redis_url: str) -> None:
    async def body(p: Parts) -> None:
        # not registered: INVALID_TXN_STATE, nothing written
        assert (await p.write([b"x"], pid=PID, epoch=1, seq=0, txn=True))[0] == INVALID_TXN_STATE
        assert await p.raw() == []
        await p.txns.add(p.config, 0, PID, 1)
        # an older epoch: INVALID_PRODUCER_EPOCH; a newer one not registered: INVALID_TXN_STATE
        assert (await p.write([b"x"], pid=PID, epoch=0, seq=0, txn=True))[
            0
        ] == INVALID_PRODUCER_EPOCH
        assert (await p.write([b"x"], pid=PID, epoch=2, seq=0, txn=True))[0] == INVALID_TXN_STATE
        # a plain idempotent batch of the producer while its transaction is open
        assert (await p.write([b"x"], pid=PID, epoch=1, seq=0, txn=False))[0] == INVALID_TXN_STATE
        assert await p.raw() == []
        assert (await p.write([b"ok"], pid=PID, epoch=1, seq=0, txn=True))[0] == 0
        # registration: an older epoch is fenced; a newer one waits for the old one's marker
        assert await p.txns.add(p.config, 0, PID, 0) == INVALID_PRODUCER_EPOCH
        assert await p.txns.add(p.config, 0, PID, 2) == CONCURRENT_TRANSACTIONS
        # the coordinator aborts the fenced session's transaction with the new epoch
        assert await p.txns.write_marker(p.config, 0, PID, 2, commit=False) is not None
        assert await p.txns.add(p.config, 0, PID, 2) == 0
        # a stale marker of the old epoch ends nothing
        assert await p.txns.write_marker(p.config, 0, PID, 1, commit=True) is None
        assert await p.txns.open_transactions(p.config, 0) == [(PID, 2, -1)]
        assert (await p.consume())[0] == []

    asyncio.run(_with_parts(redis_url, body))


def test_the_lso_is_the_oldest_open_transaction(redis_url: str) -> None:
    async def body(p: Parts) -> None:
        for pid in (1, 2):
            await p.txns.add(p.config, 0, pid, 0)
        _, first1, _ = await p.write([b"p1"], pid=1, epoch=0, seq=0, txn=True)
        _, first2, _ = await p.write([b"p2"], pid=2, epoch=0, seq=0, txn=True)
        # nothing before the oldest: any position up to it reads it first, 0 included
        assert await p.txns.last_stable_offset(p.config, 0) == 0
        await p.txns.write_marker(p.config, 0, 1, 0, commit=True)
        assert await p.txns.last_stable_offset(p.config, 0) == first1 + 1
        assert (await p.consume())[0] == [b"p1"]
        await p.txns.write_marker(p.config, 0, 2, 0, commit=False)
        assert (await p.consume())[0] == [b"p1"]
        status = await p.store.partitions.partition_status(p.config, 0)
        assert status.stable_end == -1
        assert status.last_stable_offset == status.high_watermark + 1

    asyncio.run(_with_parts(redis_url, body))


def test_a_fencing_marker_fences_the_old_epochs_batches(redis_url: str) -> None:
    """The abort written on fencing carries the bumped epoch; the partition remembers it (the
    producers hash, as Kafka's producer state), so the zombie's next batch is
    INVALID_PRODUCER_EPOCH before any registration check (not INVALID_TXN_STATE)."""

    async def body(p: Parts) -> None:
        await p.txns.add(p.config, 0, PID, 0)
        assert (await p.write([b"zombie"], pid=PID, epoch=0, seq=0, txn=True))[0] == 0
        assert await p.txns.write_marker(p.config, 0, PID, 1, commit=False) is not None
        fenced = await p.write([b"zombie-2"], pid=PID, epoch=0, seq=1, txn=True)
        assert fenced[0] == INVALID_PRODUCER_EPOCH
        plain = await p.write([b"zombie-3"], pid=PID, epoch=0, seq=1, txn=False)
        assert plain[0] == INVALID_PRODUCER_EPOCH
        # the new session (the coordinator bumps once more) starts its sequences afresh
        await p.txns.add(p.config, 0, PID, 2)
        assert (await p.write([b"fresh"], pid=PID, epoch=2, seq=0, txn=True))[0] == 0
        await p.txns.write_marker(p.config, 0, PID, 2, commit=True)
        assert (await p.consume())[0] == [b"fresh"]

    asyncio.run(_with_parts(redis_url, body))


def test_a_marker_ends_only_its_own_transaction(redis_url: str) -> None:
    """Transactions of one producer epoch are told apart by the coordinator's txn_start_ms:
    a late finisher's marker for the previous transaction ends nothing of the next one."""

    async def body(p: Parts) -> None:
        assert await p.txns.add(p.config, 0, PID, 0, transaction=100) == 0
        await p.write([b"t1"], pid=PID, epoch=0, seq=0, txn=True)
        assert await p.txns.write_marker(p.config, 0, PID, 0, True, transaction=100) is not None
        assert await p.txns.add(p.config, 0, PID, 0, transaction=200) == 0
        _, first, _ = await p.write([b"t2"], pid=PID, epoch=0, seq=1, txn=True)
        # the first transaction's marker again, late (a slow pod after the completer)
        assert await p.txns.write_marker(p.config, 0, PID, 0, True, transaction=100) is None
        assert await p.txns.open_transactions(p.config, 0) == [(PID, 0, first)]
        # a third transaction cannot register while the second holds records here
        assert await p.txns.add(p.config, 0, PID, 0, transaction=300) == CONCURRENT_TRANSACTIONS
        assert await p.txns.write_marker(p.config, 0, PID, 0, False, transaction=200) is not None
        assert await p.txns.open_transactions(p.config, 0) == []
        assert (await p.consume())[0] == [b"t1"]

    asyncio.run(_with_parts(redis_url, body))
