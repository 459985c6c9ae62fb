"""Serving a pod: its parts (adapter/pod.py) and their background work, client connections
accepted on both front doors (adapter/sockets.py; adapter/v1/connection.py and
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

from adapter import tls
from adapter.allocator import keep_freed_memory
from adapter.auth import Authenticator, users_in_redis
from adapter.backpressure import AppendBudget, Trimmer
from adapter.kerberos import KerberosAcceptor
from adapter.limits import ConnectionSlots
from adapter.oauth import BearerValidator
from adapter.pod import open_pod
from adapter.settings import Settings
from adapter.sockets import Draining, accept_all, listen, serve_socket, stop_on_sigterm
from adapter.v1.connection import Connection
from adapter.v1.handlers import Context
from adapter.v1.handlers.table import build_starters, build_table
from mapping.connection.cluster import LazySyncClient, redact

log = logging.getLogger(__name__)
# The cyclic GC's collection thresholds while serving (CPython's default: 700, 10, 10).
# CONSUME replies are thousands of small lists alive at once; with the default, collections
# of the older generations scanned them over and over and took most of the CPU (figures in
# docs/performance.md). The pod's data is
# acyclic; cycles (exception tracebacks) are still collected, a little later.
GC_THRESHOLDS = (100_000, 20, 20)


async def serve(settings: Settings, *, ready: anyio.Event | None = None) -> None:
    """Run one pod until cancelled. ``settings.redis_url`` must be set."""
    assert settings.redis_url is not None
    keep_freed_memory()
    # a keytab that cannot be used stops the pod before it opens anything
    kerberos = KerberosAcceptor.from_options(
        settings.kerberos_keytab,
        settings.kerberos_principal,
        settings.kerberos_principal_to_local_rules,
    )
    async with AsyncExitStack() as stack:
        pod = await stack.enter_async_context(open_pod(settings))
        context = Context(pod)
        table = build_table()
        draining = Draining()
        metrics = probes = None
        if settings.metrics_port:
            from adapter.metrics import Metrics
            from adapter.metrics_http import READY_TIMEOUT_S, Probes

            metrics = Metrics()
            table = metrics.instrument(table)
            context.starters = metrics.instrument_starters(build_starters())
            pod.batcher.on_flush = metrics.on_flush
            pod.retention.on_compacted = metrics.on_compacted
            metrics.connections.set_function(lambda: len(draining.connections))
            # each reader its own client, logged in like the pod's own
            timeout_s, login = settings.redis_timeout_ms / 1000, settings.redis_options()
            metrics.watch_deployment(
                LazySyncClient(settings.redis_url, timeout_s, **login),
                pod.keys,
                settings.session_timeout_ms,
            )
            metrics.watch_transactions(
                LazySyncClient(settings.redis_url, timeout_s, **login), pod.keys
            )
            pod.transactions.on_end = metrics.on_transaction_end
            pod.quotas.on_record = metrics.on_quota_record
            probes = Probes(
                asyncio.get_running_loop(),
                LazySyncClient(settings.redis_url, READY_TIMEOUT_S, **login),
            )
            metrics_host = settings.metrics_host or settings.host
            stack.callback(metrics.serve(settings.metrics_port, metrics_host, probes))
        # Startup's objects (modules, scripts, settings) are never scanned again.
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        listener = await listen(
            "V1",
            "--port",
            settings.host,
            settings.port,
            # --workers: every worker listens on the port; the kernel spreads connections.
            reuse_port=settings.workers > 1,
        )
        authenticator = Authenticator.from_options(
            settings.auth_file,
            users_in_redis(pod.batcher, pod.keys) if settings.auth_redis else None,
            users_in_redis(pod.batcher, pod.keys, pod.keys.users_scram)
            if settings.auth_redis
            else None,
            BearerValidator.from_options(
                settings.oauth_jwks,
                issuer=settings.oauth_issuer,
                audience=settings.oauth_audience,
                subject_claim=settings.oauth_subject_claim,
                clock_skew_s=settings.oauth_clock_skew_s,
            ),
            kerberos,
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
                pod, slots, draining, metrics, authenticator=authenticator, budget=budget
            )
            serving.append((kafka.listener, kafka.serve_socket))
            stack.callback(kafka.context.read_ahead.close)
        async with anyio.create_task_group() as background:
            background.start_soon(pod.run)
            if kafka is not None:
                background.start_soon(kafka.registry.run)
                # registered before it answers anyone, as a Kafka broker registers before it
                # serves (bounded: a Redis that cannot be reached does not keep it closed)
                with anyio.move_on_after(kafka.registry.ttl_ms / 3000):
                    await kafka.registry.first_refresh.wait()
            async with anyio.create_task_group() as connections:
                with anyio.CancelScope() as accepting, stop_on_sigterm(accepting):
                    if ready is not None:
                        ready.set()
                    if probes is not None:
                        probes.serving = True
                    await accept_all(serving, connections)
                if probes is not None:  # /readyz: 503 from now on
                    probes.draining = True
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
