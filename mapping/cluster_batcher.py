"""The batcher of a pod on Redis Cluster: ``RedisBatcher`` with another way to send a batch.

redis-py cannot queue EVALSHA in a cluster pipeline, so each call goes out with
``execute_command``, routed to the node owning its slot (every script's keys share one hash
tag). Calls for different slots run concurrently, at most ``max_concurrency`` at a time
(half the client's connections per node, so a batch of many slots never asks a node's pool
for more connections than it has: redis-py raises instead of waiting); calls for one slot
run one after another in the order they were made, so a partition's appends keep their
order. Batching, combined PRODUCE calls, NOSCRIPT reloads (SCRIPT LOAD reaches every
primary) and script error codes are ``RedisBatcher``'s.

A failed call is answered by its kind (mapping/redis_errors.py): not run, or outcome
unknown. Once one of a slot's calls failed so, the slot's later calls in the batch are not
sent (answered "not run"): they keep their order behind it, as a failed pipeline's calls do
on a single Redis.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError

from mapping.batcher import RedisBatcher
from mapping.errors import OutcomeUnknown, Unavailable
from mapping.redis_errors import classify

log = logging.getLogger(__name__)

_SCRIPT_COMMANDS = {"EVALSHA", "EVAL", b"EVALSHA", b"EVAL"}


def slot_of(command: tuple) -> int:
    """The hash slot a command touches: its first key (EVALSHA sha numkeys key ...)."""
    key = command[3] if command[0] in _SCRIPT_COMMANDS and len(command) > 3 else command[1:2]
    if isinstance(key, tuple):  # keyless commands: any slot, one queue
        key = key[0] if key else b""
    return key_slot(key if isinstance(key, bytes) else str(key).encode())


class ClusterBatcher(RedisBatcher):
    def __init__(self, client: RedisCluster, max_concurrency: int | None = None) -> None:
        super().__init__(client)  # type: ignore[arg-type]
        if max_concurrency is None:
            # The rest of the pool: the pod's other calls on this client (leases, WAIT).
            pool = client.nodes_manager.connection_kwargs.get("max_connections") or 2
            max_concurrency = max(1, int(pool) // 2)
        self.max_concurrency = max_concurrency

    async def _send(self, commands: list[tuple]) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        by_slot: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            by_slot.setdefault(slot_of(command), []).append(index)
        slots = iter(by_slot.values())

        async def send_slots_in_order() -> None:
            # Each sender takes the next slot's calls until none are left (one shared
            # iterator: taking one is not interrupted, asyncio switches only at awaits).
            for indexes in slots:
                failed: Unavailable | None = None
                for index in indexes:
                    if failed is not None:
                        # Not sent: a later call must not run where an earlier one of its
                        # slot did not (a retried append would land out of order), and a
                        # dead node is not waited on once per call.
                        replies[index] = Unavailable(f"not sent after {failed.message}")
                        continue
                    reply = replies[index] = await self._call(commands[index])
                    if isinstance(reply, Unavailable):  # OutcomeUnknown included
                        failed = reply

        senders = min(self.max_concurrency, len(by_slot))
        await asyncio.gather(*(send_slots_in_order() for _ in range(senders)))
        return replies

    async def _call(self, command: tuple) -> Any:
        """One reply, or the error as a value (as a non-raising pipeline gives it), by kind
        (mapping/redis_errors.py): ``Unavailable`` when Redis certainly did not run it
        (CLUSTERDOWN, TRYAGAIN, MOVED/ASK left over, LOADING, READONLY, MASTERDOWN, a slot
        no node covers, connecting failed), ``OutcomeUnknown`` when the connection broke
        or went silent after the command was written, else the error reply itself
        (NOSCRIPT: the batcher reloads; a script's code: ``_settle`` maps it)."""
        try:
            return await self._client.execute_command(*command)
        except Exception as exc:
            if not isinstance(exc, (RedisError, RedisClusterException, OSError)):
                # a bug: one call fails, never the whole batch (gather would drop the rest)
                log.exception("redis cluster call failed")
                return OutcomeUnknown(f"redis error: {exc}")
            return classify(exc)
