"""``python -m bench.kafka``: Kafka rows with their raw-Redis baselines, in one run.

- produce: confluent-kafka (linger 5 ms, 100-byte values, acks=1) into one pod, against a
  raw redis-py client appending 500-record batches with one ``kafka/produce.lua`` call per
  batch (3 per round trip, one per partition), and against V1 pipelined PRODUCE;
- fetch: a confluent-kafka consumer reading every record from the beginning (clocked from
  its first record: a caught-up consumer, not librdkafka's start-up), against raw XRANGE
  paging (COUNT 1000) of the same logs; and plain Fetch requests straight to the
  pod (no client library), the pod's own cost;
- end-to-end latency: a producer paced at half the rate of the slower of the produce and
  consumer rows, a consumer long-polling (fetch.wait.max.ms 500): p50/p99 from send to
  receipt.

One ``redis-server`` (a free port, AOF off) and one ``python -m adapter serve`` child
process; the clients run here. On the 2-core reference machine Redis, the pod and the
client share the cores, so a ratio is what one such machine gets end to end.
"""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path

import click
import redis

from adapter.client import Client
from mapping.connection.embedded import RedisProcess
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.partition.kafka import KAFKA_PRODUCE, kafka_produce_call
from mapping.partition.partition_scripts import PartitionHead
from tests.support.pods import RF1, Pod

PARTITIONS = 3
VALUE = b"x" * 100
PREFIX = "kbench"
# Records per raw script call: librdkafka's batches under linger 5 ms at these rates are of
# the order of hundreds of records per partition.
RAW_BATCH = 500


def pod(redis_url: str, extra: list[str] | None = None) -> Pod:
    """A ``serve`` child process on ``redis_url`` (``extra``: more options) once it answers;
    its log on this process's stderr."""
    return Pod(
        redis_url,
        "--key-prefix", PREFIX, "--default-partitions", str(PARTITIONS), *RF1,
        "--no-replicator", "--log-level", "WARNING", *(extra or ()),
        log_dir=None,
    ).start(timeout=30)  # fmt: skip


def raw_produce(client: redis.Redis, records: int, batch: int) -> float:
    """records/s appending ``batch``-record batches, one script call each, a call per
    partition per round trip."""
    client.script_load(KAFKA_PRODUCE.source)
    keys = Keys(PREFIX)
    topic = f"raw-{uuid.uuid4().hex[:8]}"
    # the call the pod sends for the same records
    batch_records = [(None, VALUE, int(time.time() * 1000), [])] * batch
    calls = [
        kafka_produce_call(
            PartitionHead(keys.partition(topic, p), codec.DEFAULT_SEQUENCE_BITS, 1, 10_000),
            batch_records,
        )
        for p in range(PARTITIONS)
    ]
    done = 0
    started = time.perf_counter()
    while done < records:
        pipe = client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command(*call)
        pipe.execute()
        done += batch * PARTITIONS
    return done / (time.perf_counter() - started)


def kafka_produce(bootstrap: str, topic: str, records: int) -> float:
    """records/s of a confluent-kafka producer."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000,
    })  # fmt: skip
    producer.produce(topic, value=VALUE, partition=0)
    producer.flush(30)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    return records / (time.perf_counter() - started)


def v1_produce(port: int, topic: str, records: int) -> float:
    with Client("127.0.0.1", port, timeout=60) as client:
        started = time.perf_counter()
        done = 0
        while done < records:
            client.produce_many(topic, [(b"k%d" % i, VALUE) for i in range(1024)])
            done += 1024
        return done / (time.perf_counter() - started)


def raw_fetch(client: redis.Redis, topic: str) -> tuple[float, int]:
    keys = Keys(PREFIX)
    count = 0
    started = time.perf_counter()
    for p in range(PARTITIONS):
        log = keys.partition(topic, p).log
        start = "-"
        while True:
            page = client.xrange(log, start, "+", count=1000)
            if not page:
                break
            count += len(page)
            start = "(" + page[-1][0].decode()
    return count / (time.perf_counter() - started), count


def kafka_fetch(bootstrap: str, topic: str, records: int) -> float:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    # the clock starts at the first record: librdkafka's start-up (metadata, then ListOffsets
    # on a timer of its own, ~0.5 s) is not reading, and the raw baseline's client is
    # connected already
    deadline = time.monotonic() + 30
    while (first := consumer.poll(1.0)) is None or first.error() is not None:
        if time.monotonic() > deadline:
            raise RuntimeError("the consumer got no record")
    started = time.perf_counter()
    got = 0
    while got < records - 1:
        # no more than remain: consume(n) waits for n messages or its timeout
        wanted = min(10_000, records - 1 - got)
        got += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)
    rate = got / (time.perf_counter() - started)
    consumer.close()
    return rate


def pod_fetch(kafka_port: int, topic: str) -> float:
    """records/s of plain Fetch requests (one partition each, 1 MiB, from the start until
    all is read) straight to the pod: its own cost, without a client library's."""
    import socket
    import struct

    from adapter.kafka import protocol
    from adapter.kafka.versions import FETCH

    request = FETCH.request
    count = 0
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", kafka_port)) as sock:
        reader = sock.makefile("rb")
        for p in range(PARTITIONS):
            offset = 0
            while True:
                body = request[12](
                    replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1,
                    topics=[request.FetchTopic(topic=topic, partitions=[
                        request.FetchTopic.FetchPartition(
                            partition=p, fetch_offset=offset, log_start_offset=-1,
                            partition_max_bytes=1 << 20,
                        )
                    ])],
                    forgotten_topics_data=[], rack_id="",
                )  # fmt: skip
                sock.sendall(protocol.encode_request(FETCH, 12, body, 1, "bench"))
                (size,) = struct.unpack(">i", reader.read(4))
                reply = FETCH.response.decode(reader.read(size), version=12, header=True)
                part = reply.responses[0].partitions[0]
                last, records = _last_offset(part.records)
                if not records:
                    break
                count += records
                offset = last + 1
    return count / (time.perf_counter() - started)


def _last_offset(data: bytes | None) -> tuple[int, int]:
    """(last offset, record count) of a Fetch's record batches."""
    from aiokafka.record.memory_records import MemoryRecords

    memory = MemoryRecords(bytes(data or b""))
    last, records = -1, 0
    while memory.has_next():
        batch = memory.next_batch()
        for record in batch:
            last = record.offset
            records += 1
    return last, records


def end_to_end_latency(bootstrap: str, rate: float, seconds: float) -> tuple[float, float]:
    """(p50, p99) in ms from produce to a long-polling consumer's receipt, the producer paced
    at ``rate`` records/s (its send time in the value)."""
    import threading

    from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

    topic = f"latency-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5})
    producer.produce(topic, value=b"0", partition=0)  # creates it
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency",
                         "fetch.wait.max.ms": 500, "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
    consumer.consume(1000, 1.0)  # positions taken
    total = max(1, int(rate * seconds))

    def produce() -> None:
        started = time.perf_counter()
        for i in range(total):
            due = started + i / rate
            while (left := due - time.perf_counter()) > 0:
                time.sleep(min(left, 0.001))
            producer.produce(topic, value=b"%.9f" % time.perf_counter(), partition=i % PARTITIONS)
            producer.poll(0)
        producer.flush(30)

    sender = threading.Thread(target=produce)
    sender.start()
    latencies: list[float] = []
    deadline = time.monotonic() + seconds + 30
    while len(latencies) < total and time.monotonic() < deadline:
        # poll, not consume(n): a batch call waits for n messages, which would be measured
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            latencies.append((time.perf_counter() - float(message.value())) * 1000)
    sender.join()
    consumer.close()
    latencies.sort()
    if not latencies:
        return 0.0, 0.0
    return latencies[len(latencies) // 2], latencies[
        min(len(latencies) - 1, len(latencies) * 99 // 100)
    ]


def measure(redis_url: str, records: int, latency_seconds: float) -> dict[str, float]:
    """Every row against the redis-server at ``redis_url``, with a pod of its own."""
    served = pod(redis_url)
    try:
        raw_client = redis.Redis.from_url(redis_url)
        topic = f"kafka-{uuid.uuid4().hex[:8]}"
        bootstrap = served.bootstrap
        kafka_rate = kafka_produce(bootstrap, topic, records)
        raw_rate = raw_produce(raw_client, records, RAW_BATCH)
        v1_rate = v1_produce(served.port, f"v1-{uuid.uuid4().hex[:8]}", records)
        fetch_raw, stored = raw_fetch(raw_client, topic)
        fetch_rate = kafka_fetch(bootstrap, topic, stored)
        pod_rate = pod_fetch(served.kafka_port, topic)
        # half the rate of the slower side
        paced = min(kafka_rate, fetch_rate) / 2
        p50, p99 = end_to_end_latency(bootstrap, paced, latency_seconds)
        raw_client.close()
    finally:
        served.stop(timeout=30)
    return {
        "produce_kafka_records_per_s": round(kafka_rate),
        "produce_raw_script_records_per_s": round(raw_rate),
        "produce_v1_pipelined_records_per_s": round(v1_rate),
        "produce_ratio_to_raw": round(kafka_rate / raw_rate, 2),
        "produce_ratio_to_v1": round(kafka_rate / v1_rate, 2),
        "fetch_kafka_records_per_s": round(fetch_rate),
        "fetch_raw_xrange_records_per_s": round(fetch_raw),
        "fetch_ratio_to_raw": round(fetch_rate / fetch_raw, 2),
        "fetch_plain_requests_records_per_s": round(pod_rate),
        "fetch_plain_requests_ratio_to_raw": round(pod_rate / fetch_raw, 2),
        "latency_rate_records_per_s": round(paced),
        "latency_p50_ms": round(p50, 2),
        "latency_p99_ms": round(p99, 2),
    }


@click.command()
@click.option("--records", default=200_000, show_default=True, help="Records per row.")
@click.option("--latency-seconds", default=5.0, show_default=True,
              help="How long the paced end-to-end latency row runs.")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None)
def main(records: int, latency_seconds: float, json_path: Path | None) -> None:
    """Kafka produce and fetch rows with their raw-Redis baselines."""
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False) as server,
    ):
        rows = measure(server.url, records, latency_seconds)
    for name, value in rows.items():
        click.echo(f"{name:40} {value}")
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
