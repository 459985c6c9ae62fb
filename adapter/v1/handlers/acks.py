"""acks=all and --redis-wait-replicas waits (mapping/replication/acks.py) as V1 answers them."""

from __future__ import annotations

import asyncio

from mapping.connection.batcher import Pending
from mapping.core.errors import REPLICATION_TIMEOUT, UNKNOWN_TOPIC, BrokerError
from mapping.partition.partition_scripts import ProduceResult
from mapping.replication.acks import Ack, AckOutcome, Acks
from mapping.topic.topic_config import TopicConfig

# How an ack wait that did not end ACKED is answered: the record (or commit) stays in Redis.
# V1 never asks for the ISR read (one code for every timeout): ISR_TOO_SMALL and
# REPLICATION_UNKNOWN do not come up, named all the same so that the table is whole.
ERROR_CODES: dict[AckOutcome, str] = {
    AckOutcome.HW_SHORT: REPLICATION_TIMEOUT,
    AckOutcome.NOT_DURABLE: REPLICATION_TIMEOUT,
    AckOutcome.ISR_TOO_SMALL: REPLICATION_TIMEOUT,
    AckOutcome.REPLICATION_UNKNOWN: REPLICATION_TIMEOUT,
    AckOutcome.TOPIC_DELETED: UNKNOWN_TOPIC,
}


def check(ack: Ack) -> None:
    """Nothing when ``ack`` is ACKED; else the BrokerError V1 answers with."""
    if ack.outcome is not AckOutcome.ACKED:
        raise BrokerError(ERROR_CODES[ack.outcome], ack.detail)


async def durable_wait(acks: Acks) -> None:
    """--redis-wait-replicas: return once a WAIT round reached the Redis replicas (so the
    group state and commits this pod wrote are on them); REPLICATION_TIMEOUT otherwise.
    Nothing at all without the flag."""
    check(await acks.await_durable())


def start_ack(
    acks: Acks, config: TopicConfig, partition: int, produced: Pending[ProduceResult]
) -> Pending[tuple[int, int]]:
    """acks=all for a queued append: its (offset, hw) once acknowledged. When the append's
    own reply acknowledges it (always so with one replica), that is the answer, with no
    task and no wait; otherwise it waits in ``Acks.await_ack``."""
    if acks.acked_on_append(config):
        return produced.then(lambda result: (result.offsets[0], result.high_watermark))
    acked: asyncio.Future[tuple[int, Ack]] = asyncio.get_running_loop().create_future()

    def on_reply(_: asyncio.Future) -> None:
        try:
            result = produced.result()
        except Exception as exc:
            acked.set_exception(exc)
            return
        offset = result.offsets[0]
        if acks.acked_by_reply(config, offset, result.high_watermark, result.isr_size):
            acked.set_result((offset, Ack(AckOutcome.ACKED, result.high_watermark)))
            return
        waiting = asyncio.ensure_future(acks.await_ack(config, partition, offset))
        waiting.add_done_callback(lambda done: _copy(done, acked, offset))

    produced.future.add_done_callback(on_reply)
    return Pending(acked, _answer)


def _answer(acked: tuple[int, Ack]) -> tuple[int, int]:
    offset, ack = acked
    check(ack)
    return offset, ack.high_watermark


def _copy(done: asyncio.Future[Ack], acked: asyncio.Future[tuple[int, Ack]], offset: int) -> None:
    if done.cancelled():
        acked.cancel()
    elif done.exception() is not None:
        acked.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        acked.set_result((offset, done.result()))
