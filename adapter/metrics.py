"""Prometheus metrics of a pod (``--metrics-port``), from prometheus-client.

Requests, errors and latency by command are counted by wrapping each handler of the command
table once at start-up (with metrics off the table is untouched: no cost at all). Redis
round trips and batch sizes come from the batcher's ``on_flush`` hook. Consumer lag is
computed when Prometheus scrapes, with a synchronous Redis client in the scrape thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from adapter.sockets import ListenError
from adapter.v1.handlers import Context, Handler, Starter
from mapping import inspection
from mapping.batcher import Pending
from mapping.cluster import SyncClient, connect_sync
from mapping.compaction import CompactionResult
from mapping.errors import BrokerError
from mapping.keys import Keys
from mapping.txn_inspection import open_counts, transaction_states

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
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

    def on_transaction_end(self, committed: bool, reason: str) -> None:
        """The transaction coordinator's hook (``Transactions.on_end``)."""
        self.transactions_ended.labels("commit" if committed else "abort", reason).inc()

    def watch_transactions(
        self, redis_url: str, keys: Keys, timeout_s: float = 5.0, **login: Any
    ) -> None:
        """Report the open transactions (the whole deployment's) on each scrape."""
        self.registry.register(TransactionCollector(redis_url, keys, timeout_s, login))

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

    def watch_lag(self, redis_url: str, keys: Keys, timeout_s: float = 5.0, **login: Any) -> None:
        """Report consumer lag, read with a client logged in like the pod's own (``login``:
        `Settings.redis_options`, the same user, password and TLS files)."""
        self.registry.register(LagCollector(redis_url, keys, timeout_s, login))

    def serve(self, port: int, host: str) -> Callable[[], None]:
        """Start the HTTP endpoint (a daemon thread); returns its stop function."""
        try:
            server, thread = start_http_server(port, host, registry=self.registry)
        except OSError as exc:
            raise ListenError("metrics", "--metrics-port", host, port, exc) from exc
        log.info("metrics on http://%s:%d/metrics", host, port)

        def stop() -> None:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        return stop


class LagCollector(Collector):
    """Consumer lag per (group, topic, partition) and compacted partitions' dirty records,
    read from Redis on each scrape."""

    def __init__(
        self, redis_url: str, keys: Keys, timeout_s: float, login: dict[str, Any] | None = None
    ) -> None:
        self.redis_url = redis_url
        self.keys = keys
        self.timeout_s = timeout_s
        self.login = login or {}
        self._client: SyncClient | None = None

    def describe(self) -> list:
        return []  # computed on scrape: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lag = GaugeMetricFamily(
            "adapter_consumer_lag_records",
            "Records from a group's committed offset to the high watermark",
            labels=["group", "topic", "partition"],
        )
        committed = GaugeMetricFamily(
            "adapter_consumer_committed_offset",
            "A group's committed offset (the next one to read)",
            labels=["group", "topic", "partition"],
        )
        dirty = GaugeMetricFamily(
            "adapter_compaction_dirty_records",
            "Superseded records still in a compacted partition's log (compaction's backlog)",
            labels=["topic", "partition"],
        )
        try:
            client = self._connect()
            for topic_name, partition, count in inspection.dirty_records(client, self.keys):
                dirty.add_metric([topic_name, str(partition)], count)
            for group_name, topic_name in inspection.group_pairs(client, self.keys):
                view = inspection.group(client, self.keys, group_name, topic_name)
                if view is None:
                    continue
                for p in view.partitions:
                    labels = [group_name, topic_name, str(p.partition)]
                    lag.add_metric(labels, p.lag)
                    if p.committed is not None:
                        committed.add_metric(labels, p.committed)
        except Exception as exc:  # a scrape never fails for Redis trouble: lag is left out
            log.warning("cannot read consumer lag: %s", exc)
            self._client = None
        yield lag
        yield committed
        yield dirty

    def _connect(self) -> SyncClient:
        if self._client is None:
            self._client = connect_sync(
                self.redis_url, socket_timeout=self.timeout_s,
                socket_connect_timeout=self.timeout_s, **self.login,
            )  # fmt: skip
        return self._client


class TransactionCollector(LagCollector):
    """Open Kafka transactions by state, read from Redis on each scrape (every pod reports
    the same deployment-wide numbers: take one, not their sum)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            "adapter_kafka_open_transactions",
            "Open Kafka transactions of the deployment, by state",
            labels=["state"],
        )
        try:
            counts = open_counts(transaction_states(self._connect(), self.keys))
            for state, count in counts.items():
                gauge.add_metric([state], count)
        except Exception as exc:  # a scrape never fails for Redis trouble
            log.warning("cannot read the open transactions: %s", exc)
            self._client = None
        yield gauge
