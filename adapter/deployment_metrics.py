"""The metrics read from Redis on each scrape, from one read of the deployment
(mapping/operations/metrics_snapshot.py): consumer lag in records and partitions' offsets, under the
adapter's names and under kafka_exporter's (danielqsj/kafka_exporter: its metric names,
label names and meanings), so its dashboards and alerts work unchanged, with a lag that
counts records (docs/operations.md says why the offsets' difference does not).

Share groups (KIP-932) get ``kafka_sharegroup_*`` families in kafka_exporter's style
(it has none for them yet), with the words of Kafka 4.2's share metrics (KIP-1103's
in-flight message count, KIP-1226's share-partition lag), read by
mapping/operations/share_group_overview.py.

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
from mapping.operations import metrics_snapshot, share_group_overview
from mapping.operations.inspection import sequence_bits
from mapping.operations.metrics_snapshot import DeploymentSnapshot
from mapping.operations.share_group_overview import ShareSnapshot, topic_totals

log = logging.getLogger(__name__)

# kafka_exporter's label names
GROUP, TOPIC, PARTITION = "consumergroup", "topic", "partition"
SHARE_GROUP = "sharegroup"  # kafka_exporter's style for share groups


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


def share_group_families(shares: ShareSnapshot | None) -> list[GaugeMetricFamily]:
    """``kafka_sharegroup_*``: live members and state per share group, and per
    share-partition with state its start offset, records in flight and lag in records (no
    samples without ``shares``)."""
    where = [SHARE_GROUP, TOPIC, PARTITION]
    members = _gauge(
        "kafka_sharegroup_members", "Amount of live members in a share group", [SHARE_GROUP]
    )
    state = _gauge(
        "kafka_sharegroup_state",
        "1 for the share group's state (Empty: no live member, Stable)",
        [SHARE_GROUP, "state"],
    )
    start = _gauge(
        "kafka_sharegroup_start_offset",
        "Start offset (SPSO) of a ShareGroup at Topic/Partition: the first record not yet "
        "acknowledged",
        where,
    )
    in_flight = _gauge(
        "kafka_sharegroup_records_in_flight",
        "Records of a ShareGroup at Topic/Partition acquired and not yet acknowledged, or "
        "released for redelivery",
        where,
    )
    lag = _gauge(
        "kafka_sharegroup_lag",
        "Lag of a ShareGroup at Topic/Partition, in records not yet acknowledged (in flight "
        "or not yet delivered; -1: unknown)",
        where,
    )
    lag_sum = _gauge(
        "kafka_sharegroup_lag_sum",
        "Lag of a ShareGroup at Topic for all partitions, in records",
        [SHARE_GROUP, TOPIC],
    )
    if shares is not None:
        for group, count in sorted(shares.members.items()):
            members.add_metric([group], count)
        for group, name in sorted(shares.states.items()):
            state.add_metric([group, name], 1)
        by_group: dict[str, list] = {}
        for group, row in shares.partitions:
            labels = [group, row.topic, str(row.partition)]
            start.add_metric(labels, row.start_offset)
            in_flight.add_metric(labels, row.in_flight)
            lag.add_metric(labels, row.lag)
            by_group.setdefault(group, []).append(row)
        for group, rows in sorted(by_group.items()):
            for totals in topic_totals(rows):
                lag_sum.add_metric([group, totals.topic], totals.lag)
    return [members, state, start, in_flight, lag, lag_sum]


class DeploymentCollector(Collector):
    """Reads the deployment once per scrape and reports it under both sets of names;
    scrapes that arrive while a read is under way share it."""

    def __init__(self, client: LazySyncClient, keys: Keys, v1_session_timeout_ms: int) -> None:
        self.client = client
        self.keys = keys
        self.v1_session_timeout_ms = v1_session_timeout_ms
        self._lock = threading.Lock()
        # (read at, the deployment's read, the share groups' read)
        self._last: tuple[float, DeploymentSnapshot | None, ShareSnapshot | None] | None = None

    def describe(self) -> list:
        return []  # computed on scrape: nothing to check at registration

    def collect(self) -> Iterator[GaugeMetricFamily]:
        snapshot, shares = self._read()
        yield from adapter_families(snapshot)
        yield from kafka_exporter_families(snapshot)
        yield from share_group_families(shares)

    def _read(self) -> tuple[DeploymentSnapshot | None, ShareSnapshot | None]:
        asked = time.monotonic()
        with self._lock:
            if self._last is not None and self._last[0] >= asked:
                return self._last[1], self._last[2]  # read while this scrape waited
            try:
                snapshot = metrics_snapshot.read(
                    self.client.get(), self.keys, self.v1_session_timeout_ms
                )
            except Exception as exc:  # a scrape never fails for Redis trouble: left out
                log.warning("cannot read consumer lag and partition state: %s", exc)
                self.client.reset()
                snapshot = None
            shares = self._read_shares(snapshot) if snapshot is not None else None
            self._last = (time.monotonic(), snapshot, shares)
            return snapshot, shares

    def _read_shares(self, snapshot: DeploymentSnapshot) -> ShareSnapshot | None:
        try:
            client = self.client.get()
            return share_group_overview.read_snapshot(
                client, self.keys, snapshot.partition_counts, sequence_bits(client, self.keys)
            )
        except Exception as exc:  # the other families are still served
            log.warning("cannot read share groups' state: %s", exc)
            return None
