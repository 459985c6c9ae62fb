"""``adapter inspect transactions`` and ``inspect open-transactions`` (adapter/cli/
transactions.py), and the pod's transaction metrics (adapter/metrics.py), after a
transactional producer's requests to a real pod."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from adapter.kafka import errors
from adapter.kafka.versions import ADD_OFFSETS_TO_TXN, INIT_PRODUCER_ID
from mapping.connection.embedded import free_port
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.kafka import RawKafka
from tests.support.pods import scrape_metrics


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"itx{uuid.uuid4().hex[:8]}"), client)
    client.close()


def open_one(raw: RawKafka, txn_id: str) -> int:
    """A transactional session with a transaction open (AddOffsetsToTxn starts one)."""
    init = raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
        transactional_id=txn_id, transaction_timeout_ms=60_000))  # fmt: skip
    assert init.error_code == errors.NONE
    body = ADD_OFFSETS_TO_TXN.request[3](
        transactional_id=txn_id, producer_id=init.producer_id, producer_epoch=0, group_id="g"
    )
    assert raw.call(ADD_OFFSETS_TO_TXN, 3, body).error_code == errors.NONE
    return int(init.producer_id)


def test_inspect_transactions_and_metrics(target: CliTarget, start_pod) -> None:
    metrics_port = free_port()
    pod = start_pod(target.url, "--key-prefix", target.keys.prefix, "--metrics-port",
                    str(metrics_port), "--metrics-host", "127.0.0.1")  # fmt: skip
    with RawKafka(pod.kafka_port) as raw:
        pid = open_one(raw, "copier")
        idle = raw.call(INIT_PRODUCER_ID, 4, INIT_PRODUCER_ID.request[4](
            transactional_id="idle one", transaction_timeout_ms=60_000))  # fmt: skip
        assert idle.error_code == errors.NONE
    lines = target.cli("inspect", "transactions").splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"transactional_id=copier state=Ongoing producer_id={pid} epoch=0 ")
    assert "groups=g" in lines[0] and "age_ms=-1" not in lines[0]
    assert lines[1].startswith("transactional_id=idle one state=Empty ")
    opened = json.loads(target.cli("inspect", "transactions", "--open", "--json"))
    assert [(t["transactional_id"], t["state"]) for t in opened] == [("copier", "Ongoing")]
    samples = scrape_metrics(metrics_port)
    assert samples[("adapter_kafka_open_transactions", (("state", "Ongoing"),))] == 1
    assert samples[("adapter_kafka_open_transactions", (("state", "PrepareCommit"),))] == 0


def test_inspect_open_transactions_per_partition(target: CliTarget, start_pod) -> None:
    from confluent_kafka import Producer

    target.cli("topic", "create", "out", "--partitions", "2", "--replication-factor", "1",
               "--min-insync-replicas", "1")  # fmt: skip
    pod = start_pod(target.url, "--key-prefix", target.keys.prefix)
    producer = Producer({"bootstrap.servers": pod.bootstrap, "transactional.id": "t1"})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("out", value=b"pending", partition=1)
    producer.flush(10)
    lines = target.cli("inspect", "open-transactions", "out").splitlines()
    assert lines[0].startswith("topic=out partition=0 ") and "open_transactions=0" in lines[0]
    assert lines[1].startswith("topic=out partition=1 ") and "open_transactions=1" in lines[1]
    producer.abort_transaction(20)
    after = target.cli("inspect", "open-transactions", "out").splitlines()
    assert all("open_transactions=0" in line for line in after)
