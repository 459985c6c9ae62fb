"""A pod's parts in the command line's own process, on the deployment's Redis: the
operations that share their code with the pods (retention, compaction, partition growth,
transactions) run through them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from adapter.cli.options import RedisTarget
from adapter.pod import Pod, build_pod
from adapter.settings import Settings
from mapping.connection.client import connect
from mapping.core.codec import DEFAULT_SEQUENCE_BITS
from mapping.core.keys import Keys
from mapping.partition.partitions import Partitions

T = TypeVar("T")


def run_on_redis(target: RedisTarget, work: Callable[[Partitions], Awaitable[T]]) -> T:
    """Run ``work`` with the deployment's `Partitions` and their `Topics` (the batcher
    running meanwhile): the operations that share their code with the pods
    (mapping.operations.retention, mapping.group.deletion)."""
    return run_on_pod(target, lambda pod: work(pod.partitions))


def run_on_pod(
    target: RedisTarget,
    work: Callable[[Pod], Awaitable[T]],
    *,
    pubsub: bool = False,
    **settings: Any,
) -> T:
    """Run ``work`` with a pod's parts on the deployment (only its batcher running, and its
    pub/sub connection with ``pubsub``: ``work`` waits on notifications). ``settings``: more
    `Settings` fields (the key prefix and sequence bits are the deployment's)."""

    async def run() -> T:
        client = connect(target.url, **target.login)
        bits = await _stored_bits(client, target.keys)
        pod_settings = Settings(key_prefix=target.keys.prefix, sequence_bits=bits, **settings)
        pod = build_pod(pod_settings, client)  # its parts; only what is asked for runs
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pod.batcher.run)
                if pubsub:
                    tasks.start_soon(pod.subscriber.run)
                try:
                    return await work(pod)
                finally:
                    if pod.offsets_mirror is not None:  # what work mirrored, written
                        await pod.offsets_mirror.settle()
                    tasks.cancel_scope.cancel()
        finally:
            await client.aclose()

    return anyio.run(run)


async def _stored_bits(client: Any, keys: Keys) -> int:
    stored = await client.hget(keys.meta, "sequence_bits")
    return int(stored) if stored is not None else DEFAULT_SEQUENCE_BITS
