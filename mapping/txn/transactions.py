"""The Kafka transaction coordinator: a transactional id's state in Redis, changed only by the
``txn_coord/*`` scripts, as Kafka's TransactionCoordinator and TransactionMetadata (transactions
V1: one epoch per producer session, bumped by InitProducerId and by fencing).

Any pod coordinates any transaction. EndTxn first persists PrepareCommit / PrepareAbort, then
writes a marker into every partition of the transaction (``PartitionTxns.write_marker``) and
ends the transactional offsets of every group (``KafkaGroups.end_txn_offsets``), then
persists CompleteCommit / CompleteAbort. A pod that dies in between leaves a Prepare* that
whichever pod looks at it after ``grace_ms`` finishes: the completer (mapping/txn/txn_completer.py,
under a lease), or a retried EndTxn / InitProducerId. A pod whose Redis failed after the
outcome was persisted answers the EndTxn all the same (as Kafka answers once PrepareCommit is
written); the producer's next AddPartitionsToTxn / AddOffsetsToTxn, on any pod, finishes it at
once (nobody else is: the pod answered), then goes on. Markers are idempotent (a partition
writes one only while the producer's transaction is open there), so a second finisher adds
nothing; a claim (lib/txn_coord.lua ``claim_prepare``) keeps finishers from overlapping.

Every transactional id is in one index (``Keys.txn_index``) by when the completer looks at it
next: requests move that look earlier before they change the state (``txn_coord/index_touch.lua``,
in the same pipeline as the change), and never later once it is due, so a transaction whose
producer vanished, or whose pod died, is always looked at, however often its producer
retries; the completer sets the next look from the state it finds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from mapping.connection import scripts
from mapping.connection.batcher import RedisBatcher
from mapping.core.codec import to_str
from mapping.core.kafka_errors import (
    CONCURRENT_TRANSACTIONS,
    INVALID_TRANSACTION_TIMEOUT,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from mapping.core.keys import Keys, TxnKeys, group_name, group_part
from mapping.topic.topic_config import TopicConfig
from mapping.topic.topics import Topics
from mapping.txn.txn_state import (
    DEFAULT_GRACE_MS,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    InitResult,
    Participants,
    Registration,
    TxnSettings,
    TxnState,
    parse_registration,
    parse_state,
    partition_member,
)

log = logging.getLogger(__name__)

TXN_COORD_INIT = scripts.load("txn_coord/init")
TXN_COORD_ADD = scripts.load("txn_coord/add")
TXN_COORD_END = scripts.load("txn_coord/end")
TXN_COORD_COMPLETE = scripts.load("txn_coord/complete")
TXN_COORD_DESCRIBE = scripts.load("txn_coord/describe")
TXN_COORD_INDEX_TOUCH = scripts.load("txn_coord/index_touch")

ADD_PARTITIONS = "partitions"
ADD_GROUPS = "groups"
VERIFY = "verify"


def txn_coord_init_call(
    keys: TxnKeys, transactional_id: str, timeout_ms: int, new_producer_id: int,
    expected_producer_id: int, expected_epoch: int, grace_ms: int,
) -> tuple:  # fmt: skip
    args = [transactional_id, timeout_ms, new_producer_id, expected_producer_id, expected_epoch,
            grace_ms]  # fmt: skip
    return TXN_COORD_INIT.command(keys.script_keys(), args)


def txn_coord_add_call(
    keys: TxnKeys, producer_id: int, epoch: int, kind: str, members: Iterable[str],
    grace_ms: int = DEFAULT_GRACE_MS,
) -> tuple:  # fmt: skip
    """txn_coord/add.lua: ``kind`` ADD_PARTITIONS / ADD_GROUPS / VERIFY."""
    return TXN_COORD_ADD.command(
        [*keys.script_keys(), keys.registering], [producer_id, epoch, kind, grace_ms, *members]
    )


def txn_coord_end_call(
    keys: TxnKeys, producer_id: int, epoch: int, commit: bool, grace_ms: int
) -> tuple:
    return TXN_COORD_END.command(
        keys.script_keys(), [producer_id, epoch, "1" if commit else "0", grace_ms]
    )


def txn_coord_complete_call(keys: TxnKeys, producer_id: int, epoch: int, prepared: str) -> tuple:
    return TXN_COORD_COMPLETE.command(keys.script_keys(), [producer_id, epoch, prepared])


def txn_coord_describe_call(keys: TxnKeys) -> tuple:
    return TXN_COORD_DESCRIBE.command(keys.script_keys(), [])


def txn_coord_index_touch_call(
    index: str, transactional_id: str, due_in_ms: int, revisit_ms: int
) -> tuple:
    return TXN_COORD_INDEX_TOUCH.command(
        [index], [group_part(transactional_id), due_in_ms, revisit_ms]
    )


class Transactions:
    """The coordinator's operations, one per Kafka API; they answer Kafka error codes."""

    def __init__(
        self,
        batcher: RedisBatcher,
        keys: Keys,
        topics: Topics,
        new_producer_id: Callable[[], Awaitable[int]],
        settings: TxnSettings | None = None,
        participants: Participants | None = None,
    ) -> None:
        self.batcher = batcher
        self.keys = keys
        self.topics = topics
        self.new_producer_id = new_producer_id
        self.settings = settings or TxnSettings()
        self.participants = participants  # set once the pod's parts exist (adapter/pod.py)
        # told of every transaction this pod ends: (committed, reason) (adapter/metrics.py)
        self.on_end: Callable[[bool, str], None] | None = None

    def _touch(self, transactional_id: str) -> asyncio.Future:
        """The completer looks at the id within grace_ms (queued: sent with the change); a
        look already due stays due (revisit 0), however often the producer retries."""
        grace = self.settings.grace_ms
        return self.batcher.submit(
            *txn_coord_index_touch_call(self.keys.txn_index, transactional_id, grace, 0)
        )

    async def _changed(self, transactional_id: str, call: tuple) -> list:
        """Run a state-changing script, the index touched first in the same pipeline."""
        touched = self._touch(transactional_id)
        reply = self.batcher.submit(*call)
        await touched
        return await reply

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
        expected_epoch: int = -1,
    ) -> InitResult:  # fmt: skip
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return InitResult(INVALID_TRANSACTION_TIMEOUT)
        # a new id is taken always (64 bits: plenty); used only for a new or rotated session
        new_id = await self.new_producer_id()
        call = txn_coord_init_call(
            self.keys.txn(transactional_id), transactional_id, timeout_ms, new_id,
            expected_producer_id, expected_epoch, self.settings.grace_ms,
        )  # fmt: skip
        code, producer_id, epoch, action = await self._changed(transactional_id, call)
        if to_str(action) == "finish":  # an open transaction fenced, or a dead pod's
            await self._finish_quietly(transactional_id)
        return InitResult(int(code), int(producer_id), int(epoch))

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn: an error code per partition. Unknown partitions fail the whole
        request (the others OPERATION_NOT_ATTEMPTED), as Kafka's KafkaApis."""
        configs: dict[tuple[str, int], TopicConfig] = {}
        for topic, p in partitions:
            config = await self.topics.lookup(topic)
            if config is not None and 0 <= p < config.partitions:
                configs[(topic, p)] = config
        if len(configs) < len(partitions):
            return {
                tp: OPERATION_NOT_ATTEMPTED if tp in configs else UNKNOWN_TOPIC_OR_PARTITION
                for tp in partitions
            }
        members = [partition_member(t, p) for t, p in partitions]
        keys = self.keys.txn(transactional_id)
        call = txn_coord_add_call(
            keys, producer_id, epoch, ADD_PARTITIONS, members, self.settings.grace_ms
        )
        reply = await self._add(transactional_id, call)
        code, start = int(reply[0]), int(reply[1])
        if code != NONE:
            return dict.fromkeys(partitions, code)
        # Every partition asked for, also one added before (a retry after a pod died between
        # the script and the registration): registering is idempotent.
        participants = self._participants()
        codes = await asyncio.gather(
            *(participants.partition_txns.add(configs[tp], tp[1], producer_id, epoch, start)
              for tp in partitions)
        )  # fmt: skip
        result = {tp: int(c) for tp, c in zip(partitions, codes, strict=True)}
        await self._undo_late_registrations(keys, producer_id, epoch, start, configs)
        # verified: none of these is the completer's to release any more
        entries = [Registration(producer_id, epoch, start, t, p).entry for t, p in partitions]
        await self.batcher.call("ZREM", keys.registering, *entries)
        return result

    async def _undo_late_registrations(
        self, keys: TxnKeys, producer_id: int, epoch: int, start: int,
        configs: dict[tuple[str, int], TopicConfig],
    ) -> None:  # fmt: skip
        """The transaction may have been fenced or timed out (and its markers written)
        between the script and the partitions' registration: a registration made after its
        abort marker would hold the partition's LSO forever, so it is aborted here."""
        members = [partition_member(t, p) for t, p in configs]
        reply = await self.batcher.call(
            *txn_coord_add_call(keys, producer_id, epoch, VERIFY, members, self.settings.grace_ms)
        )
        code = int(reply[0])
        if code == NONE:
            late = [tp for tp, c in zip(configs, reply[3:], strict=True) if int(c) != NONE]
        elif code == CONCURRENT_TRANSACTIONS:
            late = []  # prepared with this epoch: the client itself is ending it
        else:
            late = list(configs)  # fenced, or the id is gone: every registration of ours
        if late:
            markers = self._participants().partition_txns
            await asyncio.gather(
                *(markers.write_marker(configs[tp], tp[1], producer_id, epoch, False, start)
                  for tp in late)
            )  # fmt: skip

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """KIP-890's verify-only AddPartitionsToTxn: NONE for a partition in the ongoing
        transaction, else TRANSACTION_ABORTABLE (or the transaction's error)."""
        members = [partition_member(t, p) for t, p in partitions]
        call = txn_coord_add_call(
            self.keys.txn(transactional_id), producer_id, epoch, VERIFY, members,
            self.settings.grace_ms,
        )  # fmt: skip
        reply = await self.batcher.call(*call)
        code = int(reply[0])
        if code != NONE:
            return dict.fromkeys(partitions, code)
        return {tp: int(c) for tp, c in zip(partitions, reply[3:], strict=True)}

    async def add_offsets(
        self, transactional_id: str, producer_id: int, epoch: int, group: str
    ) -> int:
        """AddOffsetsToTxn: the group's offsets committed with TxnOffsetCommit end with the
        transaction."""
        call = txn_coord_add_call(
            self.keys.txn(transactional_id), producer_id, epoch, ADD_GROUPS, [group_part(group)],
            self.settings.grace_ms,
        )  # fmt: skip
        reply = await self._add(transactional_id, call)
        return int(reply[0])

    async def _add(self, transactional_id: str, call: tuple) -> list:
        """txn_coord/add.lua; when it claimed the previous transaction, whose EndTxn was
        answered but whose finish Redis failed (markers or offsets written, Complete* not),
        that transaction is finished here first, then the add is asked again: the producer
        goes on instead of waiting on CONCURRENT_TRANSACTIONS for a finisher that is gone.
        A failure while finishing answers as Redis being out of reach (the client retries)."""
        reply = await self._changed(transactional_id, call)
        if len(reply) > 3 and to_str(reply[3]) == "finish":
            log.info("transaction %r: finishing the previous transaction, left half-ended",
                     transactional_id)  # fmt: skip
            await self.finish(transactional_id)
            reply = await self._changed(transactional_id, call)
        return reply

    async def end_txn(
        self, transactional_id: str, producer_id: int, epoch: int, commit: bool
    ) -> int:
        """EndTxn: NONE once the outcome is persisted (PrepareCommit / PrepareAbort); the
        markers are written before the answer, and when that fails the completer writes
        them."""
        keys = self.keys.txn(transactional_id)
        call = txn_coord_end_call(keys, producer_id, epoch, commit, self.settings.grace_ms)
        code, action = await self._changed(transactional_id, call)
        if to_str(action) == "finish":
            await self._finish_quietly(transactional_id)
        return int(code)

    async def describe(self, transactional_id: str) -> TxnState | None:
        reply = await self.batcher.call(*txn_coord_describe_call(self.keys.txn(transactional_id)))
        return parse_state(transactional_id, reply)

    async def transactional_ids(self) -> list[str]:
        """Every transactional id the coordinator knows (the index holds each)."""
        parts = await self.batcher.call("ZRANGE", self.keys.txn_index, 0, -1)
        return [group_name(p) for p in parts]

    async def finish(self, transactional_id: str) -> bool:
        """Write a prepared transaction's markers and group offsets, then complete it;
        False when it was not prepared (or another finisher completed it first)."""
        state = await self.describe(transactional_id)
        if state is None or state.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return False
        commit = state.state == PREPARE_COMMIT
        participants = self._participants()
        writes: list[Awaitable[object]] = []
        for topic, p in state.partitions:
            config = await self.topics.lookup(topic)
            if config is None or p >= config.partitions:
                continue  # the topic was deleted: nothing to mark
            writes.append(
                participants.partition_txns.write_marker(
                    config, p, state.producer_id, state.epoch, commit, state.txn_start_ms
                )
            )
        for group in state.groups:
            writes.append(
                participants.kafka_groups.end_txn_offsets(
                    group, state.producer_id, state.epoch, commit
                )
            )
        await asyncio.gather(*writes)
        call = txn_coord_complete_call(
            self.keys.txn(transactional_id), state.producer_id, state.epoch, state.state
        )
        completed = bool(int(await self.batcher.call(*call)))
        if completed:
            log.debug("transaction %r %s (%s)", transactional_id,
                      "committed" if commit else "aborted", state.end_reason)  # fmt: skip
            if self.on_end is not None:
                self.on_end(commit, state.end_reason or "client")
        return completed

    async def release(self, transactional_id: str, entries: Iterable[bytes | str]) -> int:
        """Release registrations a dead pod left (the completer's, txn_coord/tick.lua found
        their transaction no longer open): an abort marker for exactly that transaction on
        each partition (a no-op when the transaction's own marker ended it), then the entry
        goes. The number of registrations released."""
        keys = self.keys.txn(transactional_id)
        markers = self._participants().partition_txns
        released = 0
        for raw in entries:
            entry = to_str(raw)
            registration = parse_registration(entry)
            if registration is not None:
                config = await self.topics.lookup(registration.topic)
                if config is not None and registration.partition < config.partitions:
                    offset = await markers.write_marker(
                        config, registration.partition, registration.producer_id,
                        registration.epoch, False, registration.txn_start_ms,
                    )  # fmt: skip
                    if offset is not None:
                        released += 1
                        log.info(
                            "transaction %r: a dead pod's registration on %s-%d released",
                            transactional_id, registration.topic, registration.partition,
                        )  # fmt: skip
            await self.batcher.call("ZREM", keys.registering, entry)
        return released

    async def _finish_quietly(self, transactional_id: str) -> None:
        """Finish now; when Redis fails meanwhile the completer finishes it later (the
        outcome is persisted already)."""
        try:
            await self.finish(transactional_id)
        except Exception as exc:
            log.warning("transaction %r: finishing left to the completer: %s",
                        transactional_id, exc)  # fmt: skip

    def _participants(self) -> Participants:
        if self.participants is None:
            raise RuntimeError("the transaction coordinator has no participants")
        return self.participants
