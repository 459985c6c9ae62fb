"""Replication: acks=all waiting, Redis WAIT, and the pod's built-in replicator.

acks=all waiting never polls Redis. One pub/sub connection per pod (`Subscriber`) listens to
the hw channels of partitions that have waiters; every script that moves a partition's hw or
changes its ISR publishes ``"<hw> <isr_size> <next_change_ms>"`` there (see _partition.lua).
Waiters are kept in memory per partition, in a heap by offset, and are answered from the
notifications. Redis calls per partition, not per waiter:

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
import heapq
import itertools
import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.exceptions import RedisError

from mapping.batcher import Pending
from mapping.durable import DurableRounds
from mapping.errors import REPLICATION_TIMEOUT, UNKNOWN_TOPIC, BrokerError
from mapping.partitions import Partitions, PartitionStatus, ProduceResult
from mapping.pubsub import Subscriber
from mapping.replicator import Replicator
from mapping.topics import TopicConfig, Topics

log = logging.getLogger(__name__)


@dataclass
class _Waiters:
    """The acks=all waiters of one partition and what the pod knows of its state."""

    config: TopicConfig
    partition: int
    channel: str
    heap: list[tuple[int, int, asyncio.Future[int]]] = field(default_factory=list)
    live: int = 0
    activating: bool = False
    known: bool = False  # subscribed and hw/isr_size are current
    high_watermark: int = -1
    isr_size: int = 0
    recheck: asyncio.TimerHandle | None = None
    recheck_at: float = 0.0
    linger: asyncio.TimerHandle | None = None
    handler: Callable[[bytes], None] | None = None


class Replication:
    def __init__(
        self,
        client: Redis,
        topics: Topics,
        partitions: Partitions,
        *,
        acks_timeout_ms: int,
        run_replicator: bool,
        redis_wait_replicas: int = 0,
        lease_ms: int | None = None,
        shards: int = 16,
        linger_s: float = 30.0,
        pod_id: str | None = None,
    ) -> None:
        """``redis_wait_replicas``: acks=all also waits for Redis ``WAIT`` with this many
        Redis replicas (0: off), within what is left of the acks timeout.
        ``lease_ms``: the replicator's lease; default half of replica_lag_max_ms (at least
        200 ms), so a dead owner's followers are taken over before they leave the ISR."""
        self.client = client
        self.topics = topics
        self.partitions = partitions
        self.acks_timeout_ms = acks_timeout_ms
        self.run_replicator = run_replicator
        self.redis_wait_replicas = redis_wait_replicas
        self.linger_s = linger_s
        self.pod_id = pod_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.subscriber = Subscriber(client, partitions.keys.pod_channel(self.pod_id))
        self.subscriber.on_reconnect(self._recheck_all)
        # Deletions published while the connection was down are missed: forget every topic.
        self.subscriber.on_reconnect(topics.forget_all)
        self._waiters: dict[tuple[str, int], _Waiters] = {}
        self._order = itertools.count()
        # --redis-wait-replicas: acks, commits and readers wait for Redis WAIT rounds
        self.durable: DurableRounds | None = None
        if redis_wait_replicas > 0:
            self.durable = DurableRounds(client, partitions, redis_wait_replicas, acks_timeout_ms)
            partitions.durable = self.durable
        self.replicator = None
        if run_replicator:
            self.replicator = Replicator(
                client,
                topics,
                partitions,
                self.subscriber,
                pod_id=self.pod_id,
                lease_ms=lease_ms or max(200, partitions.replica_lag_max_ms // 2),
                shards=shards,
            )

    async def run(self) -> None:
        """Background work of this pod (notifications, replicator) until cancelled."""
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.subscriber.run())
            tasks.create_task(
                self.subscriber.subscribe(
                    self.topics.keys.topics_deleted_channel, self._on_topic_deleted
                )
            )
            tasks.create_task(
                self.subscriber.subscribe(
                    self.topics.keys.topics_changed_channel, self._on_topic_changed
                )
            )
            if self.replicator is not None:
                tasks.create_task(self.replicator.run())

    def _on_topic_deleted(self, data: bytes) -> None:
        """A topic was deleted (mapping/admin.py): every cache of it goes."""
        name = data.decode(errors="replace")
        self.topics.forget(name)
        if self.replicator is not None:
            self.replicator.forget(name)
        for w in [w for (topic, _), w in self._waiters.items() if topic == name]:
            self._drop_deleted(w)
        log.info("topic %s was deleted: forgotten", name)

    def _on_topic_changed(self, data: bytes) -> None:
        """A topic got more partitions (mapping/admin.py add_partitions): its settings are
        read again (acks=all waits on its existing partitions go on)."""
        name = data.decode(errors="replace")
        self.topics.forget(name)
        if self.replicator is not None:
            self.replicator.reread(name)
        log.info("topic %s changed: its settings are read again", name)

    # acks=all ------------------------------------------------------------------------------

    def start_ack(
        self, config: TopicConfig, partition: int, produced: Pending[ProduceResult]
    ) -> Pending[tuple[int, int]]:
        """acks=all for a queued append: its (offset, hw) once acknowledged. When the
        append's own reply shows hw past the record with a large enough ISR (always so with
        one replica), that is the answer, with no task and no wait; otherwise it waits as
        ``wait_for_ack`` does."""
        if config.replication_factor == 1 and self.redis_wait_replicas == 0:
            # the leader is the whole ISR: hw is the log end right after the append
            return produced.then(lambda result: (result.offsets[0], result.high_watermark))
        loop = asyncio.get_running_loop()
        acked: asyncio.Future[tuple[int, int]] = loop.create_future()

        def on_reply(_: asyncio.Future) -> None:
            try:
                result = produced.result()
            except Exception as exc:
                acked.set_exception(exc)
                return
            offset = result.offsets[0]
            if (
                result.high_watermark >= offset
                and result.isr_size >= config.min_insync_replicas
                and self.redis_wait_replicas == 0
            ):
                acked.set_result((offset, result.high_watermark))
                return
            waiting = asyncio.ensure_future(self.wait_for_ack(config, partition, offset))
            waiting.add_done_callback(lambda done: _copy(done, acked, offset))

        produced.future.add_done_callback(on_reply)
        return Pending(acked, lambda pair: pair)

    async def wait_for_ack(self, config: TopicConfig, partition: int, offset: int) -> int:
        """Wait until hw >= offset with |ISR| >= min ISR; return hw, or REPLICATION_TIMEOUT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.acks_timeout_ms / 1000
        high_watermark = await self._wait_high_watermark(config, partition, offset, deadline)
        if self.durable is not None:
            self.durable.note(config, partition)  # readers may see it once it is acked
            state = self.partitions.keys.partition(config.name, partition).state
            await self.durable.wait(deadline, state)
        return high_watermark

    def _satisfied(self, w: _Waiters, offset: int) -> bool:
        return w.high_watermark >= offset and w.isr_size >= w.config.min_insync_replicas

    async def _wait_high_watermark(
        self, config: TopicConfig, partition: int, offset: int, deadline: float
    ) -> int:
        key = (config.name, partition)
        w = self._waiters.get(key)
        if w is None:
            channel = self.partitions.keys.partition(config.name, partition).hw_channel
            w = self._waiters[key] = _Waiters(config, partition, channel)
        elif w.config != config:  # the topic was deleted and made anew meanwhile
            w.config = config
        if w.linger is not None:
            w.linger.cancel()
            w.linger = None
        if w.known and self._satisfied(w, offset):
            self._start_linger(w)
            return w.high_watermark
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(w.heap, (offset, next(self._order), future))
        w.live += 1
        if not w.known and not w.activating:
            w.activating = True
            asyncio.ensure_future(self._activate(w))
        try:
            timeout = max(0.0, deadline - asyncio.get_running_loop().time())
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise BrokerError(
                REPLICATION_TIMEOUT,
                f"hw did not reach offset {offset} with min ISR "
                f"{config.min_insync_replicas} within {self.acks_timeout_ms} ms",
            ) from None
        finally:
            w.live -= 1
            if w.live == 0:
                w.heap.clear()
                self._start_linger(w)

    async def _activate(self, w: _Waiters) -> None:
        """Subscribe to the partition's hw channel, then read its state once."""
        try:
            if w.handler is None:
                w.handler = lambda data: self._on_message(w, data)
            await self.subscriber.subscribe(w.channel, w.handler)
            status = await self.partitions.partition_status(w.config, w.partition)
            w.known = True
            self._apply(w, status.high_watermark, status.isr_size, status.next_change_ms)
        except BrokerError as exc:
            if exc.code == UNKNOWN_TOPIC:  # deleted after the append: no ack will come
                self._drop_deleted(w)
            else:
                log.warning("cannot watch %s/%d: %s", w.config.name, w.partition, exc)
        except (RedisError, OSError) as exc:
            log.warning("cannot watch %s/%d: %s", w.config.name, w.partition, exc)
        finally:
            w.activating = False

    def _on_message(self, w: _Waiters, data: bytes) -> None:
        parts = data.split()
        next_change = int(parts[2]) if len(parts) > 2 else -1
        self._apply(w, int(parts[0]), int(parts[1]), next_change)

    def _apply(self, w: _Waiters, high_watermark: int, isr_size: int, next_change: int) -> None:
        w.high_watermark = max(w.high_watermark, high_watermark)
        w.isr_size = isr_size
        if not w.known:
            return
        while w.heap:
            offset, _, future = w.heap[0]
            if future.done():
                heapq.heappop(w.heap)
            elif self._satisfied(w, offset):
                heapq.heappop(w.heap)
                future.set_result(w.high_watermark)
            else:
                break
        if w.heap and next_change >= 0:
            self._schedule_recheck(w, next_change / 1000)

    def _schedule_recheck(self, w: _Waiters, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        at = loop.time() + delay_s
        if w.recheck is not None and w.recheck_at <= at:
            return
        if w.recheck is not None:
            w.recheck.cancel()
        w.recheck_at = at
        w.recheck = loop.call_at(at, lambda: asyncio.ensure_future(self._recheck(w)))

    async def _recheck(self, w: _Waiters) -> None:
        w.recheck = None
        if not w.heap:
            return
        try:
            status: PartitionStatus = await self.partitions.partition_status(w.config, w.partition)
        except (BrokerError, RedisError, OSError) as exc:
            log.warning("cannot read %s/%d: %s", w.config.name, w.partition, exc)
            return
        self._apply(w, status.high_watermark, status.isr_size, status.next_change_ms)

    def _recheck_all(self) -> None:
        """After a pub/sub reconnect: notifications may have been missed."""
        for w in self._waiters.values():
            if w.known:
                asyncio.ensure_future(self._recheck(w))

    def _start_linger(self, w: _Waiters) -> None:
        if w.linger is None:
            w.linger = asyncio.get_running_loop().call_later(
                self.linger_s, lambda: asyncio.ensure_future(self._drop(w))
            )

    async def _drop(self, w: _Waiters) -> None:
        """No waiter for a while: stop listening to the partition."""
        w.linger = None
        key = (w.config.name, w.partition)
        if w.live or self._waiters.get(key) is not w or w.activating:
            return
        del self._waiters[key]
        if w.recheck is not None:
            w.recheck.cancel()
        await self.subscriber.unsubscribe(w.channel, w.handler)

    def _drop_deleted(self, w: _Waiters) -> None:
        """The partition's topic was deleted: its acks=all waiters get UNKNOWN_TOPIC now
        rather than REPLICATION_TIMEOUT later, and what the pod knew of it goes (a topic
        made anew starts from scratch)."""
        for _, _, future in w.heap:
            if not future.done():
                future.set_exception(BrokerError(UNKNOWN_TOPIC, "topic was deleted"))
        w.heap.clear()
        key = (w.config.name, w.partition)
        if self._waiters.get(key) is not w:
            return
        del self._waiters[key]
        for timer in (w.recheck, w.linger):
            if timer is not None:
                timer.cancel()
        asyncio.ensure_future(self.subscriber.unsubscribe(w.channel))


def _copy(done: asyncio.Future[int], acked: asyncio.Future[tuple[int, int]], offset: int) -> None:
    if done.cancelled():
        acked.cancel()
    elif done.exception() is not None:
        acked.set_exception(done.exception())  # type: ignore[arg-type]
    else:
        acked.set_result((offset, done.result()))
