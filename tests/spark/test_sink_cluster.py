"""The Spark sink's Redis side (what each Spark task runs) on a real 3-node Redis Cluster:
pipelined ``spark/sink_append.lua`` calls across nodes, acks=all answered by a pod's built-in
replicator through pub/sub, replay markers, and the records read back over V1."""

from __future__ import annotations

import uuid

import pytest

from mapping.core.keys import Keys
from spark_connector import offsets
from spark_connector.appender import Appender, ensure_topic, sequence_bits
from spark_connector.sink_options import parse_sink_options
from spark_connector.sink_records import Record

pytestmark = pytest.mark.slow


def test_spark_sink_appends_on_the_cluster(cluster_url: str, start_pod) -> None:
    topic = f"sink-{uuid.uuid4().hex[:10]}"
    pod = start_pod(cluster_url)  # RF 3, min ISR 2, the built-in replicator on
    opts = parse_sink_options({"redis.url": cluster_url, "topic": topic, "batchSize": "7"})
    records = [Record(None, None, b"k%d" % i, b"v%d" % i) for i in range(40)]
    client = offsets.connect(opts.connection)
    try:
        keys = Keys()
        ensure_topic(client, keys, topic, opts.new_topics)
        bits = sequence_bits(client, keys)

        def run_task() -> int:
            task = Appender(client, opts, bits, marker="q:0", epoch=5, task_partition=0)
            for record in records:
                task.add(record)
            return sum(w.appended for w in task.finish())  # acks=all: waits for followers

        assert run_task() == 40
        assert run_task() == 0  # the same task replayed
    finally:
        client.close()
    values: list[bytes] = []
    with pod.client() as v1:
        for p in range(3):
            values += [value for _, value in v1.consume(topic, p, 0).records]
    assert sorted(values) == sorted(r.value for r in records)
