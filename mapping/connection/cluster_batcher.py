"""The batcher of a pod on Redis Cluster: ``RedisBatcher`` with another way to send a batch.

Each primary gets its share of the batch as one pipeline on a connection of its node's
pool, all primaries at once; a slot's calls go in the order they were made, so a
partition's appends keep their order. A call through redis-py's ``execute_command`` costs
the pod several times a pipelined one (its routing, policies and metrics run per call):
with small batches, as many producers over many partitions make them, that was most of a
pod's CPU.

redis-py's own way, one ``execute_command`` per call (it follows MOVED and ASK, retries
TRYAGAIN and re-reads the slot map after a failure), is kept for what pipelines do not
handle: calls that a redirection answered (sent again in order, when no later call of their
slot ran), calls of a slot no node covers, and every call of the batches after a failure of
the cluster (a lost node, CLUSTERDOWN, a redirection) until one goes through without one,
so that redis-py recovers the topology as it does for its own calls. There, calls for
different slots run concurrently, at most ``max_concurrency`` at a time (half the client's
connections per node, so a batch of many slots never asks a node's pool for more
connections than it has: redis-py raises instead of waiting). Batching, combined PRODUCE
calls, NOSCRIPT reloads (SCRIPT LOAD reaches every primary) and script error codes are
``RedisBatcher``'s.

A failed call is answered by its kind (mapping/connection/redis_errors.py): not run, or outcome
unknown. In a pipeline a slot's later calls went with it, as on a single Redis (a node
refuses them alike: CLUSTERDOWN, MOVED). Through redis-py, once one of a slot's calls failed
so, the slot's later calls in the batch are not sent (answered "not run"): they keep their
order behind it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import AskError, RedisClusterException, RedisError, TryAgainError

from mapping.connection.batcher import PipelineFailed, RedisBatcher, ready, send_pipeline
from mapping.connection.redis_errors import classify, not_run
from mapping.core.errors import OutcomeUnknown, Unavailable
from mapping.core.resp import plain

log = logging.getLogger(__name__)

_SCRIPT_COMMANDS = {"EVALSHA", "EVAL", b"EVALSHA", b"EVAL"}


def slot_of(command: tuple) -> int:
    """The hash slot a command touches: its first key (EVALSHA sha numkeys key ...)."""
    key = command[3] if command[0] in _SCRIPT_COMMANDS and len(command) > 3 else command[1:2]
    if isinstance(key, tuple):  # keyless commands: any slot, one queue
        key = key[0] if key else b""
    return key_slot(key if isinstance(key, bytes) else str(key).encode())


class ClusterBatcher(RedisBatcher):
    def __init__(
        self, client: RedisCluster, max_concurrency: int | None = None, pipelines: bool = True
    ) -> None:
        """``pipelines`` False: every call through redis-py (bench.pod_cost's baseline)."""
        super().__init__(client)  # type: ignore[arg-type]
        if max_concurrency is None:
            # The rest of the pool: the pod's other calls on this client (leases, WAIT).
            pool = client.nodes_manager.connection_kwargs.get("max_connections") or 2
            max_concurrency = max(1, int(pool) // 2)
        self.max_concurrency = max_concurrency
        # pipelines need redis-py's cluster client (its slot map and node pools); after a
        # failure of the cluster, calls go one by one through redis-py until one batch
        # went through without one
        self._pipelines = pipelines and isinstance(client, RedisCluster)
        self._recovering = False

    @property
    def packs_commands(self) -> bool:
        return self._pipelines

    async def _send(self, commands: list[tuple]) -> list[Any]:
        replies: list[Any] = [None] * len(commands)
        if not self._pipelines or self._recovering:
            await self._send_calls(commands, range(len(commands)), replies)
            self._recovering = any(_failed(reply) for reply in replies)
            return replies
        nodes: dict[str, Any] = {}
        by_node: dict[str, list[int]] = {}
        uncovered: list[int] = []
        nodes_manager = self._client.nodes_manager
        for index, command in enumerate(commands):
            try:
                node = nodes_manager.get_node_from_slot(slot_of(command))
            except Exception:  # a slot no node covers: redis-py answers it
                uncovered.append(index)
                continue
            nodes[node.name] = node
            by_node.setdefault(node.name, []).append(index)
        await asyncio.gather(
            *(self._pipeline(nodes[name], indexes, commands, replies)
              for name, indexes in by_node.items())
        )  # fmt: skip
        again = sorted([*uncovered, *_redirected(commands, replies)])
        if again:
            await self._send_calls(commands, again, replies)
        self._recovering = any(_failed(reply) for reply in replies)
        return replies

    async def _pipeline(
        self, node: Any, indexes: list[int], commands: list[tuple], replies: list[Any]
    ) -> None:
        """``commands`` at ``indexes`` as one pipeline to ``node``; their replies (a failure
        by its kind) into ``replies``."""
        try:
            connection = node.acquire_connection()
        except Exception as exc:  # MaxConnectionsError: nothing sent
            _answer(replies, indexes, Unavailable(f"redis unavailable: {exc}"))
            return
        try:
            try:
                await ready(connection)
            except Exception as exc:  # refused, timed out, failed its handshake
                _answer(replies, indexes, Unavailable(f"redis unavailable: {exc}"))
                return
            sent = [commands[i] for i in indexes]
            try:
                got = await send_pipeline(connection, sent, self._client.response_callbacks)
            except PipelineFailed as failed:
                got = failed.replies
                _answer(replies, indexes[len(got) :], failed.error)
            for index, reply in zip(indexes, got, strict=False):
                replies[index] = reply
        finally:
            node.release(connection)

    async def _send_calls(
        self, commands: list[tuple], indexes: Iterable[int], replies: list[Any]
    ) -> None:
        """``commands`` at ``indexes`` one call each through redis-py, each slot's in order."""
        by_slot: dict[int, list[int]] = {}
        for index in indexes:
            by_slot.setdefault(slot_of(commands[index]), []).append(index)
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

    async def _call(self, command: tuple) -> Any:
        """One reply, or the error as a value (as a non-raising pipeline gives it), by kind
        (mapping/connection/redis_errors.py): ``Unavailable`` when Redis certainly did not run it
        (CLUSTERDOWN, TRYAGAIN, MOVED/ASK left over, LOADING, READONLY, MASTERDOWN, a slot
        no node covers, connecting failed), ``OutcomeUnknown`` when the connection broke
        or went silent after the command was written, else the error reply itself
        (NOSCRIPT: the batcher reloads; a script's code: ``_settle`` maps it)."""
        try:
            return await self._client.execute_command(*plain(command))
        except Exception as exc:
            if not isinstance(exc, (RedisError, RedisClusterException, OSError)):
                # a bug: one call fails, never the whole batch (gather would drop the rest)
                log.exception("redis cluster call failed")
                return OutcomeUnknown(f"redis error: {exc}")
            return classify(exc)


# Replies that say the call did not run and redis-py's own call would follow: MOVED, ASK
# (AskError covers MovedError) and TRYAGAIN.
_REDIRECTED = (AskError, TryAgainError)


def _redirected(commands: list[tuple], replies: list[Any]) -> list[int]:
    """The calls to send again through redis-py: from each slot's first redirected call on,
    when none of the slot's later calls ran (they were redirected too)."""
    by_slot: dict[int, list[int]] = {}
    for index, command in enumerate(commands):
        by_slot.setdefault(slot_of(command), []).append(index)
    again: list[int] = []
    for indexes in by_slot.values():
        first = next((n for n, i in enumerate(indexes) if isinstance(replies[i], _REDIRECTED)), -1)
        rest = indexes[first:] if first >= 0 else []
        if rest and all(isinstance(replies[i], _REDIRECTED) for i in rest):
            again += rest
    return again


def _failed(reply: Any) -> bool:
    """Whether a reply says the cluster failed it (not run, or a lost connection): then
    redis-py sends the next batches."""
    return isinstance(reply, Unavailable) or (isinstance(reply, BaseException) and not_run(reply))


def _answer(replies: list[Any], indexes: Iterable[int], error: Unavailable) -> None:
    for index in indexes:  # one exception each: raising shares its traceback
        replies[index] = type(error)(error.message)
