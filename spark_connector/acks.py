"""acks=all for the sink: wait until the high watermark reaches a task's records, as V1.

Runs in a Spark task with a synchronous client. Never polls: it subscribes to the
partitions' hw channels (every script that moves a hw or changes an ISR publishes
``"<hw> <isr_size> <next_change_ms>"`` there, see lib/partition.lua), reads each status once
after subscribing, then re-reads a status only when a due ISR change says so (time alone
changes the ISR and nothing publishes then).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import redis

from mapping.core import codec
from mapping.core.errors import REPLICATION_TIMEOUT
from mapping.core.keys import Keys
from mapping.partition.partition_scripts import PartitionHead, partition_status_call
from mapping.topic.topic_config import TopicConfig
from spark_connector.sink_options import SinkOptions, SinkWriteError


def _status(
    client: redis.Redis, keys: Keys, opts: SinkOptions, config: TopicConfig, partition: int
) -> tuple[int, int, int]:
    """(hw, ISR size, ms until the ISR may change or -1) of a partition right now."""
    head = PartitionHead(
        keys.partition(config.name, partition),
        # the sequence bits are not read by this script: no offset <-> id here
        codec.DEFAULT_SEQUENCE_BITS,
        config.replication_factor,
        opts.replica_lag_max_ms,
    )
    reply = client.execute_command(*partition_status_call(head))
    return int(reply[0]), int(reply[1]), int(reply[2])


def wait_for_acks(
    client: redis.Redis,
    keys: Keys,
    opts: SinkOptions,
    targets: Iterable[tuple[TopicConfig, int, int]],
) -> None:
    """Block until every partition's hw reaches its last offset with |ISR| >= min ISR, as
    V1 acks=all; raise ``SinkWriteError`` (REPLICATION_TIMEOUT) after ``acks.timeoutMs``."""
    waiting = {
        (config.name, partition): (config, partition, offset)
        for config, partition, offset in targets
        if offset >= 0
    }
    if not waiting:
        return
    deadline = time.monotonic() + opts.acks_timeout_ms / 1000
    channels = {keys.partition(name, p).hw_channel.encode(): (name, p) for name, p in waiting}
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(*channels)
        recheck_at: dict[tuple[str, int], float] = {}

        def check(key: tuple[str, int], hw: int, isr_size: int, next_change_ms: int) -> None:
            config, _, offset = waiting[key]
            if hw >= offset and isr_size >= config.min_insync_replicas:
                del waiting[key]
                recheck_at.pop(key, None)
            elif next_change_ms >= 0:
                # A lagging follower drops out of the ISR then; nothing publishes that.
                recheck_at[key] = time.monotonic() + next_change_ms / 1000

        # Subscribed first, then read: no notification can fall in between.
        for key, (config, partition, _) in list(waiting.items()):
            check(key, *_status(client, keys, opts, config, partition))
        while waiting:
            now = time.monotonic()
            for key in [k for k, at in recheck_at.items() if at <= now]:
                config, partition, _ = waiting[key]
                check(key, *_status(client, keys, opts, config, partition))
            if not waiting:
                break
            if now >= deadline:
                late = ", ".join(f"{n}/{p} (offset {waiting[(n, p)][2]})" for n, p in waiting)
                raise SinkWriteError(
                    f"{REPLICATION_TIMEOUT}: hw did not reach the written records with min "
                    f"ISR within {opts.acks_timeout_ms} ms (acks=all) on {late}; the "
                    f"records stay in the log"
                )
            wake = min([deadline, *recheck_at.values()])
            message = pubsub.get_message(timeout=max(0.0, wake - now))
            if message is None or message.get("type") != "message":
                continue
            key = channels.get(message["channel"])
            if key in waiting:
                parts = message["data"].split()
                next_change = int(parts[2]) if len(parts) > 2 else -1
                check(key, int(parts[0]), int(parts[1]), next_change)
    finally:
        pubsub.close()
