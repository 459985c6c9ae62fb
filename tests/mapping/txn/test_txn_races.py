"""The transaction coordinator's races with the real partition side (mapping/txn/transactions.py,
mapping/txn/txn_completer.py, mapping/partition/partition_txns.py), on a real Redis: a finisher's
late
marker never ends the producer's next transaction, and a registration a pod that died inside
AddPartitionsToTxn left behind is released by the completer, so no partition's last stable
offset hangs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

from adapter.pod import Pod, build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.core import kafka_errors as E
from mapping.topic.topic_config import TopicDefaults
from mapping.txn.transactions import ADD_PARTITIONS, txn_coord_add_call
from mapping.txn.txn_completer import complete_due
from mapping.txn.txn_state import COMPLETE_ABORT, partition_member

TOPIC = "orders"
GRACE_MS = 100
FAR_FUTURE_MS = 1 << 50  # every id is due


async def _run(redis_url: str, body: Callable[[Pod], Awaitable[None]]) -> None:
    settings = Settings(
        key_prefix=f"txr-{uuid.uuid4().hex[:8]}", topic_defaults=TopicDefaults(3, 1, 1)
    )
    client = connect(redis_url)
    pod = build_pod(settings, client, pod_id="p0")
    runner = asyncio.create_task(pod.batcher.run())
    try:
        await pod.topics.topic(TOPIC)
        pod.transactions.settings = replace(pod.transactions.settings, grace_ms=GRACE_MS)
        await body(pod)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        await client.aclose()


async def _append(pod: Pod, pid: int, epoch: int, seq: int, value: bytes) -> int:
    config = await pod.topics.topic(TOPIC)
    result = await pod.kafka.append_batch(config, 0, [(b"k", value, 0, [])], pid, epoch, seq, True)
    return result.status


async def _committed_values(pod: Pod) -> tuple[list[bytes], int]:
    """V1 CONSUME of partition 0 (committed records only, up to the LSO), and the LSO."""
    config = await pod.topics.topic(TOPIC)
    result = await pod.partition_txns.start_consume(config, 0, 0, 1000)
    return [v for _, v in result.records], await pod.partition_txns.last_stable_offset(config, 0)


def test_a_late_marker_never_ends_the_next_transaction(redis_url: str) -> None:
    async def body(pod: Pod) -> None:
        tx, config = pod.transactions, await pod.topics.topic(TOPIC)
        s = await tx.init_producer_id("late", 60_000)
        await tx.add_partitions("late", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert await _append(pod, s.producer_id, s.epoch, 0, b"first") == 0
        first = await tx.describe("late")
        assert first is not None
        assert await tx.end_txn("late", s.producer_id, s.epoch, True) == E.NONE
        # the next transaction at once (within the same ms, often): a start of its own
        await tx.add_partitions("late", s.producer_id, s.epoch, [(TOPIC, 0)])
        second = await tx.describe("late")
        assert second is not None and second.txn_start_ms > first.txn_start_ms
        assert await _append(pod, s.producer_id, s.epoch, 1, b"second") == 0
        # a finisher slower than the grace writes the first transaction's marker now
        late = await pod.partition_txns.write_marker(
            config, 0, s.producer_id, s.epoch, True, first.txn_start_ms
        )
        assert late is None
        assert [t[0] for t in await pod.partition_txns.open_transactions(config, 0)] == [
            s.producer_id
        ]
        assert (await _committed_values(pod))[0] == [b"first"]
        assert await tx.end_txn("late", s.producer_id, s.epoch, False) == E.NONE
        assert (await _committed_values(pod))[0] == [b"first"]
        assert await pod.partition_txns.open_transactions(config, 0) == []

    asyncio.run(_run(redis_url, body))


def test_a_dead_pods_late_registration_is_released(redis_url: str) -> None:
    """A pod ran AddPartitionsToTxn's script, the transaction was fenced (its markers written
    while the partition was not registered yet), then the pod registered the partition, the
    producer appended, and the pod died before its verification: the completer releases the
    registration with an abort marker for that transaction, and the LSO moves on."""

    async def body(pod: Pod) -> None:
        tx, config = pod.transactions, await pod.topics.topic(TOPIC)
        s = await tx.init_producer_id("dead", 60_000)
        keys = pod.keys.txn("dead")
        member = partition_member(TOPIC, 0)
        reply = await pod.batcher.call(
            *txn_coord_add_call(keys, s.producer_id, s.epoch, ADD_PARTITIONS, [member])
        )
        start = int(reply[1])
        # fenced meanwhile by a new session: the abort finds nothing registered yet
        assert (await tx.init_producer_id("dead", 60_000)).error == E.CONCURRENT_TRANSACTIONS
        state = await tx.describe("dead")
        assert state is not None and state.state == COMPLETE_ABORT
        # the dying pod's late registration, and a batch into it
        assert await pod.partition_txns.add(config, 0, s.producer_id, s.epoch, start) == 0
        assert await _append(pod, s.producer_id, s.epoch, 0, b"limbo") == 0
        values, held = await _committed_values(pod)
        assert values == [] and await pod.partition_txns.open_transactions(config, 0)
        await asyncio.sleep(2 * GRACE_MS / 1000)
        looks = await complete_due(tx, FAR_FUTURE_MS)
        assert [look.released for look in looks if look.transactional_id == "dead"] == [1]
        assert await pod.partition_txns.open_transactions(config, 0) == []
        values, lso = await _committed_values(pod)
        assert values == [] and lso > held
        assert await pod.batcher.call("ZCARD", keys.registering) == 0

    asyncio.run(_run(redis_url, body))


def test_a_dead_pods_registration_in_a_live_transaction_waits_for_its_end(
    redis_url: str,
) -> None:
    """A pod died after registering a partition of a transaction that goes on: the
    registration is the transaction's own, so the completer leaves it to the transaction's
    marker (the commit stands), then forgets the entry."""

    async def body(pod: Pod) -> None:
        tx, config = pod.transactions, await pod.topics.topic(TOPIC)
        s = await tx.init_producer_id("alive", 60_000)
        keys = pod.keys.txn("alive")
        member = partition_member(TOPIC, 0)
        reply = await pod.batcher.call(
            *txn_coord_add_call(keys, s.producer_id, s.epoch, ADD_PARTITIONS, [member])
        )
        assert await pod.partition_txns.add(config, 0, s.producer_id, s.epoch, int(reply[1])) == 0
        assert await _append(pod, s.producer_id, s.epoch, 0, b"kept") == 0
        await asyncio.sleep(2 * GRACE_MS / 1000)
        looks = await complete_due(tx, FAR_FUTURE_MS)
        assert [look.released for look in looks if look.transactional_id == "alive"] == [0]
        assert await pod.batcher.call("ZCARD", keys.registering) == 1
        assert await tx.end_txn("alive", s.producer_id, s.epoch, True) == E.NONE
        assert (await _committed_values(pod))[0] == [b"kept"]
        await asyncio.sleep(2 * GRACE_MS / 1000)
        looks = await complete_due(tx, FAR_FUTURE_MS)
        assert [look.released for look in looks if look.transactional_id == "alive"] == [0]
        assert await pod.batcher.call("ZCARD", keys.registering) == 0
        assert (await _committed_values(pod))[0] == [b"kept"]

    asyncio.run(_run(redis_url, body))
