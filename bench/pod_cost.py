"""``python -m bench.pod_cost``: the pod's CPU in its hottest loops, each beside the way
it did the same work before, in the same run, with the ratio (docs/scale.md, "Pod CPU per
record"):

- **pack**: a Kafka Produce's script call of ``--records`` null-key records, its arguments
  written in RESP from the records (``append_resp``, the batcher packing only the head)
  against hiredis packing ``append_args``' arguments;
- **walk**: the Fetch's walk over ``--entries`` XRANGE entries of the common layouts into
  a RecordBatch, compiled (adapter/kafka/_walk.c) against the pure-Python walk feeding
  aiokafka's builder (where the extension is not built, both are the pure path);
- **request**: a Produce request of ``--partitions`` partitions of 4 records each (what
  librdkafka sends when many producers share many partitions) read, and its answer written,
  by the hand-written codec (adapter/kafka/produce_codec.py) against kafka-python's
  generic messages: the pod's cost per partition of a Produce beside the append;
- **answer**: a Fetch answer of ``--fetch-partitions`` partitions with nothing new (what a
  caught-up librdkafka consumer, which fetches without a session, gets twice a second),
  built and written by the hand-written codec (adapter/kafka/fetch_codec.py) against
  kafka-python's generic message: the pod's cost per partition of an idle Fetch's answer;
- **hash**: the V1 partitioner's FNV-1a of ``--keys`` keys of ``--key-size`` bytes (a UUID's
  text: 36), compiled (mapping/topic/_fnv.c) against the pure-Python loop: the pod's cost per
  V1 PRODUCE (and the Spark sink's per keyed row) of picking the partition;
- **cluster**: batches of ``--calls`` small calls (HGET) over 24 partitions' keys on a
  Redis Cluster of three primaries on loopback, one pipeline per primary against one
  redis-py call each (the cluster batcher's two paths): the pod's CPU per call.

CPU-bound loops are timed best of ``--repeat``; nothing here waits on another process but
the cluster rows, whose CPU is this process's own (``time.process_time``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import hiredis

from adapter.kafka import fetch, produce_codec, protocol
from adapter.kafka import records as kafka_records
from adapter.kafka.fetch_reads import Answer, Wanted, encode_entries
from adapter.kafka.versions import FETCH, PRODUCE
from mapping.connection.cluster import connect_async
from mapping.connection.cluster_batcher import ClusterBatcher
from mapping.core.records import ProducedRecord, append_args, append_resp
from mapping.core.resp import pack_command
from mapping.topic import partitioner
from mapping.topic.topic_config import TopicConfig

BITS = 10
CREATE_TIME = 1_700_000_000_000
HEAD = ("EVALSHA", "f" * 40, 7, "k1", "k2", "k3", "k4", "k5", "k6", "k7", 10, 1, 5000)


def best_of(repeat: int, work: Callable[[], Any]) -> float:
    """The shortest of ``repeat`` runs of ``work``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def pack_row(records: int, value_size: int, repeat: int) -> tuple[float, float]:
    """(µs per record now, before) for one Produce script call."""
    value = os.urandom(value_size)
    batch: list[ProducedRecord] = [
        (None, value, CREATE_TIME + i // 100, []) for i in range(records)
    ]
    now = best_of(repeat, lambda: pack_command((*HEAD, append_resp(batch))))
    before = best_of(repeat, lambda: hiredis.pack_command((*HEAD, *append_args(batch))))
    assert pack_command((*HEAD, append_resp(batch))) == hiredis.pack_command(
        (*HEAD, *append_args(batch))
    )
    return now * 1e6 / records, before * 1e6 / records


def entries_of(count: int, value_size: int) -> list[list[Any]]:
    """XRANGE entries as hiredis gives them: null-key Kafka records."""
    value = os.urandom(value_size)
    entries = []
    for i in range(count):
        stamp = b"%d" % (CREATE_TIME + i // 500)
        fields = [b"value", value, b"ts", stamp, b"create_ts", stamp, b"null", b"key"]
        offset = (CREATE_TIME << BITS) + i
        entry_id = b"%d-%d" % (offset >> BITS, offset & ((1 << BITS) - 1))
        entries.append([entry_id, [*fields, b"n", b"%d" % (i + 1)]])
    return entries


def walk_row(count: int, value_size: int, repeat: int) -> tuple[float, float]:
    """(µs per entry of the compiled path, of the pure one), the same entries."""
    config = TopicConfig("t", 1, 1, 1)
    entries = entries_of(count, value_size)
    compiled = kafka_records.plain_batch

    def walk(path: kafka_records.PlainBatch | None) -> float:
        def encode() -> None:
            _, taken, _, _, _ = encode_entries(entries, BITS, 1 << 62, 1 << 40, True, config)
            assert taken == len(entries)

        kafka_records.plain_batch = path
        try:
            return best_of(repeat, encode) * 1e6 / len(entries)
        finally:
            kafka_records.plain_batch = compiled

    return walk(compiled), walk(None)


def request_row(partitions: int, value_size: int, repeat: int) -> tuple[float, float]:
    """(µs per partition of a Produce v9, read and answered, by produce_codec; by
    kafka-python's messages)."""
    from tests.support.kafka import batch  # a client's RecordBatch

    Request, Response = PRODUCE.request, PRODUCE.response
    records = batch([os.urandom(value_size)] * 4, key=None)
    body = Request[9](
        transactional_id=None, acks=1, timeout_ms=5000,
        topic_data=[Request.TopicProduceData(name="bench", partition_data=[
            Request.TopicProduceData.PartitionProduceData(index=p, records=records)
            for p in range(partitions)
        ])],
    )  # fmt: skip
    frame = protocol.encode_request(PRODUCE, 9, body, 1, "bench")[4:]
    request = protocol.Request(PRODUCE, 9, 1, "bench", None)
    Partition = Response.TopicProduceResponse.PartitionProduceResponse

    def ours() -> None:
        _, decoded = produce_codec.decode_request(frame, 9)
        parts = [
            produce_codec.PartitionAnswer(p.index, 0, 1000)
            for p in decoded.topic_data[0].partition_data
        ]
        produce_codec.ProduceAnswer([produce_codec.TopicAnswer("bench", parts)]).frame(9, 1)

    def theirs() -> None:
        decoded = Request.decode(frame, version=9, header=True)
        parts = [
            Partition(index=p.index, error_code=0, base_offset=1000, log_append_time_ms=-1,
                      log_start_offset=-1, record_errors=[], error_message=None)
            for p in decoded.topic_data[0].partition_data
        ]  # fmt: skip
        reply = Response[9](
            responses=[Response.TopicProduceResponse(name="bench", partition_responses=parts)],
            throttle_time_ms=0,
        )
        protocol.encode_response(request, reply)

    return best_of(repeat, ours) * 1e6 / partitions, best_of(repeat, theirs) * 1e6 / partitions


def answer_row(partitions: int, repeat: int) -> tuple[float, float]:
    """(µs per partition of an idle Fetch v11's answer, by fetch_codec; by kafka-python's
    message, built as fetch.py built it before)."""
    request = protocol.Request(FETCH, 11, 1, "bench", None)
    answered = [
        (Wanted(f"topic-{p % 4}", p, 1 << 50, 1 << 20), Answer(0, 1 << 50, 0, None, 1 << 50))
        for p in range(partitions)
    ]
    Response = FETCH.response
    Topic = Response.FetchableTopicResponse
    Partition = Topic.PartitionData

    def ours() -> None:
        protocol.encode_response(request, fetch._response(request, 0, 0, answered))

    def theirs() -> None:
        by_topic: dict[str, list[Any]] = {}
        for w, a in answered:
            by_topic.setdefault(w.topic, []).append(Partition(
                version=11, partition_index=w.partition, error_code=a.error,
                high_watermark=a.high_watermark, last_stable_offset=a.last_stable,
                log_start_offset=a.log_start, aborted_transactions=None,
                preferred_read_replica=-1, records=a.records or b"",
            ))  # fmt: skip
        reply = Response[11](
            throttle_time_ms=0,
            error_code=0,
            session_id=0,
            responses=[Topic(version=11, topic=t, partitions=ps) for t, ps in by_topic.items()],
        )
        protocol.encode_response(request, reply)

    return best_of(repeat, ours) * 1e6 / partitions, best_of(repeat, theirs) * 1e6 / partitions


def hash_row(keys: int, key_size: int, repeat: int) -> tuple[float, float]:
    """(µs per key of the partitioner's hash, the compiled one where built; of the pure one)."""
    every = [b"%0*d" % (key_size, i) for i in range(keys)]
    assert [partitioner.fnv1a_32(k) for k in every] == [partitioner.fnv1a_32_pure(k) for k in every]

    def hashed(fnv1a_32: Callable[[bytes], int]) -> float:
        return best_of(repeat, lambda: [fnv1a_32(k) for k in every]) * 1e6 / keys

    return hashed(partitioner.fnv1a_32), hashed(partitioner.fnv1a_32_pure)


async def cluster_row(url: str, calls: int, batches: int) -> tuple[float, float]:
    """(µs of this process's CPU per call pipelined, through redis-py one by one)."""
    keys = [f"{{bench:{p}}}:state" for p in range(24)]
    costs = []
    for pipelines in (True, False):
        client = connect_async(url, 10.0)
        await client.initialize()
        batcher = ClusterBatcher(client, pipelines=pipelines)
        flusher = asyncio.create_task(batcher.run())
        try:
            for key in keys:
                await batcher.call("HSET", key, "log_start", "0")

            async def batch(batcher: ClusterBatcher = batcher) -> None:
                calls_made = (
                    batcher.submit("HGET", keys[i % 24], "log_start") for i in range(calls)
                )
                await asyncio.gather(*calls_made)

            for _ in range(5):  # connections made, code warm
                await batch()
            start = time.process_time()
            for _ in range(batches):
                await batch()
            costs.append((time.process_time() - start) * 1e6 / (calls * batches))
        finally:
            flusher.cancel()
            await client.aclose()
    return costs[0], costs[1]


def _line(name: str, unit: str, now: float, before: float, labels: tuple[str, str]) -> None:
    print(
        f"{name:8} {labels[0]:>10} {now:8.3f} {unit} | {labels[1]:<20} {before:8.3f} {unit}"
        f" ratio {before / now:5.2f}"
    )


@click.command()
@click.option("--records", default=4300, show_default=True, help="records per Produce call")
@click.option("--entries", default=8000, show_default=True, help="entries per Fetch walk")
@click.option("--value-size", default=100, show_default=True)
@click.option("--repeat", default=7, show_default=True)
@click.option("--partitions", default=24, show_default=True, help="partitions per Produce")
@click.option(
    "--fetch-partitions", default=200, show_default=True, help="partitions per Fetch answer"
)
@click.option("--keys", default=2000, show_default=True, help="keys per hash row run")
@click.option("--key-size", default=36, show_default=True, help="bytes per hashed key")
@click.option("--calls", default=72, show_default=True, help="calls per cluster batch")
@click.option("--batches", default=200, show_default=True)
@click.option("--cluster/--no-cluster", default=True, help="the cluster row (3 redis-servers)")
@click.option("--quick", is_flag=True, help="a smoke run of a second or two")
def main(
    records: int,
    entries: int,
    value_size: int,
    repeat: int,
    partitions: int,
    fetch_partitions: int,
    keys: int,
    key_size: int,
    calls: int,
    batches: int,
    cluster: bool,
    quick: bool,
) -> None:
    if quick:
        records, entries, repeat, batches, keys = 300, 500, 2, 10, 200
    now, before = pack_row(records, value_size, repeat)
    _line("pack", "µs/rec", now, before, ("RESP", "hiredis of the args"))
    compiled, pure = walk_row(entries, value_size, repeat)
    # "pure (off)": not built, or ADAPTER_PURE_PYTHON set: both figures are the pure path
    built = "compiled" if kafka_records.plain_batch is not None else "pure (off)"
    _line("walk", "µs/rec", compiled, pure, (built, "pure Python"))
    ours, theirs = request_row(partitions, value_size, repeat)
    _line("request", "µs/part", ours, theirs, ("own codec", "kafka-python"))
    ours, theirs = answer_row(fetch_partitions, repeat)
    _line("answer", "µs/part", ours, theirs, ("own codec", "kafka-python"))
    compiled, pure = hash_row(keys, key_size, repeat)
    built = "compiled" if partitioner.fnv1a_32 is not partitioner.fnv1a_32_pure else "pure (off)"
    _line("hash", "µs/key", compiled, pure, (built, "pure Python"))
    if cluster:
        from tests.support.cluster import LoopbackCluster

        with tempfile.TemporaryDirectory() as base:
            deployment = LoopbackCluster(Path(base), appendonly=False)
            try:
                url = deployment.start().url
                piped, calls_cost = asyncio.run(cluster_row(url, calls, batches))
            finally:
                deployment.stop()
        _line("cluster", "µs/call", piped, calls_cost, ("pipelines", "redis-py calls"))


if __name__ == "__main__":
    main()
