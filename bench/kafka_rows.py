"""The Kafka rows of ``python -m bench``: bench/kafka.py's and bench/fairness.py's
measurements as table rows beside their raw-Redis baselines."""

from __future__ import annotations

from typing import Any

from bench import fairness, kafka, share, transactions
from bench.report import Row, ratio


def measure(redis_url: str, records: int, latency_s: float, adapter_args: list[str]) -> list[Row]:
    """bench/kafka.py's rows as table rows: confluent-kafka produce against a raw script
    client (and V1 pipelined PRODUCE in the note), a confluent consumer and plain Fetch
    requests against raw XRANGE paging, produce -> long-poll fetch latency at half the max
    rate, and bench/transactions.py's rows. Throughput rows count records (requests are the
    clients' batches)."""
    k = kafka.measure(redis_url, records, latency_s)

    def rate(name: str, system: str, value: float, base: Row | None = None, **kw: Any) -> Row:
        row = Row(name, system, 1, "pipelined", value, value, None, None, None, **kw)
        if base is not None:
            row.ratio, row.ratio_to = ratio(value, base), base.name
        return row

    raw_produce = rate("raw kafka/produce.lua", "redis", k["produce_raw_script_records_per_s"])
    v1 = rate("V1 produce_many", "adapter", k["produce_v1_pipelined_records_per_s"])
    produce = rate("Kafka produce (confluent)", "adapter", k["produce_kafka_records_per_s"],
                   raw_produce, note=f"{k['produce_ratio_to_v1']:.2f}x V1 produce_many",
                   extra={"ratio_to_v1": k["produce_ratio_to_v1"]})  # fmt: skip
    raw_fetch = rate("raw XRANGE paging", "redis", k["fetch_raw_xrange_records_per_s"])
    fetch = rate("Kafka fetch (confluent)", "adapter", k["fetch_kafka_records_per_s"], raw_fetch)
    plain = rate("Kafka Fetch (plain)", "adapter", k["fetch_plain_requests_records_per_s"],
                 raw_fetch)  # fmt: skip
    paced = k["latency_rate_records_per_s"]
    latency = Row("Kafka produce->fetch", "adapter", 1, "paced", paced, paced,
                  k["latency_p50_ms"] * 1000, k["latency_p99_ms"] * 1000, None,
                  note="half the max rate, long-poll fetch")  # fmt: skip
    return [
        raw_produce,
        v1,
        produce,
        raw_fetch,
        fetch,
        plain,
        latency,
        fairness_row(redis_url, latency_s, adapter_args),
        # transactional vs idempotent produce, read_committed vs read_uncommitted (none
        # while the pods refuse transactional producers)
        *transactions.rows(redis_url, min(records, 20_000), adapter_args),
        # share consumers (KIP-932) against a classic group on the same records
        *share.rows(redis_url, min(records, 100_000), adapter_args),
    ]


def fairness_row(redis_url: str, latency_s: float, adapter_args: list[str]) -> Row:
    """bench/fairness.py: four confluent-kafka producers on one pod at once; the note has
    each connection's records/s and the slowest-to-fastest ratio (1.0: an even share)."""
    seconds = max(1.0, 2 * latency_s)  # 10 s, or 1 s with --short
    share = fairness.measure(redis_url, 4, seconds, adapter_args)
    total = share["total_records_per_s"]
    rates = "/".join(f"{rate / 1000:.1f}k" for rate in share["records_per_s"])
    return Row("Kafka 4 producers, 1 pod", "adapter", 4, "pipelined", total, total, None,
               None, None, errors=share["delivery_failures"],
               note=f"per connection {rates} rec/s, min/max {share['min_max_ratio']:.2f}",
               extra=share)  # fmt: skip
