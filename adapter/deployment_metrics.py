"""The metrics read from Redis on each scrape, from one read of the deployment
(mapping/operations/metrics_snapshot.py): consumer lag in records and partitions' offsets, under the
adapter's names and under kafka_exporter's (danielqsj/kafka_exporter: its metric names,
label names and meanings), so its dashboards and alerts work unchanged, with a lag that
counts records (docs/operations.md says why the offsets' difference does not).

Every pod reports the same deployment-wide numbers: take one pod's (max by labels), not
their sum.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mapping.connection.cluster import LazySyncClient
from mapping.core.keys import Keys
from mapping.operations import metrics_snapshot
from mapping.operations.metrics_snapshot import DeploymentSnapshot

log = logging.getLogger(__name__)

# kafka_exporter's label names
GROUP, TOPIC, PARTITION = "consumergroup", "topic", "partition"


def adapter_families(snapshot: DeploymentSnapshot | None) -> list[GaugeMetricFamily]:
    """``adapter_consumer_lag_records``, ``adapter_consumer_committed_offset`` and
    ``adapter_compaction_dirty_records`` (no samples without a ``snapshot``)."""
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
    for one in snapshot.lags if snapshot else ():
        labels = [one.group, one.topic, str(one.partition)]
        lag.add_metric(labels, one.lag)
        if one.committed is not None:
            committed.add_metric(labels, one.committed)
    for p in snapshot.partitions if snapshot else ():
        if p.dirty is not None:
            dirty.add_metric([p.topic, str(p.partition)], p.dirty)
    return [lag, committed, dirty]


def kafka_exporter_families(snapshot: DeploymentSnapshot | None) -> list[GaugeMetricFamily]:
    """kafka_exporter's families, with its names, labels and meanings; its
    ``kafka_consumergroup_lag`` counts records here (no samples without a ``snapshot``)."""
    brokers = _gauge("kafka_brokers", "Number of Brokers in the Kafka Cluster.", [])
    broker_info = _gauge(
        "kafka_broker_info", "Information about the Kafka Broker.", ["id", "address"]
    )
    topic = _TopicFamilies()
    groups = _GroupFamilies()
    if snapshot is not None:
        brokers.add_metric([], len(snapshot.brokers))
        for node_id, host, port in snapshot.brokers:
            broker_info.add_metric([str(node_id), f"{host}:{port}"], 1)
        topic.add(snapshot)
        groups.add(snapshot)
    return [brokers, broker_info, *topic.families(), *groups.families()]


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


class _TopicFamilies:
    def __init__(self) -> None:
        where = [TOPIC, PARTITION]
        self.partitions = _gauge(
            "kafka_topic_partitions", "Number of partitions for this Topic", [TOPIC]
        )
        self.current = _gauge(
            "kafka_topic_partition_current_offset",
            "Current Offset of a Broker at Topic/Partition (the high watermark: offsets are "
            "time-encoded, their differences are no record counts)",
            where,
        )
        self.oldest = _gauge(
            "kafka_topic_partition_oldest_offset",
            "Oldest Offset of a Broker at Topic/Partition",
            where,
        )
        self.in_sync = _gauge(
            "kafka_topic_partition_in_sync_replica",
            "Number of In-Sync Replicas for this Topic/Partition",
            where,
        )
        self.leader = _gauge(
            "kafka_topic_partition_leader", "Leader Broker ID of this Topic/Partition", where
        )
        self.preferred = _gauge(
            "kafka_topic_partition_leader_is_preferred",
            "1 if Topic/Partition is using the Preferred Broker",
            where,
        )
        self.replicas = _gauge(
            "kafka_topic_partition_replicas", "Number of Replicas for this Topic/Partition", where
        )
        self.under = _gauge(
            "kafka_topic_partition_under_replicated_partition",
            "1 if Topic/Partition is under Replicated",
            where,
        )

    def add(self, snapshot: DeploymentSnapshot) -> None:
        for name, count in snapshot.partition_counts.items():
            self.partitions.add_metric([name], count)
        for p in snapshot.partitions:
            labels = [p.topic, str(p.partition)]
            self.current.add_metric(labels, p.log_end)
            self.oldest.add_metric(labels, p.log_start)
            self.in_sync.add_metric(labels, p.isr_size)
            self.replicas.add_metric(labels, p.replicas)
            self.under.add_metric(labels, int(p.isr_size < p.replicas))
            leader = snapshot.leader(p.topic, p.partition)
            if leader is not None:  # no pod serves Kafka: no leader to name
                self.leader.add_metric(labels, leader)
                self.preferred.add_metric(
                    labels, int(snapshot.leader_is_preferred(p.topic, p.partition))
                )

    def families(self) -> list[GaugeMetricFamily]:
        return [
            self.partitions,
            self.current,
            self.oldest,
            self.in_sync,
            self.leader,
            self.preferred,
            self.replicas,
            self.under,
        ]


class _GroupFamilies:
    def __init__(self) -> None:
        where = [GROUP, TOPIC, PARTITION]
        self.current = _gauge(
            "kafka_consumergroup_current_offset",
            "Current Offset of a ConsumerGroup at Topic/Partition (-1: none committed)",
            where,
        )
        self.current_sum = _gauge(
            "kafka_consumergroup_current_offset_sum",
            "Current Offset of a ConsumerGroup at Topic for all partitions",
            [GROUP, TOPIC],
        )
        self.lag = _gauge(
            "kafka_consumergroup_lag",
            "Current Lag of a ConsumerGroup at Topic/Partition, in records (-1: none committed)",
            where,
        )
        self.lag_sum = _gauge(
            "kafka_consumergroup_lag_sum",
            "Current Lag of a ConsumerGroup at Topic for all partitions, in records",
            [GROUP, TOPIC],
        )
        self.members = _gauge(
            "kafka_consumergroup_members", "Amount of members in a consumer group", [GROUP]
        )

    def add(self, snapshot: DeploymentSnapshot) -> None:
        for group, count in sorted(snapshot.members.items()):
            self.members.add_metric([group], count)
        by_pair: dict[tuple[str, str], list] = {}
        for one in snapshot.lags:
            by_pair.setdefault((one.group, one.topic), []).append(one)
        for (group, topic), lags in by_pair.items():
            committed = [one for one in lags if one.committed is not None]
            if not committed:  # as kafka_exporter: a topic the group never committed on
                continue
            for one in lags:
                labels = [group, topic, str(one.partition)]
                done = one.committed is not None
                self.current.add_metric(labels, one.committed if done else -1)
                self.lag.add_metric(labels, one.lag if done else -1)
            self.current_sum.add_metric([group, topic], sum(one.committed for one in committed))
            self.lag_sum.add_metric([group, topic], sum(one.lag for one in committed))

    def families(self) -> list[GaugeMetricFamily]:
        return [self.current, self.current_sum, self.lag, self.lag_sum, self.members]


class DeploymentCollector(Collector):
    """Reads the deployment once per scrape and reports it under both sets of names;
    scrapes that arrive while a read is under way share it."""

    def __init__(self, client: LazySyncClient, keys: Keys, v1_session_timeout_ms: int) -> None:
        self.client = client
        self.keys = keys
        self.v1_session_timeout_ms = v1_session_timeout_ms
        self._lock = threading.Lock()
        self._last: tuple[float, DeploymentSnapshot | None] | None = None  # (read at, read)

    def describe(self) -> list:
        return []  # computed on scrape: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot = self._read()
        yield from adapter_families(snapshot)
        yield from kafka_exporter_families(snapshot)

    def _read(self) -> DeploymentSnapshot | None:
        asked = time.monotonic()
        with self._lock:
            if self._last is not None and self._last[0] >= asked:
                return self._last[1]  # read while this scrape waited for the lock
            try:
                snapshot = metrics_snapshot.read(
                    self.client.get(), self.keys, self.v1_session_timeout_ms
                )
            except Exception as exc:  # a scrape never fails for Redis trouble: left out
                log.warning("cannot read consumer lag and partition state: %s", exc)
                self.client.reset()
                snapshot = None
            self._last = (time.monotonic(), snapshot)
            return snapshot
