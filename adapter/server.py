"""The pod: connects to Redis, runs the batcher, the replicator and retention, accepts client
connections on both front doors (adapter/sockets.py; adapter/v1/connection.py and
adapter/kafka/connection.py answer them) and drains them on SIGTERM.

A bad request gets an error reply; a handler bug or a client reset closes only that
connection; Redis trouble is an UNAVAILABLE reply, never a dead pod.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from contextlib import AsyncExitStack
from functools import partial

import anyio
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter import tls
from adapter.auth import Authenticator, users_in_redis
from adapter.backpressure import AppendBudget, Trimmer
from adapter.limits import ConnectionSlots
from adapter.settings import Settings
from adapter.sockets import Draining, accept_all, serve_socket, stop_on_sigterm
from adapter.v1.connection import Connection
from adapter.v1.handlers import Context
from adapter.v1.handlers.table import build_starters, build_table
from mapping.client import connect, make_batcher
from mapping.cluster import redact
from mapping.errors import ConfigurationError
from mapping.groups import Groups
from mapping.keys import Keys
from mapping.partitions import Partitions
from mapping.pubsub import Subscriber
from mapping.replication import Replication, new_pod_id
from mapping.retention import RetentionTask
from mapping.startup import check_redis
from mapping.topics import Topics

log = logging.getLogger(__name__)
# The cyclic GC's collection thresholds while serving (CPython's default: 700, 10, 10).
# CONSUME replies are thousands of small lists alive at once; with the default, collections
# of the older generations scanned them over and over and took most of the CPU (figures in
# the README's Performance section). The pod's data is
# acyclic; cycles (exception tracebacks) are still collected, a little later.
GC_THRESHOLDS = (100_000, 20, 20)


async def wait_for_redis(settings: Settings, keys: Keys, client: Redis) -> None:
    """Run the startup checks (mapping/startup.py), retrying while Redis is still coming up."""
    deadline = anyio.current_time() + settings.redis_startup_timeout_s
    redis_at = redact(settings.redis_url or "")  # never log a password
    while True:
        try:
            await check_redis(
                client,
                keys,
                sequence_bits=settings.sequence_bits,
                require_aof=settings.require_aof,
                url=redis_at,
                allow_evicting=settings.allow_evicting_redis,
            )
            return
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            error = exc
        if anyio.current_time() > deadline:
            raise ConfigurationError(
                f"cannot reach Redis at {redis_at} within "
                f"{settings.redis_startup_timeout_s:g}s: {error}"
            )
        log.warning("waiting for Redis at %s: %s", redis_at, error)
        await anyio.sleep(0.5)


async def serve(settings: Settings, *, ready: anyio.Event | None = None) -> None:
    """Run one pod until cancelled. ``settings.redis_url`` must be set."""
    assert settings.redis_url is not None
    keys = Keys(settings.key_prefix)
    async with AsyncExitStack() as stack:
        client = connect(
            settings.redis_url, settings.redis_timeout_ms / 1000, **settings.redis_options()
        )
        stack.push_async_callback(client.aclose)
        await wait_for_redis(settings, keys, client)
        batcher = make_batcher(client)
        topics = Topics(
            batcher,
            keys,
            topic_defaults=settings.topic_defaults,
            auto_create_topics=settings.auto_create_topics,
            max_topics=settings.max_topics,
            topic_cache_size=settings.topic_cache_size,
        )
        partitions = Partitions(
            batcher,
            keys,
            topics,
            sequence_bits=settings.sequence_bits,
            replica_lag_max_ms=settings.replica_lag_max_ms,
        )
        pod_id = new_pod_id()
        context = Context(
            settings,
            topics,
            partitions,
            groups=Groups(batcher, keys, session_timeout_ms=settings.session_timeout_ms),
            replication=Replication(
                client,
                topics,
                partitions,
                Subscriber(client, keys.pod_channel(pod_id)),
                pod_id=pod_id,
                acks_timeout_ms=settings.acks_timeout_ms,
                run_replicator=settings.replicator,
                redis_wait_replicas=settings.redis_wait_replicas,
            ),
        )
        table = build_table()
        draining = Draining()
        metrics = None
        if settings.metrics_port:
            from adapter.metrics import Metrics

            metrics = Metrics()
            table = metrics.instrument(table)
            context.starters = metrics.instrument_starters(build_starters())
            batcher.on_flush = metrics.on_flush
            metrics.connections.set_function(lambda: len(draining.connections))
            metrics.watch_lag(
                settings.redis_url,
                keys,
                settings.redis_timeout_ms / 1000,
                **settings.redis_options(),
            )
            stack.callback(metrics.serve(settings.metrics_port, settings.metrics_host))
        # Startup's objects (modules, scripts, settings) are never scanned again.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        listener = await anyio.create_tcp_listener(
            local_host=settings.host,
            local_port=settings.port,
            # --workers: every worker listens on the port; the kernel spreads connections.
            reuse_port=settings.workers > 1,
        )
        authenticator = Authenticator.from_options(
            settings.auth_file,
            users_in_redis(batcher, keys) if settings.auth_redis else None,
            users_in_redis(batcher, keys, keys.users_scram) if settings.auth_redis else None,
        )
        slots = ConnectionSlots(settings.max_connections)
        # one budget for both front doors: they share the pod's memory and its pipeline
        budget = AppendBudget(settings.max_append_bytes, settings.max_connection_append_bytes)
        trimmer = Trimmer(asyncio.get_running_loop(), budget)
        stack.callback(trimmer.close)
        if metrics is not None:
            metrics.append_bytes.set_function(lambda: budget.in_flight)
            metrics.waiting.set_function(lambda: len(budget.waiting))
        new_connection = partial(
            Connection, context, table, slots=slots, authenticator=authenticator, budget=budget
        )
        connection = partial(serve_socket, new_connection, draining, tls.listener_context(settings))
        redis_at = redact(settings.redis_url)
        log.info("serving V1 on %s:%d, Redis %s", settings.host, settings.port, redis_at)
        serving = [(listener, connection)]
        kafka = None
        if settings.kafka:
            from adapter.kafka.listener import KafkaListener

            kafka = await KafkaListener.open(
                settings, context, slots, draining, metrics, authenticator=authenticator,
                budget=budget,
            )  # fmt: skip
            serving.append((kafka.listener, kafka.serve_socket))
        async with anyio.create_task_group() as background:
            background.start_soon(batcher.run)
            background.start_soon(context.replication.run)
            if kafka is not None:
                background.start_soon(kafka.registry.run)
            background.start_soon(
                RetentionTask(
                    partitions,
                    client,
                    pod_id=context.replication.pod_id,
                    interval_ms=settings.retention_interval_ms,
                    offsets_retention_ms=settings.offsets_retention_ms,
                    session_timeout_ms=settings.session_timeout_ms,
                ).run
            )
            async with anyio.create_task_group() as connections:
                with anyio.CancelScope() as accepting, stop_on_sigterm(accepting):
                    if ready is not None:
                        ready.set()
                    await accept_all(serving, connections)
                # SIGTERM: stop accepting, answer what was read, then stop. Connections the
                # kernel already completed (in the listen backlog) are taken and drained
                # too: closing the listener would reset them with their requests unread.
                with anyio.move_on_after(0.05):
                    await accept_all(serving, connections)
                for one, _ in serving:
                    await one.aclose()
                if kafka is not None:
                    await kafka.registry.unregister()
                log.info("SIGTERM: draining %d connection(s)", len(draining.connections))
                draining.stop()
                connections.cancel_scope.deadline = (
                    anyio.current_time() + settings.shutdown_timeout_ms / 1000
                )
            background.cancel_scope.cancel()
        log.info("stopped serving on %s:%d", settings.host, settings.port)
