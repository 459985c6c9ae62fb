"""acks=all, decided once for both front doors: ``Acks.await_ack`` waits until a record is
acknowledged and says how the wait ended (an ``Ack``); V1 (adapter/v1/handlers/acks.py) and
Kafka (adapter/kafka/produce.py) each map that to their own codes in one table.

A record is acknowledged once its partition's hw reached it while the ISR holds at least
min.insync.replicas, and, with --redis-wait-replicas, once a Redis WAIT round
(mapping/replication/durable.py)
that started after that reached the Redis replicas.

The hw wait never polls Redis: it is a kind of wait of mapping/connection/waits.py on the
partition's hw
channel, where every script that moves the hw or changes the ISR publishes
``"<hw> <isr_size> <next_change_ms>"`` (see lib/partition.lua). Redis calls are per partition,
not per waiter:

- first waiter of a partition: SUBSCRIBE, and once confirmed one status call (closes the race
  between the produce and the subscription); the subscription then lingers (``linger_s``) so a
  steady stream of acks=all producers costs nothing more;
- while a lagging follower is still counted in the ISR, one status call when it is due to
  drop out (``next_change_ms``), since time alone changes the ISR and nothing publishes then.

So a thousand concurrent acks=all producers cost their PRODUCE calls (pipelined) plus a few
calls per partition, whatever their number.
"""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mapping.connection.pubsub import Subscriber
from mapping.connection.waits import Channel, Dropped, Waits
from mapping.core.errors import UNKNOWN_TOPIC, BrokerError
from mapping.partition.partitions import Partitions
from mapping.topic.topic_config import TopicConfig

if TYPE_CHECKING:
    from mapping.replication.durable import DurableRounds


class AckOutcome(enum.Enum):
    ACKED = "acked"
    # The timeout passed with hw short of the record (the record stays in the log).
    HW_SHORT = "hw short"
    # hw reached the record, but no Redis WAIT round reached the Redis replicas in time.
    NOT_DURABLE = "not durable"
    # One of the two above, and the ISR read then is below min.insync.replicas (only when
    # the caller asked for that read).
    ISR_TOO_SMALL = "isr too small"
    # One of the two above, and the ISR could not be read (the caller asked for it).
    REPLICATION_UNKNOWN = "replication unknown"
    # The topic was deleted while its record waited: no ack will come.
    TOPIC_DELETED = "topic deleted"


@dataclass(frozen=True, slots=True)
class Ack:
    """How an acks=all wait ended: ``high_watermark`` when acked, else a ``detail`` saying why
    not (V1 sends it with its error code)."""

    outcome: AckOutcome
    high_watermark: int = -1
    detail: str = ""


class PartitionAcks(Channel):
    """The acks=all kind of wait on one partition's hw channel: its level is the partition's
    hw while the ISR holds min.insync.replicas, -1 otherwise."""

    def __init__(self, partitions: Partitions, partition: int, name: str) -> None:
        super().__init__(name)
        self.partitions = partitions
        self.partition = partition
        self.config: TopicConfig | None = None  # set by each waiter (``configure``)
        self.high_watermark = -1
        self.isr_size = 0
        self.level = -1

    def configure(self, config: TopicConfig) -> None:
        """The topic's settings, as the waiter knows them (a topic deleted and made anew under
        the same name meanwhile has new ones)."""
        if config != self.config:
            self.config = config
            self.level = self._level()

    def on_message(self, message: bytes) -> None:
        parts = message.split()
        next_change = int(parts[2]) if len(parts) > 2 else -1
        self._apply(int(parts[0]), int(parts[1]), next_change)

    async def read(self) -> None:
        assert self.config is not None
        try:
            status = await self.partitions.partition_status(self.config, self.partition)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC and not self.known:
                self.drop()  # deleted after the append: no ack will come
                return
            raise
        self._apply(status.high_watermark, status.isr_size, status.next_change_ms)

    def missed(self) -> None:
        if self.known:
            self.recheck_in(0)

    def _level(self) -> int:
        assert self.config is not None
        return self.high_watermark if self.isr_size >= self.config.min_insync_replicas else -1

    def _apply(self, high_watermark: int, isr_size: int, next_change_ms: int) -> None:
        self.high_watermark = max(self.high_watermark, high_watermark)
        self.isr_size = isr_size
        self.advance(self._level())
        if self.watched and next_change_ms >= 0:
            # a lagging follower drops out of the ISR then: nothing publishes that
            self.recheck_in(next_change_ms / 1000)


class Acks:
    """The pod's acks=all waits (and --redis-wait-replicas waits, through ``durable``)."""

    def __init__(
        self,
        partitions: Partitions,
        subscriber: Subscriber,
        *,
        timeout_ms: int,
        durable: DurableRounds | None = None,
        linger_s: float = 30.0,
    ) -> None:
        """``timeout_ms``: the longest an ack is waited for (the pod's acks timeout)."""
        self.partitions = partitions
        self.timeout_ms = timeout_ms
        self._durable = durable
        self.waits: Waits[tuple[str, int], PartitionAcks] = Waits(
            subscriber, self._partition_acks, linger_s=linger_s
        )

    def _partition_acks(self, key: tuple[str, int]) -> PartitionAcks:
        return PartitionAcks(
            self.partitions, key[1], self.partitions.keys.partition(*key).hw_channel
        )

    @property
    def waits_for_redis_replicas(self) -> bool:
        """Whether acks, commits and group states wait for Redis WAIT rounds."""
        return self._durable is not None

    def acked_on_append(self, config: TopicConfig) -> bool:
        """Whether every append to the topic acknowledges itself: the leader is the whole
        ISR (hw is the log end right after the append), and no Redis WAIT."""
        return config.replication_factor == 1 and self._durable is None

    def acked_by_reply(
        self, config: TopicConfig, offset: int, high_watermark: int, isr_size: int
    ) -> bool:
        """Whether an append's own reply (its hw and ISR size) acknowledges ``offset``."""
        return (
            self._durable is None
            and high_watermark >= offset
            and isr_size >= config.min_insync_replicas
        )

    async def await_ack(
        self,
        config: TopicConfig,
        partition: int,
        offset: int,
        *,
        timeout_ms: int | None = None,
        read_isr: bool = False,
    ) -> Ack:
        """Wait until ``offset`` is acknowledged, at most ``timeout_ms`` (at most the pod's
        acks timeout). ``read_isr``: one status call after a timeout, so the outcome says
        whether the ISR was too small then."""
        loop = asyncio.get_running_loop()
        timeout_ms = self.timeout_ms if timeout_ms is None else min(timeout_ms, self.timeout_ms)
        deadline = loop.time() + timeout_ms / 1000
        with self.waits.watch((config.name, partition)) as watch:
            watch.channel.configure(config)
            try:
                high_watermark = await watch.until(offset, deadline - loop.time())
            except Dropped:
                return Ack(AckOutcome.TOPIC_DELETED, detail="topic was deleted")
        if high_watermark is None:
            ack = Ack(
                AckOutcome.HW_SHORT,
                detail=f"hw did not reach offset {offset} with min ISR "
                f"{config.min_insync_replicas} within {timeout_ms} ms",
            )
        elif self._durable is not None:
            self._durable.note(config, partition)  # readers may see it once it is acked
            state = self.partitions.keys.partition(config.name, partition).state
            short = await self._durable.wait(deadline, state)
            ack = Ack(
                AckOutcome.ACKED if short is None else AckOutcome.NOT_DURABLE,
                high_watermark,
                short or "",
            )
        else:
            return Ack(AckOutcome.ACKED, high_watermark)
        if read_isr and ack.outcome is not AckOutcome.ACKED:
            return await self._with_isr(config, partition, ack)
        return ack

    async def _with_isr(self, config: TopicConfig, partition: int, ack: Ack) -> Ack:
        try:
            status = await self.partitions.partition_status(config, partition)
        except BrokerError:
            return Ack(AckOutcome.REPLICATION_UNKNOWN, detail=ack.detail)
        if status.isr_size < config.min_insync_replicas:
            return Ack(AckOutcome.ISR_TOO_SMALL, detail=ack.detail)
        return ack

    async def await_durable(self) -> Ack:
        """--redis-wait-replicas: ACKED once a WAIT round that started after this call
        reached the Redis replicas (every write this pod made before the call is on them),
        else NOT_DURABLE. ACKED at once, with no call, without the flag."""
        if self._durable is None:
            return Ack(AckOutcome.ACKED)
        deadline = asyncio.get_running_loop().time() + self.timeout_ms / 1000
        short = await self._durable.wait(deadline)
        return Ack(AckOutcome.ACKED) if short is None else Ack(AckOutcome.NOT_DURABLE, detail=short)

    def forget_topic(self, name: str) -> None:
        """The topic was deleted: its waiters end (TOPIC_DELETED) and what the pod knew of
        its partitions goes (a topic made anew starts from scratch)."""
        self.waits.drop(lambda key: key[0] == name)
