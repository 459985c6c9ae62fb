"""The families computed on each scrape, from a deployment snapshot written out by hand:
kafka_exporter's names, labels and meanings (a topic a group never committed on is left out,
a partition without a commit is -1 and counts in no sum), the adapter's own beside them."""

from __future__ import annotations

from prometheus_client.core import Metric

from adapter.deployment_metrics import adapter_families, kafka_exporter_families
from mapping.operations.metrics_snapshot import DeploymentSnapshot, GroupLag, PartitionState


def _samples(families: list[Metric]) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


SNAPSHOT = DeploymentSnapshot(
    brokers=[(1, "10.0.0.1", 9093), (2, "10.0.0.2", 9093)],
    partition_counts={"orders": 2},
    partitions=[
        PartitionState(
            "orders", 0, high_watermark=5_000, log_start=3_000, isr_size=3, replicas=3, dirty=None
        ),
        PartitionState(
            "orders", 1, high_watermark=-1, log_start=0, isr_size=1, replicas=3, dirty=4
        ),
    ],
    lags=[
        GroupLag("billing", "orders", 0, committed=4_000, lag=7, exact=True),
        GroupLag("billing", "orders", 1, committed=None, lag=0, exact=True),
        GroupLag("fresh", "orders", 0, committed=None, lag=12, exact=True),
        GroupLag("fresh", "orders", 1, committed=None, lag=0, exact=True),
    ],
    members={"billing": 2, "idle": 0},
)


def _key(name: str, **labels: str) -> tuple[str, tuple]:
    return name, tuple(sorted(labels.items()))


def test_consumer_groups_under_kafka_exporters_names() -> None:
    samples = _samples(kafka_exporter_families(SNAPSHOT))
    billing = {"consumergroup": "billing", "topic": "orders"}
    assert samples[_key("kafka_consumergroup_lag", **billing, partition="0")] == 7
    assert samples[_key("kafka_consumergroup_current_offset", **billing, partition="0")] == 4_000
    # partition 1: nothing committed (kafka_exporter's -1, left out of the sums)
    assert samples[_key("kafka_consumergroup_lag", **billing, partition="1")] == -1
    assert samples[_key("kafka_consumergroup_current_offset", **billing, partition="1")] == -1
    assert samples[_key("kafka_consumergroup_lag_sum", **billing)] == 7
    assert samples[_key("kafka_consumergroup_current_offset_sum", **billing)] == 4_000
    # a group that never committed on the topic has no offsets or lag there, as in kafka_exporter
    assert not [key for key in samples if ("consumergroup", "fresh") in key[1]]
    assert samples[_key("kafka_consumergroup_members", consumergroup="billing")] == 2
    assert samples[_key("kafka_consumergroup_members", consumergroup="idle")] == 0


def test_topics_and_brokers_under_kafka_exporters_names() -> None:
    samples = _samples(kafka_exporter_families(SNAPSHOT))
    p0, p1 = {"topic": "orders", "partition": "0"}, {"topic": "orders", "partition": "1"}
    assert samples[_key("kafka_brokers")] == 2
    assert samples[_key("kafka_broker_info", id="2", address="10.0.0.2:9093")] == 1
    assert samples[_key("kafka_topic_partitions", topic="orders")] == 2
    assert samples[_key("kafka_topic_partition_current_offset", **p0)] == 5_001  # hw + 1
    assert samples[_key("kafka_topic_partition_current_offset", **p1)] == 0  # empty
    assert samples[_key("kafka_topic_partition_oldest_offset", **p0)] == 3_000
    assert samples[_key("kafka_topic_partition_replicas", **p1)] == 3
    assert samples[_key("kafka_topic_partition_in_sync_replica", **p1)] == 1
    assert samples[_key("kafka_topic_partition_under_replicated_partition", **p0)] == 0
    assert samples[_key("kafka_topic_partition_under_replicated_partition", **p1)] == 1
    # Metadata's leaders: a stable spread over the live brokers, by node id
    leaders = {samples[_key("kafka_topic_partition_leader", **p)] for p in (p0, p1)}
    assert leaders <= {1, 2}
    assert samples[_key("kafka_topic_partition_leader_is_preferred", **p0)] == 1


def test_no_leader_without_a_kafka_broker() -> None:
    alone = DeploymentSnapshot([], SNAPSHOT.partition_counts, SNAPSHOT.partitions, [], {})
    samples = _samples(kafka_exporter_families(alone))
    assert samples[("kafka_brokers", ())] == 0
    assert not [key for key in samples if key[0] == "kafka_topic_partition_leader"]


def test_the_adapters_own_names_beside() -> None:
    samples = _samples(adapter_families(SNAPSHOT))
    fresh = {"group": "fresh", "topic": "orders", "partition": "0"}
    assert samples[_key("adapter_consumer_lag_records", **fresh)] == 12  # from 0: not committed
    assert _key("adapter_consumer_committed_offset", **fresh) not in samples
    dirty = _key("adapter_compaction_dirty_records", topic="orders", partition="1")
    assert samples[dirty] == 4
    assert len([key for key in samples if key[0] == "adapter_compaction_dirty_records"]) == 1


def test_a_failed_read_gives_families_without_samples() -> None:
    """Redis unreachable: every family is there, with no sample (no kafka_brokers 0)."""
    families = adapter_families(None) + kafka_exporter_families(None)
    assert {f.name for f in families} >= {"kafka_brokers", "kafka_consumergroup_lag"}
    assert all(not f.samples for f in families)
