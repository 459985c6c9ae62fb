"""The transaction completer: whichever pod holds its lease (taken and renewed with the
replicator's lease script, as retention's) looks, every ``interval_ms``, at the transactional
ids whose time came in the index (``Keys.txn_index``) and runs ``txn_coord/tick.lua`` on each:

- an Ongoing transaction past its transaction.timeout.ms (its producer vanished) is fenced
  (epoch bumped, as Kafka's abortTimedOutTransactions) and aborted;
- a PrepareCommit / PrepareAbort older than the grace (its pod died mid-EndTxn) is finished:
  markers, group offsets, Complete*;
- an id unused for transactional.id.expiration.ms is deleted;
- partitions a pod that died inside AddPartitionsToTxn left registered (its registering
  entries) are released once their transaction is no longer the open one: an abort marker
  for exactly that transaction, so no stale registration holds a partition's LSO.

Then it sets the id's next look (``txn_coord/index_settle.lua``), unless a request moved it
meanwhile. No pod keeps a timer in memory that matters: a new owner finds everything due in
the index.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import anyio
from redis.asyncio import Redis

from mapping.connection import resilient, scripts
from mapping.core.codec import reply_pairs, to_str
from mapping.core.keys import TxnKeys, group_name
from mapping.replication.replicator import replicator_tick_call
from mapping.txn.transactions import Transactions

log = logging.getLogger(__name__)

# Due ids one run looks at at most (the rest at the next run, at once when this was full).
MAX_DUE_PER_RUN = 500

TXN_COORD_TICK = scripts.load("txn_coord/tick")
TXN_COORD_INDEX_SETTLE = scripts.load("txn_coord/index_settle")


def txn_coord_tick_call(keys: TxnKeys, grace_ms: int, expiration_ms: int) -> tuple:
    return TXN_COORD_TICK.command(
        [*keys.script_keys(), keys.registering], [grace_ms, expiration_ms]
    )


def txn_coord_index_settle_call(index: str, member: str, seen_score: float, next_ms: int) -> tuple:
    """``next_ms`` -1: the id is gone."""
    return TXN_COORD_INDEX_SETTLE.command([index], [member, repr(seen_score), next_ms])


@dataclass(frozen=True, slots=True)
class Look:
    transactional_id: str
    action: str  # '' (nothing due yet), 'finish' (aborted or finished), 'gone' (expired)
    finished: bool
    released: int = 0  # registrations a dead pod left, released (abort markers written)


async def complete_due(transactions: Transactions, now_ms: int | None = None) -> list[Look]:
    """One run over the ids due by ``now_ms`` (default: this pod's clock; the scripts decide
    with Redis' own)."""
    batcher, keys, settings = transactions.batcher, transactions.keys, transactions.settings
    now = int(time.time() * 1000) if now_ms is None else now_ms
    due = await batcher.call(
        "ZRANGEBYSCORE", keys.txn_index, "-inf", now, "WITHSCORES", "LIMIT", 0, MAX_DUE_PER_RUN
    )
    looks = []
    for raw_member, score in reply_pairs(due):
        member = to_str(raw_member)
        transactional_id = group_name(member)
        call = txn_coord_tick_call(
            keys.txn(transactional_id), settings.grace_ms, settings.expiration_ms
        )
        action, next_ms, *releases = await batcher.call(*call)
        action = to_str(action)
        finished = False
        if action == "finish":
            finished = await transactions.finish(transactional_id)
        released = await transactions.release(transactional_id, releases) if releases else 0
        await batcher.call(
            *txn_coord_index_settle_call(keys.txn_index, member, float(score), int(next_ms))
        )
        looks.append(Look(transactional_id, action, finished, released))
    return looks


class TransactionCompleter:
    """The pod's periodic completer run, by whichever pod holds the lease."""

    def __init__(
        self, transactions: Transactions, client: Redis, *, pod_id: str, interval_ms: int
    ) -> None:
        self.transactions = transactions
        self.client = client  # for the release at shutdown, when the batcher has stopped
        self.pod_id = pod_id
        self.interval_ms = interval_ms
        self.owner = False
        self.finished = 0  # transactions of dead pods this pod finished

    async def run(self) -> None:
        if self.interval_ms <= 0:
            return
        try:
            await resilient.every("transaction completer", self.tick, self.interval_ms / 1000)
        finally:
            if self.owner:
                await self._release()

    async def tick(self) -> None:
        owner = bool(await self.transactions.batcher.call(*self._lease_call(release=False)))
        if owner != self.owner:
            log.info("transaction completer: %s", "this pod" if owner else "another pod")
        self.owner = owner
        if not owner:
            return
        while True:
            looks = await complete_due(self.transactions)
            for look in looks:
                if look.action == "finish" and look.finished:
                    self.finished += 1
                    log.info("transaction %r finished by the completer", look.transactional_id)
                elif look.action == "gone":
                    log.debug("transactional id %r expired", look.transactional_id)
            if len(looks) < MAX_DUE_PER_RUN:
                return

    def _lease_call(self, release: bool) -> tuple:
        keys = self.transactions.keys.txn_lease
        return replicator_tick_call(keys, self.pod_id, max(3 * self.interval_ms, 1000), release)

    async def _release(self) -> None:
        """On a clean stop, give the lease back so another pod takes over at once."""
        try:
            with anyio.move_on_after(1.0, shield=True):
                await self.client.execute_command(*scripts.as_eval(self._lease_call(True)))
        except Exception as exc:
            log.debug("could not release the transaction completer's lease: %s", exc)
