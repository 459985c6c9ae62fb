"""The transaction coordinator's state machine (mapping/txn/transactions.py, the txn_coord/*
scripts,
mapping/txn/txn_completer.py) on a real Redis, as Kafka's TransactionCoordinator behaves: init
and fencing, adding partitions and groups, ending with commit or abort, timeouts, expiry, and
a transaction a dead pod left half-ended, finished by another pod. The partition and group
sides are recorded by a stand-in participant (their own tests are theirs)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import pytest

from adapter.pod import Pod, build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.core import kafka_errors as E
from mapping.topic.topic_config import TopicConfig
from mapping.txn.transactions import Transactions
from mapping.txn.txn_completer import complete_due
from mapping.txn.txn_state import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_COMMIT

TOPIC = "orders"


@dataclass
class Recorder:
    """Stands in for PartitionTxns and KafkaGroups: what the coordinator asked of them."""

    registered: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    markers: list[tuple[str, int, int, int, bool]] = field(default_factory=list)
    group_ends: list[tuple[str, int, int, bool]] = field(default_factory=list)
    broken: bool = False  # the pod "dies" while writing markers

    async def add(
        self, config: TopicConfig, partition: int, producer_id: int, epoch: int,
        transaction: int = -1,
    ) -> int:  # fmt: skip
        known = self.registered.get((config.name, partition))
        if known is not None and known[0] == producer_id and known[1] > epoch:
            return E.INVALID_PRODUCER_EPOCH
        self.registered[(config.name, partition)] = (producer_id, epoch)
        return E.NONE

    async def write_marker(
        self, config: TopicConfig, partition: int, producer_id: int, epoch: int, commit: bool,
        transaction: int = -1,
    ) -> int | None:  # fmt: skip
        if self.broken:
            raise ConnectionError("the pod died")
        known = self.registered.get((config.name, partition))
        if known is None or known[0] != producer_id or known[1] > epoch:
            return None
        del self.registered[(config.name, partition)]
        self.markers.append((config.name, partition, producer_id, epoch, commit))
        return len(self.markers)

    async def end_txn_offsets(self, group: str, producer_id: int, epoch: int, commit: bool) -> None:
        if self.broken:
            raise ConnectionError("the pod died")
        self.group_ends.append((group, producer_id, epoch, commit))


@dataclass
class Participants:
    partition_txns: Recorder
    kafka_groups: Recorder


Body = Callable[[list[Transactions], Recorder], Awaitable[None]]


def run(redis_url: str, body: Body, *, pods: int = 1, **txn: int) -> None:
    """``body(coordinators, recorder)``: ``pods`` in-process pods' coordinators on one Redis
    (a fresh key prefix), their batchers running, sharing one recorder."""

    async def main() -> None:
        settings = Settings(key_prefix=f"tx-{uuid.uuid4().hex[:8]}")
        recorder = Recorder()
        client = connect(redis_url)
        built: list[Pod] = [build_pod(settings, client, pod_id=f"p{n}") for n in range(pods)]
        tasks = [asyncio.create_task(p.batcher.run()) for p in built]
        try:
            await built[0].topics.topic(TOPIC)  # 3 partitions (the defaults)
            coordinators = []
            for p in built:
                p.transactions.settings = replace(p.transactions.settings, **txn)
                p.transactions.participants = Participants(recorder, recorder)
                coordinators.append(p.transactions)
            await body(coordinators, recorder)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.aclose()

    asyncio.run(main())


def test_init_creates_then_bumps_the_epoch(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        first = await tx[0].init_producer_id("app-1", 60_000)
        assert first.error == E.NONE and first.producer_id > 0 and first.epoch == 0
        again = await tx[0].init_producer_id("app-1", 60_000)
        assert (again.error, again.producer_id, again.epoch) == (E.NONE, first.producer_id, 1)
        other = await tx[0].init_producer_id("app-2", 60_000)
        assert other.producer_id != first.producer_id
        state = await tx[0].describe("app-1")
        assert state is not None and (state.state, state.epoch) == (EMPTY, 1)
        assert await tx[0].describe("nobody") is None

    run(redis_url, body)


def test_timeouts_beyond_the_maximum_are_refused(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        assert (await tx[0].init_producer_id("t", 0)).error == E.INVALID_TRANSACTION_TIMEOUT
        assert (await tx[0].init_producer_id("t", 1001)).error == E.INVALID_TRANSACTION_TIMEOUT
        assert (await tx[0].init_producer_id("t", 1000)).error == E.NONE

    run(redis_url, body, max_timeout_ms=1000)


def test_commit_writes_markers_and_group_offsets_then_completes(redis_url: str) -> None:
    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("copy", 60_000)
        added = await c.add_partitions("copy", s.producer_id, s.epoch, [(TOPIC, 0), (TOPIC, 2)])
        assert added == {(TOPIC, 0): E.NONE, (TOPIC, 2): E.NONE}
        assert rec.registered == {(TOPIC, 0): (s.producer_id, 0), (TOPIC, 2): (s.producer_id, 0)}
        assert await c.add_offsets("copy", s.producer_id, s.epoch, "readers") == E.NONE
        state = await c.describe("copy")
        assert state is not None and state.state == ONGOING and state.txn_start_ms > 0
        assert state.partitions == [(TOPIC, 0), (TOPIC, 2)] and state.groups == ["readers"]

        assert await c.end_txn("copy", s.producer_id, s.epoch, True) == E.NONE
        assert sorted(rec.markers) == [(TOPIC, 0, s.producer_id, 0, True),
                                       (TOPIC, 2, s.producer_id, 0, True)]  # fmt: skip
        assert rec.group_ends == [("readers", s.producer_id, 0, True)]
        done = await c.describe("copy")
        assert done is not None and done.state == COMPLETE_COMMIT and done.partitions == []
        # a retried EndTxn answers NONE; the other outcome is refused
        assert await c.end_txn("copy", s.producer_id, s.epoch, True) == E.NONE
        assert await c.end_txn("copy", s.producer_id, s.epoch, False) == E.INVALID_TXN_STATE
        # the next transaction starts with the next add, same epoch (transactions V1)
        again = await c.add_partitions("copy", s.producer_id, s.epoch, [(TOPIC, 1)])
        assert again == {(TOPIC, 1): E.NONE}
        assert await c.end_txn("copy", s.producer_id, s.epoch, False) == E.NONE
        assert rec.markers[-1] == (TOPIC, 1, s.producer_id, 0, False)
        last = await c.describe("copy")
        assert last is not None and last.state == COMPLETE_ABORT

    run(redis_url, body)


def test_requests_out_of_turn(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("t", 60_000)
        pid, epoch = s.producer_id, s.epoch
        assert await c.end_txn("t", pid, epoch, True) == E.INVALID_TXN_STATE  # nothing open
        unknown = await c.add_partitions("nobody", pid, epoch, [(TOPIC, 0)])
        assert unknown == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
        wrong_id = await c.add_partitions("t", pid + 1000, epoch, [(TOPIC, 0)])
        assert wrong_id == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
        no_topic = await c.add_partitions("t", pid, epoch, [(TOPIC, 0), ("missing", 0), (TOPIC, 7)])
        assert no_topic == {
            (TOPIC, 0): E.OPERATION_NOT_ATTEMPTED,
            ("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION,
            (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        state = await c.describe("t")
        assert state is not None and state.state == EMPTY  # nothing was added

    run(redis_url, body)


def test_a_new_session_fences_the_old_one_and_aborts_its_transaction(redis_url: str) -> None:
    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        old = await c.init_producer_id("app", 60_000)
        await c.add_partitions("app", old.producer_id, old.epoch, [(TOPIC, 1)])
        # the new session: the open transaction is aborted first, the client told to retry
        fencing = await c.init_producer_id("app", 60_000)
        assert fencing.error == E.CONCURRENT_TRANSACTIONS
        assert rec.markers == [(TOPIC, 1, old.producer_id, 1, False)]  # at the fence's epoch
        new = await c.init_producer_id("app", 60_000)
        assert (new.error, new.producer_id, new.epoch) == (E.NONE, old.producer_id, 2)
        # the zombie
        zombie_add = await c.add_partitions("app", old.producer_id, old.epoch, [(TOPIC, 0)])
        assert zombie_add == {(TOPIC, 0): E.PRODUCER_FENCED}
        assert await c.end_txn("app", old.producer_id, old.epoch, True) == E.PRODUCER_FENCED
        assert await c.add_offsets("app", old.producer_id, old.epoch, "g") == E.PRODUCER_FENCED
        state = await c.describe("app")
        assert state is not None and (state.state, state.epoch) == (EMPTY, 2)
        assert state.end_reason == "fenced"  # how the last transaction ended

    run(redis_url, body)


def test_kip360_resume_with_the_current_epoch_and_a_retry(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("r", 60_000)
        resumed = await c.init_producer_id("r", 60_000, s.producer_id, s.epoch)
        assert (resumed.error, resumed.epoch) == (E.NONE, s.epoch + 1)
        # a retry of that call (the answer was lost): the same epoch again
        retry = await c.init_producer_id("r", 60_000, s.producer_id, s.epoch)
        assert (retry.error, retry.epoch) == (E.NONE, s.epoch + 1)
        stale = await c.init_producer_id("r", 60_000, s.producer_id + 999, 0)
        assert stale.error == E.PRODUCER_FENCED

    run(redis_url, body)


def test_verify_only_names_the_partitions_in_the_transaction(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("v", 60_000)
        before = await c.verify_partitions("v", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert before == {(TOPIC, 0): E.TRANSACTION_ABORTABLE}
        await c.add_partitions("v", s.producer_id, s.epoch, [(TOPIC, 0)])
        after = await c.verify_partitions("v", s.producer_id, s.epoch, [(TOPIC, 0), (TOPIC, 1)])
        assert after == {(TOPIC, 0): E.NONE, (TOPIC, 1): E.TRANSACTION_ABORTABLE}
        fenced = await c.verify_partitions("v", s.producer_id, s.epoch + 1, [(TOPIC, 0)])
        assert fenced == {(TOPIC, 0): E.PRODUCER_FENCED}

    run(redis_url, body)


def test_the_completer_aborts_a_timed_out_transaction(redis_url: str) -> None:
    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("slow", 100)
        await c.add_partitions("slow", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert [look.action for look in await complete_due(c)] in ([], [""])  # not due yet
        await asyncio.sleep(0.3)
        looks = await complete_due(c, now_ms=2**52)
        assert [(look.transactional_id, look.action, look.finished) for look in looks] == [
            ("slow", "finish", True)
        ]
        assert rec.markers == [(TOPIC, 0, s.producer_id, 1, False)]
        state = await c.describe("slow")
        assert state is not None and (state.state, state.epoch) == (COMPLETE_ABORT, 1)
        assert state.end_reason == "timeout"
        # the producer that vanished is fenced when it comes back
        assert await c.end_txn("slow", s.producer_id, s.epoch, True) == E.PRODUCER_FENCED

    run(redis_url, body, grace_ms=50)


def test_another_pod_finishes_what_a_dead_pod_prepared(redis_url: str) -> None:
    async def body(tx: list[Transactions], rec: Recorder) -> None:
        dying, survivor = tx
        s = await dying.init_producer_id("half", 60_000)
        await dying.add_partitions("half", s.producer_id, s.epoch, [(TOPIC, 0), (TOPIC, 1)])
        await dying.add_offsets("half", s.producer_id, s.epoch, "g")
        rec.broken = True  # the pod dies after PrepareCommit, before any marker
        assert await dying.end_txn("half", s.producer_id, s.epoch, True) == E.NONE
        state = await survivor.describe("half")
        assert state is not None and state.state == PREPARE_COMMIT
        rec.broken = False
        # within the grace nobody takes it over: the client's retry is told to wait
        assert await survivor.end_txn("half", s.producer_id, s.epoch, True) == (
            E.CONCURRENT_TRANSACTIONS
        )
        await asyncio.sleep(0.3)
        looks = await complete_due(survivor, now_ms=2**52)
        assert [(look.action, look.finished) for look in looks] == [("finish", True)]
        assert sorted(rec.markers) == [(TOPIC, 0, s.producer_id, 0, True),
                                       (TOPIC, 1, s.producer_id, 0, True)]  # fmt: skip
        assert rec.group_ends == [("g", s.producer_id, 0, True)]
        # exactly once: a second finisher (a late retry) writes nothing more
        assert await dying.finish("half") is False
        assert await survivor.end_txn("half", s.producer_id, s.epoch, True) == E.NONE
        assert len(rec.markers) == 2

    run(redis_url, body, pods=2, grace_ms=100)


def test_a_retried_end_txn_finishes_a_dead_pods_transaction(redis_url: str) -> None:
    async def body(tx: list[Transactions], rec: Recorder) -> None:
        dying, survivor = tx
        s = await dying.init_producer_id("retry", 60_000)
        await dying.add_partitions("retry", s.producer_id, s.epoch, [(TOPIC, 2)])
        rec.broken = True
        assert await dying.end_txn("retry", s.producer_id, s.epoch, False) == E.NONE
        rec.broken = False
        await asyncio.sleep(0.3)
        # the client's retry reaches the other pod after the grace: it finishes it
        assert await survivor.end_txn("retry", s.producer_id, s.epoch, False) == (
            E.CONCURRENT_TRANSACTIONS
        )
        assert rec.markers == [(TOPIC, 2, s.producer_id, 0, False)]
        assert await survivor.end_txn("retry", s.producer_id, s.epoch, False) == E.NONE

    run(redis_url, body, pods=2, grace_ms=100)


def test_the_next_add_finishes_a_commit_whose_last_step_failed(redis_url: str) -> None:
    """Redis failed the pod after the markers, before CompleteCommit: the commit was answered,
    so the producer's next AddPartitionsToTxn (another pod, at once, well within the grace)
    finishes it and starts the next transaction; the next AddOffsetsToTxn likewise."""

    async def body(tx: list[Transactions], rec: Recorder) -> None:
        answering, other = tx
        s = await answering.init_producer_id("half", 60_000)
        pid = s.producer_id
        await answering.add_partitions("half", pid, s.epoch, [(TOPIC, 0)])
        await answering.add_offsets("half", pid, s.epoch, "g")
        rec.broken = True  # the markers' writes fail: nothing after PrepareCommit lands
        assert await answering.end_txn("half", pid, s.epoch, True) == E.NONE
        rec.broken = False
        state = await other.describe("half")
        assert state is not None and state.state == PREPARE_COMMIT
        added = await other.add_partitions("half", pid, s.epoch, [(TOPIC, 1)])
        assert added == {(TOPIC, 1): E.NONE}
        assert rec.markers == [(TOPIC, 0, pid, 0, True)]
        assert rec.group_ends == [("g", pid, 0, True)]
        state = await other.describe("half")
        assert state is not None and (state.state, state.partitions) == (ONGOING, [(TOPIC, 1)])
        # the same through AddOffsetsToTxn, after an abort whose finish failed
        rec.broken = True
        assert await other.end_txn("half", pid, s.epoch, False) == E.NONE
        rec.broken = False
        assert await answering.add_offsets("half", pid, s.epoch, "g2") == E.NONE
        assert rec.markers[-1] == (TOPIC, 1, pid, 0, False)
        state = await answering.describe("half")
        assert state is not None and (state.state, state.groups) == (ONGOING, ["g2"])
        assert await answering.end_txn("half", pid, s.epoch, True) == E.NONE

    run(redis_url, body, pods=2, grace_ms=60_000)


def test_a_bump_by_the_same_producer_finishes_its_answered_commit(redis_url: str) -> None:
    """The producer whose commit was answered but left half-ended bumps its epoch (KIP-360,
    after a later error): its InitProducerId finishes that commit at once, then the retry
    gets the next epoch. A new session (no producer id named) waits for the grace instead:
    the pod that prepared it may still be finishing."""

    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("bump", 60_000)
        await c.add_partitions("bump", s.producer_id, s.epoch, [(TOPIC, 0)])
        rec.broken = True
        assert await c.end_txn("bump", s.producer_id, s.epoch, True) == E.NONE
        rec.broken = False
        new_session = await c.init_producer_id("bump", 60_000)
        assert new_session.error == E.CONCURRENT_TRANSACTIONS and rec.markers == []
        bumping = await c.init_producer_id("bump", 60_000, s.producer_id, s.epoch)
        assert bumping.error == E.CONCURRENT_TRANSACTIONS  # finished meanwhile
        assert rec.markers == [(TOPIC, 0, s.producer_id, 0, True)]
        bumped = await c.init_producer_id("bump", 60_000, s.producer_id, s.epoch)
        assert (bumped.error, bumped.epoch) == (E.NONE, s.epoch + 1)
        state = await c.describe("bump")
        assert state is not None and state.state == EMPTY

    run(redis_url, body, grace_ms=60_000)


def test_a_claimed_finish_is_left_to_its_finisher_for_the_grace(redis_url: str) -> None:
    """A Prepare* another finisher claimed (here a retried EndTxn after the grace, which
    failed too) answers the producer's add CONCURRENT_TRANSACTIONS for one grace, then the
    add takes it over."""

    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("claimed", 60_000)
        await c.add_partitions("claimed", s.producer_id, s.epoch, [(TOPIC, 2)])
        rec.broken = True
        assert await c.end_txn("claimed", s.producer_id, s.epoch, True) == E.NONE
        await asyncio.sleep(0.3)
        retried = await c.end_txn("claimed", s.producer_id, s.epoch, True)
        assert retried == E.CONCURRENT_TRANSACTIONS  # it claimed it, then failed
        rec.broken = False
        waiting = await c.add_partitions("claimed", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert waiting == {(TOPIC, 0): E.CONCURRENT_TRANSACTIONS}
        assert rec.markers == []
        await asyncio.sleep(0.3)
        added = await c.add_partitions("claimed", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert added == {(TOPIC, 0): E.NONE}
        assert rec.markers == [(TOPIC, 2, s.producer_id, 0, True)]

    run(redis_url, body, grace_ms=200)


def test_retries_never_put_the_completer_off(redis_url: str) -> None:
    """Every request of a transactional id touches its look in the completer's index; a
    look that is due stays due however often they come (a producer retrying every ~20 ms),
    so the completer finishes a half-ended transaction within its grace."""

    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("retrying", 60_000)
        await c.add_partitions("retrying", s.producer_id, s.epoch, [(TOPIC, 1)])
        rec.broken = True
        assert await c.end_txn("retrying", s.producer_id, s.epoch, False) == E.NONE
        rec.broken = False
        await asyncio.sleep(0.6)  # the look is due
        for _ in range(5):  # retried requests, each touching the look first
            await asyncio.sleep(0.02)
            await c._touch("retrying")
        looks = await complete_due(c)  # this pod's clock: now, well within another grace
        assert [(look.action, look.finished) for look in looks] == [("finish", True)]
        assert rec.markers == [(TOPIC, 1, s.producer_id, 0, False)]

    run(redis_url, body, grace_ms=300)


def test_idle_transactional_ids_expire(redis_url: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        c = tx[0]
        await c.init_producer_id("old", 60_000)
        s = await c.init_producer_id("busy", 60_000)
        await c.add_partitions("busy", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert sorted(await c.transactional_ids()) == ["busy", "old"]
        await asyncio.sleep(0.3)
        looks = {look.transactional_id: look.action for look in await complete_due(c, 2**52)}
        assert looks == {"old": "gone", "busy": ""}  # an open transaction never expires
        assert await c.describe("old") is None
        assert await c.transactional_ids() == ["busy"]

    run(redis_url, body, expiration_ms=100, grace_ms=50)


def test_a_registration_after_the_fence_is_aborted(redis_url: str) -> None:
    """AddPartitionsToTxn's partitions are registered after its script: when the transaction
    was fenced in between, the late registration is aborted, so the LSO cannot hang."""

    async def body(tx: list[Transactions], rec: Recorder) -> None:
        c = tx[0]
        s = await c.init_producer_id("race", 60_000)
        original = rec.add

        async def fenced_meanwhile(
            config: TopicConfig, p: int, pid: int, epoch: int, transaction: int = -1
        ) -> int:
            rec.add = original  # type: ignore[method-assign]
            assert (await c.init_producer_id("race", 60_000)).error == E.CONCURRENT_TRANSACTIONS
            return await original(config, p, pid, epoch, transaction)

        rec.add = fenced_meanwhile  # type: ignore[method-assign]
        await c.add_partitions("race", s.producer_id, s.epoch, [(TOPIC, 0)])
        assert rec.registered == {}
        assert rec.markers == [(TOPIC, 0, s.producer_id, 0, False)]

    run(redis_url, body)


@pytest.mark.parametrize("transactional_id", ["with space", "ünï", "a{b}c:d", "%"])
def test_any_transactional_id(redis_url: str, transactional_id: str) -> None:
    async def body(tx: list[Transactions], _r: Recorder) -> None:
        s = await tx[0].init_producer_id(transactional_id, 60_000)
        assert s.error == E.NONE
        state = await tx[0].describe(transactional_id)
        assert state is not None and state.transactional_id == transactional_id
        assert await tx[0].transactional_ids() == [transactional_id]

    run(redis_url, body)
