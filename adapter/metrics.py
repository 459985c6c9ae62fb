"""Prometheus metrics of a pod (``--metrics-port``), from prometheus-client.

Requests, errors and latency by command are counted by wrapping each handler of the command
table once at start-up (with metrics off the table is untouched: no cost at all). Redis
round trips and batch sizes come from the batcher's ``on_flush`` hook, the client quotas'
bytes and throttle times from the quota manager's ``on_record`` (only entities that have a
quota are measured, so only they get labels). Consumer lag and the
partitions' offsets (adapter/deployment_metrics.py) and open transactions are read when
Prometheus scrapes, with a synchronous Redis client in the scrape thread. The process's own
(``process_*``, ``python_gc_*``, ``python_info``) are prometheus-client's collectors. The HTTP
endpoint, with the health probes, is adapter/metrics_http.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from adapter import metrics_http
from adapter.deployment_metrics import DeploymentCollector
from adapter.metrics_http import Probes
from adapter.sockets import ListenError
from adapter.v1.handlers import Context, Handler, Starter
from mapping.connection.batcher import Pending
from mapping.connection.cluster import LazySyncClient
from mapping.core.errors import BrokerError
from mapping.core.keys import Keys
from mapping.partition.compaction import CompactionResult
from mapping.security.quotas import REQUEST_PERCENTAGE
from mapping.txn.txn_inspection import open_counts, transaction_states

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # the standard process_*, python_info and python_gc_* families
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.requests = Counter(
            "adapter_requests", "V1 requests answered, by command", ["command"], registry=r
        )
        self.errors = Counter(
            "adapter_errors", "V1 error replies, by command and code", ["command", "code"],
            registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "adapter_request_seconds", "Time to answer a request, by command", ["command"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.round_trips = Counter(
            "adapter_redis_round_trips", "Pipelines (batches) sent to Redis", registry=r
        )
        self.batch_size = Histogram(
            "adapter_redis_batch_size", "Redis calls per pipeline", buckets=BATCH_BUCKETS,
            registry=r,
        )  # fmt: skip
        self.connections = Gauge("adapter_connections", "Open client connections", registry=r)
        # backpressure (adapter/backpressure.py): set to read the pod's budget
        self.append_bytes = Gauge(
            "adapter_append_bytes_in_flight", "Request bytes being answered (the budget)",
            registry=r,
        )  # fmt: skip
        self.waiting = Gauge(
            "adapter_connections_waiting", "Connections waiting for their turn (pod bound)",
            registry=r,
        )  # fmt: skip
        self.kafka_requests = Counter(
            "adapter_kafka_requests", "Kafka requests answered, by API", ["api"], registry=r
        )
        # compaction (docs/compaction.md), by the pod holding the retention lease
        self.compacted = Counter(
            "adapter_compaction_removed_records",
            "Records compaction removed in this pod's runs, by topic and kind "
            "(superseded, tombstone)",
            ["topic", "kind"], registry=r,
        )  # fmt: skip
        self.transactions_ended = Counter(
            "adapter_kafka_transactions_ended",
            "Kafka transactions this pod ended, by outcome (commit, abort) and by whom "
            "(client: EndTxn; fenced: a new session of the id; timeout: the completer)",
            ["outcome", "reason"], registry=r,
        )  # fmt: skip
        # client quotas (adapter/quotas.py), as Kafka's per-entity quota sensors (byte-rate,
        # throttle-time): the rate is ``rate(adapter_quota_bytes_total[1m])``
        self.quota_bytes = Counter(
            "adapter_quota_bytes",
            "Bytes counted against a client quota, by quota key and the entity measured "
            "(user, client_id: empty where the quota's entity has no such part)",
            ["quota", "user", "client_id"], registry=r,
        )  # fmt: skip
        self.quota_throttle = Counter(
            "adapter_quota_throttle_seconds",
            "Throttle time given to connections over a client quota, by quota key and entity",
            ["quota", "user", "client_id"], registry=r,
        )  # fmt: skip
        self.quota_request = Counter(
            "adapter_quota_request_seconds",
            "Request handling time counted against a request_percentage quota, by entity",
            ["quota", "user", "client_id"], registry=r,
        )  # fmt: skip
        self._quota_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        # Kafka's successful-/failed-(re)authentication-total and
        # expired-connections-killed-count, by SASL mechanism
        self.kafka_sasl = Counter(
            "adapter_kafka_sasl_events",
            "Kafka SASL outcomes, by event (authenticated, authentication_failed, "
            "reauthenticated, reauthentication_failed, session_expired: a connection closed "
            "at a request after its session ended) and mechanism",
            ["event", "mechanism"], registry=r,
        )  # fmt: skip
        self.kafka_latency = Histogram(
            "adapter_kafka_request_seconds", "Time to answer a Kafka request, by API", ["api"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip

    def instrument(self, table: dict[str, Handler]) -> dict[str, Handler]:
        """The command table with every handler counted and timed."""
        return {command: self._wrap(command, handler) for command, handler in table.items()}

    def _wrap(self, command: str, handler: Handler) -> Handler:
        # Label children bound once here: per request only an increment and an observe.
        requests = self.requests.labels(command)
        latency = self.latency.labels(command)
        errors = self.errors

        @wraps(handler)
        async def counted(context: Context, argv: list[str]) -> str:
            started = time.perf_counter()
            try:
                return await handler(context, argv)
            except BrokerError as exc:
                errors.labels(command, exc.code).inc()
                raise
            except Exception:
                errors.labels(command, "UNAVAILABLE").inc()
                raise
            finally:
                requests.inc()
                latency.observe(time.perf_counter() - started)

        return counted

    def instrument_starters(self, starters: dict[str, Starter]) -> dict[str, Starter]:
        """The hot commands' starters, counted and timed like ``instrument``'s handlers (a
        starter that falls back to its handler returns None and is counted there)."""
        return {command: self._wrap_starter(command, start) for command, start in starters.items()}

    def _wrap_starter(self, command: str, start: Starter) -> Starter:
        requests = self.requests.labels(command)
        latency = self.latency.labels(command)
        errors = self.errors

        def counted(context: Context, argv: list[str]) -> Pending[str] | asyncio.Task[str] | None:
            started = time.perf_counter()
            try:
                pending = start(context, argv)
            except BrokerError as exc:
                requests.inc()
                errors.labels(command, exc.code).inc()
                raise
            if pending is None:
                return None

            def done(future: asyncio.Future[Any]) -> None:
                requests.inc()
                latency.observe(time.perf_counter() - started)
                exc = None if future.cancelled() else future.exception()
                if exc is not None:
                    errors.labels(command, getattr(exc, "code", "UNAVAILABLE")).inc()

            future = pending if isinstance(pending, asyncio.Task) else pending.future
            future.add_done_callback(done)
            return pending

        return counted

    def on_kafka_answer(self, api: str, seconds: float) -> None:
        """A Kafka connection answered a request of ``api`` (Fetch: long-polls included)."""
        self.kafka_requests.labels(api).inc()
        self.kafka_latency.labels(api).observe(seconds)

    def on_kafka_sasl(self, event: str, mechanism: str) -> None:
        """A Kafka connection's SASL ``event`` (see ``kafka_sasl``)."""
        self.kafka_sasl.labels(event, mechanism).inc()

    def on_quota_record(
        self, key: str, user: str, client_id: str, value: float, throttle_ms: int
    ) -> None:
        """The quota manager's hook (``QuotaManager.on_record``): ``value`` bytes (seconds
        of request time for request_percentage) counted against quota ``key`` of the
        entity, and the throttle time they gave."""
        children = self._quota_children.get((key, user, client_id))
        if children is None:  # both series appear at once: a throttle time of 0 is shown
            labels = (key, user, client_id)
            # request_percentage counts seconds of handling, not bytes
            counted = self.quota_request if key == REQUEST_PERCENTAGE else self.quota_bytes
            children = counted.labels(*labels), self.quota_throttle.labels(*labels)
            self._quota_children[labels] = children
        children[0].inc(value)
        if throttle_ms:
            children[1].inc(throttle_ms / 1000.0)

    def on_transaction_end(self, committed: bool, reason: str) -> None:
        """The transaction coordinator's hook (``Transactions.on_end``)."""
        self.transactions_ended.labels("commit" if committed else "abort", reason).inc()

    def watch_transactions(self, client: LazySyncClient, keys: Keys) -> None:
        """Report the open transactions (the whole deployment's) on each scrape."""
        self.registry.register(TransactionCollector(client, keys))

    def watch_fetch_sessions(self, sessions: Any) -> None:
        """Report the Kafka listener's fetch sessions (adapter/kafka/fetch_sessions.py
        ``FetchSessions``: its ``stats()``) on each scrape."""
        self.registry.register(FetchSessionCollector(sessions))

    def watch_read_ahead(self, read_ahead: Any) -> None:
        """Report the Kafka listener's reads ahead (adapter/kafka/fetch_ahead.py) on each
        scrape."""
        self.registry.register(ReadAheadCollector(read_ahead))

    def on_flush(self, calls: int) -> None:
        """The batcher's hook: one pipeline of ``calls`` Redis calls was sent."""
        self.round_trips.inc()
        self.batch_size.observe(calls)

    def on_compacted(self, result: CompactionResult) -> None:
        """The retention task's hook: one partition was compacted."""
        if result.removed:
            self.compacted.labels(result.topic, "superseded").inc(result.removed)
        if result.tombstones_removed:
            self.compacted.labels(result.topic, "tombstone").inc(result.tombstones_removed)

    def watch_deployment(
        self, client: LazySyncClient, keys: Keys, v1_session_timeout_ms: int
    ) -> None:
        """Report consumer lag and the partitions' offsets (adapter/deployment_metrics.py),
        read with ``client`` (logged in like the pod's own: `Settings.redis_options`)."""
        self.registry.register(DeploymentCollector(client, keys, v1_session_timeout_ms))

    def serve(self, port: int, host: str, probes: Probes | None = None) -> Callable[[], None]:
        """Start the HTTP endpoint (a daemon thread): /metrics, and /livez and /readyz
        answered by ``probes``; returns its stop function."""
        app = metrics_http.router(make_wsgi_app(self.registry), probes)
        try:
            stop = metrics_http.serve(app, host, port)
        except OSError as exc:
            raise ListenError("metrics", "--metrics-port", host, port, exc) from exc
        log.info("metrics on http://%s:%d/metrics", host, port)
        return stop


class TransactionCollector(Collector):
    """Open Kafka transactions by state, read from Redis on each scrape (every pod reports
    the same deployment-wide numbers: take one, not their sum)."""

    def __init__(self, client: LazySyncClient, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def describe(self) -> list:
        return []  # computed on scrape: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "adapter_kafka_open_transactions",
            "Open Kafka transactions of the deployment, by state",
            labels=["state"],
        )
        try:
            counts = open_counts(transaction_states(self.client.get(), self.keys))
            for state, count in counts.items():
                gauge.add_metric([state], count)
        except Exception as exc:  # a scrape never fails for Redis trouble
            log.warning("cannot read the open transactions: %s", exc)
            self.client.reset()
        yield gauge


class FetchSessionCollector(Collector):
    """The pod's incremental fetch sessions (KIP-227), as Kafka's broker reports them
    (NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached,
    IncrementalFetchSessionEvictionsPerSec), and its Fetch requests by kind."""

    def __init__(self, sessions: Any) -> None:
        self.sessions = sessions

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        stats = self.sessions.stats()
        yield GaugeMetricFamily(
            "adapter_kafka_fetch_sessions", "Incremental fetch sessions held", stats.sessions
        )
        yield GaugeMetricFamily(
            "adapter_kafka_fetch_session_partitions",
            "Partitions the incremental fetch sessions hold",
            stats.partitions,
        )
        yield CounterMetricFamily(
            "adapter_kafka_fetch_session_evictions",
            "Fetch sessions evicted for new ones",
            stats.evictions,
        )
        fetches = CounterMetricFamily(
            "adapter_kafka_fetches",
            "Fetch requests by kind: sessionless (session 0, epoch -1: librdkafka, aiokafka), "
            "full (creating a session), incremental, session_error",
            labels=["kind"],
        )
        for kind, count in stats.fetches.items():
            fetches.add_metric([kind], count)
        yield fetches


class ReadAheadCollector(Collector):
    """Fetch's reads ahead: the byte shares they hold, and how many a Fetch took or were
    dropped untaken (a high share dropped: consumers seek, or pause partitions, often)."""

    def __init__(self, read_ahead: Any) -> None:
        self.read_ahead = read_ahead

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        ahead = self.read_ahead
        yield GaugeMetricFamily(
            "adapter_kafka_fetch_read_ahead_bytes",
            "Byte shares of the Fetch reads ahead held (within --kafka-fetch-read-ahead-bytes)",
            ahead.held_bytes,
        )
        reads = CounterMetricFamily(
            "adapter_kafka_fetch_reads_ahead",
            "Partition reads ahead of a Fetch, by outcome: taken by a Fetch, or dropped",
            labels=["outcome"],
        )
        reads.add_metric(["taken"], ahead.taken)
        reads.add_metric(["dropped"], ahead.dropped)
        yield reads
