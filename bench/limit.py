"""``python -m bench.limit``: how close the pods are to plain Redis, for each front door.

The design's limit is a client doing the least Redis work for the same records: plain
``XADD <stream> * v <value>`` to write them and ``XRANGE`` pages of 1000 to read them back.
Each section measures the pods and that baseline in the same run, on the same
``redis-server`` (a free port, AOF off), and prints one table: records/s, Redis's CPU per
record, the pod's CPU per record, and Redis's memory per record, with the ratios.

- **kafka**: a confluent-kafka producer through one pod (null keys, linger.ms 5, acks=1,
  librdkafka's partitioner) and a confluent-kafka consumer reading every record back;
- **kafka-small**: the same with batches of 4 records (linger.ms 0, batch.num.messages 4),
  where a request's own costs dominate;
- **v1**: V1 PRODUCE pipelined over one connection (``adapter.client``, 1024 a round trip),
  CONSUME over one connection (a page of each partition a round trip); a note gives the
  same logs read in XRANGE pages with redis-py, and CONSUME's ratio to that;
- **spark**: the Spark sink's ``save()`` (``bench/spark_sink.py``, ``local[2]``), skipped
  with a note when pyspark cannot be imported.

Topics have 6 partitions and RF 1 (the baseline writes 6 streams); a line after the tables
says what a replica stream adds to Redis's memory and CPU at RF 2 (``--no-rf2``: not
measured).

- The plain client: raw RESP over one socket from this process, each command encoded once
  and sent again and again, replies parsed by hiredis' C reader (the cheapest Python client:
  redis-py would add its own per-command cost); XADD 1000 a write, two writes in flight;
  XRANGE with COUNT 1000, one page of each stream a round trip.
- Redis CPU: ``INFO cpu``'s main thread (``used_cpu_user_main_thread`` +
  ``used_cpu_sys_main_thread``; the whole process where Redis does not report it), before
  and after each side. Pod CPU: ``/proc/<pid>/stat`` utime + stime of the pod and its
  children (10 ms ticks). Memory: ``INFO memory``'s ``used_memory`` before and after a
  side's writes.
- A consumer starts at each partition's first offset (read from the log first: no
  ListOffsets, which librdkafka sends on a timer of its own); its records/s and CPU count
  from its start, its connection and metadata included (a few requests).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import socket
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import click
import hiredis
import redis

from adapter.client import Client
from adapter.v1.protocol import format_request, parse_response
from bench.kafka import PREFIX, pod
from mapping.connection.append_module import library
from mapping.connection.embedded import RedisProcess
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.resp import pack_command
from mapping.operations.inspection import sequence_bits
from tests.support.pods import Pod
from tests.support.procfs import children, cpu_seconds, host_cpu_seconds

SECTIONS = ("kafka", "kafka-small", "v1", "spark")
PARTITIONS = 6
PAGE = 1000  # XRANGE COUNT; the pods' CONSUME pages hold as many (--consume-max-records)
XADDS_PER_WRITE = 1000
KAFKA_PRODUCER = {"acks": "1", "linger.ms": 5, "batch.num.messages": 10_000}
KAFKA_SMALL_BATCHES = {"acks": "1", "linger.ms": 0, "batch.num.messages": 4}
PLAIN_CLIENT = (
    "raw RESP over one socket (commands encoded once, replies parsed by hiredis): "
    f"XADD <stream> * v <value>, {XADDS_PER_WRITE} a write, two writes in flight; "
    f"XRANGE <stream> (<last id> + COUNT {PAGE}, a page of each stream a round trip"
)
NO_FIGURE = "—"  # a cell with nothing to measure
V1_PIPELINE = 1024
SPARK_BATCH = 1000
SHORT_RECORDS = 50_000


@dataclass(frozen=True)
class Reading:
    redis_cpu_s: float
    pod_cpu_s: float
    used_memory: int
    ours_s: float  # this process's and its descendants' (Redis, the pods, Spark)
    host_busy_s: float
    host_all_s: float


@dataclass
class Side:
    """One side of a row: what it did and what it cost."""

    records: int
    records_per_s: float
    redis_cpu_us_per_record: float
    pod_cpu_us_per_record: float | None
    memory_bytes_per_record: float
    # the share of all the machine's cores that other work (not this process, Redis, the
    # pods or Spark) kept busy over the side
    other_work: float
    # the client's: this process and its descendants other than Redis and the pod (the
    # Kafka clients' threads, the plain client, Spark)
    client_cpu_us_per_record: float = 0.0
    # Redis', the pod's and the client's CPU over the side's wall time: how many cores the
    # three kept busy together
    cores_busy: float = 0.0


@dataclass
class Section:
    name: str
    title: str
    produce: tuple[Side, Side]  # through the pods, plain Redis
    fetch: tuple[Side, Side] | None
    notes: list[str] = field(default_factory=list)


def redis_cpu_seconds(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    if "used_cpu_user_main_thread" in cpu:
        return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def pod_cpu_seconds(pid: int | None) -> float:
    if pid is None:
        return 0.0
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in children(pid))


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of the process and every descendant alive now."""
    return cpu_seconds(pid) + sum(tree_cpu_seconds(child) for child in children(pid))


def read(client: redis.Redis, pod_pid: int | None) -> Reading:
    busy, every = host_cpu_seconds()
    return Reading(
        redis_cpu_seconds(client),
        pod_cpu_seconds(pod_pid),
        int(client.info("memory")["used_memory"]),
        tree_cpu_seconds(os.getpid()),
        busy,
        every,
    )


def measure(
    client: redis.Redis, pod_pid: int | None, work: Callable[[], tuple[int, float]]
) -> Side:
    """``work`` (-> records, records/s) between two readings; ``pod_pid`` None: no pod's
    CPU is counted (the plain client's side)."""
    before = read(client, pod_pid)
    started = time.perf_counter()
    records, rate = work()
    wall = time.perf_counter() - started
    after = read(client, pod_pid)
    if records <= 0:
        raise RuntimeError("a side did no records")
    every = after.host_all_s - before.host_all_s
    ours = after.ours_s - before.ours_s
    others = (after.host_busy_s - before.host_busy_s) - ours
    redis_s = after.redis_cpu_s - before.redis_cpu_s
    pod_s = after.pod_cpu_s - before.pod_cpu_s
    return Side(
        records=records,
        records_per_s=rate,
        redis_cpu_us_per_record=redis_s * 1e6 / records,
        pod_cpu_us_per_record=None if pod_pid is None else pod_s * 1e6 / records,
        memory_bytes_per_record=(after.used_memory - before.used_memory) / records,
        other_work=max(0.0, others / every) if every > 0 else 0.0,
        client_cpu_us_per_record=max(0.0, ours - redis_s - pod_s) * 1e6 / records,
        cores_busy=ours / wall if wall > 0 else 0.0,
    )


# --- the plain client ------------------------------------------------------------------


class PlainRedis:
    """One socket speaking RESP; replies parsed by hiredis."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def replies(self, count: int) -> list[Any]:
        got: list[Any] = []
        while len(got) < count:
            reply = self.reader.gets()
            if reply is False:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("redis-server closed the connection")
                self.reader.feed(data)
            elif isinstance(reply, hiredis.ReplyError):
                raise reply
            else:
                got.append(reply)
        return got

    def close(self) -> None:
        self.sock.close()


def plain_produce(port: int, streams: list[str], records: int, value: bytes) -> tuple[int, float]:
    """``records`` plain XADDs, round-robin over ``streams``, pipelined."""

    def writes(count: int) -> bytes:
        return b"".join(
            pack_command(("XADD", streams[i % len(streams)], "*", "v", value)) for i in range(count)
        )

    full = writes(XADDS_PER_WRITE)
    sizes = [XADDS_PER_WRITE] * (records // XADDS_PER_WRITE)
    if records % XADDS_PER_WRITE:
        sizes.append(records % XADDS_PER_WRITE)
    connection = PlainRedis(port)
    try:
        in_flight: deque[int] = deque()
        started = time.perf_counter()
        for size in sizes:
            connection.send(full if size == XADDS_PER_WRITE else writes(size))
            in_flight.append(size)
            if len(in_flight) > 1:
                connection.replies(in_flight.popleft())
        while in_flight:
            connection.replies(in_flight.popleft())
        return records, records / (time.perf_counter() - started)
    finally:
        connection.close()


def read_in_pages(
    streams: list[str], round_trip: Callable[[list[tuple[str, Any]]], list[Any]]
) -> tuple[int, float]:
    """Every entry of ``streams`` in XRANGE pages, a page of each unfinished stream a round
    trip, until each answers an empty page: (entries, entries/s). ``round_trip`` reads one
    page of each (stream, exclusive start) it is given, in order."""
    after: dict[str, Any] = dict.fromkeys(streams, "-")
    got = 0
    started = time.perf_counter()
    while after:
        names = list(after)
        for name, page in zip(names, round_trip([(n, after[n]) for n in names]), strict=True):
            if not page:
                del after[name]
            else:
                got += len(page)
                after[name] = b"(" + page[-1][0]
    return got, got / (time.perf_counter() - started)


def plain_fetch(port: int, streams: list[str]) -> tuple[int, float]:
    """Every entry of ``streams`` in XRANGE pages over the plain client's socket."""
    connection = PlainRedis(port)

    def round_trip(wanted: list[tuple[str, Any]]) -> list[Any]:
        connection.send(
            b"".join(pack_command(("XRANGE", s, a, "+", "COUNT", PAGE)) for s, a in wanted)
        )
        return connection.replies(len(wanted))

    try:
        return read_in_pages(streams, round_trip)
    finally:
        connection.close()


def plain_side(
    client: redis.Redis,
    port: int,
    records: int,
    value: bytes,
    streams: int = PARTITIONS,
    fetch: bool = True,
) -> tuple[Side, Side | None]:
    """(produce, fetch) of the plain client, ``records`` records over ``streams`` streams of
    their own (``fetch`` False: no fetch, None)."""
    names = [f"limit:plain:{uuid.uuid4().hex[:8]}:{i}" for i in range(streams)]
    produced = measure(client, None, lambda: plain_produce(port, names, records, value))
    if not fetch:
        return produced, None
    fetched = measure(client, None, lambda: plain_fetch(port, names))
    if fetched.records != records:
        raise RuntimeError(f"plain XRANGE read {fetched.records} of {records} records")
    return produced, fetched


# --- through the pods ------------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(topic, PARTITIONS, replication)])
    created[topic].result(30)


def stored(
    client: redis.Redis, topic: str, keys: Keys | None = None, partitions: int = PARTITIONS
) -> int:
    """Records in the topic's logs (the pods' key prefix unless ``keys``)."""
    keys = keys or Keys(PREFIX)
    return sum(client.xlen(keys.partition(topic, p).log) for p in range(partitions))


def pod_pid(served: Pod) -> int:
    assert served.process is not None
    return served.process.pid


def kafka_produce(
    client: redis.Redis, served: Pod, topic: str, records: int, value: bytes, config: dict
) -> Side:
    """A confluent-kafka producer's ``records`` null-key records, its metadata fetched
    before the clock starts."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": served.bootstrap, "queue.buffering.max.messages": 1_000_000,
        **config,
    })  # fmt: skip
    producer.list_topics(topic, timeout=30)

    def work() -> tuple[int, float]:
        started = time.perf_counter()
        for i in range(records):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.005)
            if i % 1000 == 0:
                producer.poll(0)
        if producer.flush(300):
            raise RuntimeError("the producer did not deliver every record")
        return records, records / (time.perf_counter() - started)

    side = measure(client, pod_pid(served), work)
    if (count := stored(client, topic)) != records:
        raise RuntimeError(f"{count} records stored of {records} produced")
    return side


def first_offsets(client: redis.Redis, topic: str) -> dict[int, int]:
    """partition -> the offset of its first record (partitions with records only)."""
    keys = Keys(PREFIX)
    bits = sequence_bits(client, keys)
    firsts = {p: client.xrange(keys.partition(topic, p).log, count=1) for p in range(PARTITIONS)}
    return {p: codec.offset_of(first[0][0], bits) for p, first in firsts.items() if first}


def kafka_fetch(
    bootstrap: str, topic: str, records: int, starts: dict[int, int], config: dict | None = None
) -> tuple[int, float]:
    """A confluent-kafka consumer (``config`` added to its settings) reading ``records``
    records from ``starts`` (each partition's first offset: no ListOffsets, which librdkafka
    sends on a timer of its own), clocked from its start."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "limit",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         **(config or {})})  # fmt: skip
    try:
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, start) for p, start in starts.items()])
        deadline = time.monotonic() + 120
        got = 0
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the consumer read {got} of {records} records")
            wanted = min(10_000, records - got)  # consume(n) waits for n or its timeout
            got += sum(1 for m in consumer.consume(wanted, 1.0) if m.error() is None)
        return got, got / (time.perf_counter() - started)
    finally:
        consumer.close()


def v1_consume(port: int, topic: str) -> tuple[int, float]:
    """Every record of ``topic`` by CONSUME over one connection, a page of each partition a
    round trip, until each answers an empty page. The records are counted, not decoded
    (values are escaped: a ``,`` only separates records)."""
    with Client("127.0.0.1", port, timeout=60) as client:
        position = dict.fromkeys(range(PARTITIONS), 0)
        got = 0
        started = time.perf_counter()
        while position:
            wanted = list(position)
            client.send_raw(
                b"".join(format_request(p, "CONSUME", f"{topic} {p} {position[p]}") for p in wanted)
            )
            for partition in wanted:
                response = parse_response(client.read_line())
                if not response.ok:
                    raise RuntimeError(f"CONSUME: {response.code} {response.message}")
                messages = response.payload.split(" ", 1)[0].removeprefix("messages=")
                if not messages:
                    del position[partition]
                    continue
                got += messages.count(",") + 1
                last = messages[messages.rfind(",") + 1 :]
                position[partition] = int(last.split(":", 1)[0]) + 1
        return got, got / (time.perf_counter() - started)


def redis_py_pages(client: redis.Redis, topic: str) -> tuple[int, float]:
    """Every entry of ``topic``'s logs in XRANGE pages of ``PAGE`` read with redis-py (its
    pipeline, a page of each unfinished log a round trip, replies parsed into its lists):
    the baseline the V1 CONSUME row is held to besides the plain client."""
    keys = Keys(PREFIX)

    def round_trip(wanted: list[tuple[str, Any]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for name, after in wanted:
            pipe.xrange(name, after, "+", count=PAGE)
        return pipe.execute()

    return read_in_pages([keys.partition(topic, p).log for p in range(PARTITIONS)], round_trip)


def v1_produce(port: int, topic: str, records: int, value: bytes) -> tuple[int, float]:
    """``records`` PRODUCEs (acks=1) pipelined over one connection, 1024 a round trip, keys
    ``k0``..``k1023`` (V1 records have a key: it picks the partition)."""
    with Client("127.0.0.1", port, timeout=60) as client:
        done = 0
        started = time.perf_counter()
        while done < records:
            count = min(V1_PIPELINE, records - done)
            client.produce_many(topic, [(b"k%d" % i, value) for i in range(count)])
            done += count
        return done, done / (time.perf_counter() - started)


# --- the sections -----------------------------------------------------------------------


def consumer_config(fetch_max_bytes: int | None) -> dict:
    """The consumer's settings beyond kafka_fetch's own: a ``fetch.max.bytes`` (librdkafka
    wants ``message.max.bytes`` no larger)."""
    if fetch_max_bytes is None:
        return {}
    return {"fetch.max.bytes": fetch_max_bytes,
            "message.max.bytes": min(fetch_max_bytes, 1_000_000)}  # fmt: skip


def kafka_section(
    client: redis.Redis,
    served: Pod,
    port: int,
    records: int,
    value: bytes,
    small: bool,
    fetch_max_bytes: int | None = None,
) -> Section:
    config = KAFKA_SMALL_BATCHES if small else KAFKA_PRODUCER
    name = "kafka-small" if small else "kafka"
    topic = f"limit-{name}-{uuid.uuid4().hex[:8]}"
    create_topic(served.bootstrap, topic)
    produced = kafka_produce(client, served, topic, records, value, config)
    starts = first_offsets(client, topic)
    consumer = consumer_config(fetch_max_bytes)
    fetched = measure(
        client,
        pod_pid(served),
        lambda: kafka_fetch(served.bootstrap, topic, records, starts, consumer),
    )
    plain_produced, plain_fetched = plain_side(client, port, records, value)
    assert plain_fetched is not None
    settings = ", ".join(f"{k} {v}" for k, v in config.items())
    title = (
        f"Kafka{', batches of 4 records' if small else ''}: confluent-kafka producer ({settings},"
        f" null keys) and consumer"
        f"{f' (fetch.max.bytes {fetch_max_bytes})' if fetch_max_bytes is not None else ''}"
        f" through one pod, {PARTITIONS} partitions, RF 1"
    )
    return Section(name, title, (produced, plain_produced), (fetched, plain_fetched))


def v1_section(client: redis.Redis, served: Pod, port: int, records: int, value: bytes) -> Section:
    topic = f"limit-v1-{uuid.uuid4().hex[:8]}"
    create_topic(served.bootstrap, topic)
    produced = measure(
        client, pod_pid(served), lambda: v1_produce(served.port, topic, records, value)
    )
    fetched = measure(client, pod_pid(served), lambda: v1_consume(served.port, topic))
    if fetched.records != produced.records:
        raise RuntimeError(f"CONSUME read {fetched.records} of {produced.records} records")
    plain_produced, plain_fetched = plain_side(client, port, records, value)
    assert plain_fetched is not None
    title = (
        f"V1: PRODUCE acks=1 pipelined over one connection ({V1_PIPELINE} a round trip), "
        f"CONSUME over one connection (a page of each partition a round trip), "
        f"{PARTITIONS} partitions, RF 1"
    )
    read, rate = redis_py_pages(client, topic)
    if read != produced.records:
        raise RuntimeError(f"redis-py XRANGE read {read} of {produced.records} records")
    notes = [
        "V1 records carry a key (k0..k1023, 2-5 bytes: it picks the partition).",
        f"the same logs in XRANGE pages of {PAGE} read with redis-py (a page of each partition"
        f" a round trip): {rate:,.0f} records/s; CONSUME {fetched.records_per_s / rate:.2f}x"
        " that.",
    ]
    return Section("v1", title, (produced, plain_produced), (fetched, plain_fetched), notes)


def spark_section(
    client: redis.Redis, url: str, port: int, records: int, value_size: int
) -> Section:
    from bench import spark_sink

    rows = spark_sink._records(records, value_size)
    topic = f"limit-spark-{uuid.uuid4().hex[:8]}"
    cores = 2

    def work() -> tuple[int, float]:
        seconds = spark_sink.spark_save(url, topic, rows, SPARK_BATCH, cores)
        return stored(client, topic, Keys(), spark_sink.PARTITIONS), records / seconds

    produced = measure(client, None, work)
    if produced.records != records:
        raise RuntimeError(f"the sink stored {produced.records} of {records} rows")
    plain_produced, _ = plain_side(
        client, port, records, rows[0][1], streams=spark_sink.PARTITIONS, fetch=False
    )
    title = (
        f'Spark sink: df.write.format("redis-topics").save(), local[{cores}], batchSize '
        f"{SPARK_BATCH}, {spark_sink.PARTITIONS} partitions, RF 1 (no pod: Spark's tasks write "
        "to Redis)"
    )
    notes = [
        "through the pods: here through the sink.",
        "Spark rows carry a key (k0..k255); the sink's own CPU (Spark's) is not measured, and "
        "a sink does not fetch.",
        f"plain Redis: {spark_sink.PARTITIONS} streams, as the sink's partitions.",
    ]
    return Section("spark", title, (produced, plain_produced), None, notes)


def rf2_costs(client: redis.Redis, url: str, records: int, value: bytes) -> dict[str, float]:
    """Redis's memory and CPU per record of a Kafka producer's records in an RF 2 topic, a
    pod with its replicator copying them to the replica streams: in all (the append and the
    copy), and the replica streams' share of the memory (MEMORY USAGE)."""
    served = pod(url, ["--replicator", "--default-partitions", str(PARTITIONS)])
    try:
        topic = f"limit-rf2-{uuid.uuid4().hex[:8]}"
        create_topic(served.bootstrap, topic, replication=2)
        before = int(client.info("memory")["used_memory"])
        cpu_before = redis_cpu_seconds(client)
        kafka_produce(client, served, topic, records, value, KAFKA_PRODUCER)
        replicas = [Keys(PREFIX).partition(topic, p).replica(1) for p in range(PARTITIONS)]
        deadline = time.monotonic() + 120
        while sum(client.xlen(key) for key in replicas) < records:
            if time.monotonic() > deadline:
                raise RuntimeError("the replicator did not copy every record")
            time.sleep(0.05)
        cpu = redis_cpu_seconds(client) - cpu_before
        after = int(client.info("memory")["used_memory"])
        replica_bytes = sum(client.memory_usage(key, samples=0) or 0 for key in replicas)
    finally:
        served.stop(timeout=30)
    return {
        "bytes_per_record": (after - before) / records,
        "replica_streams_bytes_per_record": replica_bytes / records,
        "redis_cpu_us_per_record": cpu / records * 1e6,
    }


# --- the report -------------------------------------------------------------------------


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or not theirs:
        return None
    return ours / theirs


def table_rows(section: Section) -> list[tuple[str, str, str, str]]:
    """The table's rows: (row, through the pods, plain Redis, ratio), as printed."""

    def number(value: float | None, digits: int) -> str:
        return NO_FIGURE if value is None else f"{value:,.{digits}f}"

    rows = []
    for kind, pair in (("produce", section.produce), ("fetch", section.fetch)):
        if pair is None:
            for label in ("records/s", "Redis CPU µs per record", "pod CPU µs per record"):
                rows.append((f"{kind}, {label}", NO_FIGURE, NO_FIGURE, NO_FIGURE))
            continue
        pods, plain = pair
        rows.append((
            f"{kind}, records/s", number(pods.records_per_s, 0), number(plain.records_per_s, 0),
            number(_ratio(pods.records_per_s, plain.records_per_s), 2),
        ))  # fmt: skip
        rows.append((
            f"{kind}, Redis CPU µs per record", number(pods.redis_cpu_us_per_record, 2),
            number(plain.redis_cpu_us_per_record, 2),
            number(_ratio(pods.redis_cpu_us_per_record, plain.redis_cpu_us_per_record), 2),
        ))  # fmt: skip
        rows.append((
            f"{kind}, pod CPU µs per record", number(pods.pod_cpu_us_per_record, 2), NO_FIGURE,
            number(_ratio(pods.pod_cpu_us_per_record, pods.redis_cpu_us_per_record), 2),
        ))  # fmt: skip
    pods, plain = section.produce
    rows.append((
        "Redis memory, bytes per record", number(pods.memory_bytes_per_record, 0),
        number(plain.memory_bytes_per_record, 0),
        number(_ratio(pods.memory_bytes_per_record, plain.memory_bytes_per_record), 2),
    ))  # fmt: skip
    return rows


def cpu_budget(section: Section) -> list[str]:
    """What a record costs the machine in all (Redis, the pod and the client together), and
    the rate its cores could give at that cost with every part busy at once: on few cores a
    client's own CPU bounds what the pods can reach."""
    cores = os.cpu_count() or 1
    lines = []
    for kind, pair in (("produce", section.produce), ("fetch", section.fetch)):
        if pair is None:
            continue
        pods, plain = pair
        total = [
            side.redis_cpu_us_per_record + (side.pod_cpu_us_per_record or 0.0)
            + side.client_cpu_us_per_record
            for side in (pods, plain)
        ]  # fmt: skip
        bound = f"{cores * 1e6 / total[0]:,.0f}" if total[0] > 0 else NO_FIGURE
        # (the Spark sink has no pod: its client is Spark)
        pod_cpu = pods.pod_cpu_us_per_record
        pod = "" if pod_cpu is None else f" + pod {pod_cpu:.2f}"
        lines.append(
            f"{kind}, CPU a record in all: through the pods {total[0]:.2f} µs (Redis "
            f"{pods.redis_cpu_us_per_record:.2f}{pod} + "
            f"client {pods.client_cpu_us_per_record:.2f}; {pods.cores_busy:.2f} cores busy), "
            f"plain {total[1]:.2f} µs (Redis {plain.redis_cpu_us_per_record:.2f} + client "
            f"{plain.client_cpu_us_per_record:.2f}; {plain.cores_busy:.2f} cores busy); "
            f"{cores} cores give at most {bound} records/s through the pods at that cost."
        )
    return lines


def render(section: Section) -> str:
    lines = [
        f"## {section.title}",
        "",
        "| | through the pods | plain Redis | ratio |",
        "|---|---|---|---|",
        *(f"| {' | '.join(row)} |" for row in table_rows(section)),
        "",
    ]
    if section.produce[0].pod_cpu_us_per_record is not None:
        lines.append("pod CPU rows' ratio: the pod's CPU over Redis's, the same records.")
    lines += cpu_budget(section)
    other = [s.other_work for pair in (section.produce, section.fetch) if pair for s in pair]
    lines.append(
        f"other work on the machine (its busy time less this benchmark's processes): "
        f"{min(other):.0%}-{max(other):.0%} of all cores."
    )
    lines += section.notes
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": os.getloadavg(),
    }


def run(
    records: int,
    value_size: int,
    sections: list[str],
    rf2: bool,
    emit: Callable[[str], None],
    append_module: bool = True,
    fetch_max_bytes: int | None = None,
) -> dict[str, Any]:
    """``append_module`` False: Redis without the streamadapter module (the scripts' own
    XADDs; mapping/connection/append_module.py). ``fetch_max_bytes``: the Kafka consumers'
    fetch.max.bytes (None: librdkafka's default)."""
    value = b"x" * value_size
    document: dict[str, Any] = {
        "records": records, "value_size": value_size, "plain_client": PLAIN_CLIENT,
        "machine": machine(), "sections": {}, "notes": [],
    }  # fmt: skip
    emit(f"plain Redis: {PLAIN_CLIENT}.")
    emit(
        "Redis CPU: INFO cpu, the main thread; pod CPU: /proc/<pid>/stat utime+stime, the pod "
        "and its children; memory: INFO memory used_memory after the writes."
    )
    with (
        tempfile.TemporaryDirectory() as folder,
        RedisProcess(Path(folder), appendonly=False, append_module=append_module) as server,
    ):
        client = redis.Redis.from_url(server.url)
        document["redis_version"] = client.info("server")["redis_version"]
        version = document["redis_version"]
        module = "the streamadapter module" if append_module and library() else "no module"
        document["append_module"] = module != "no module"
        emit(f"{records:,} records of {value_size} bytes a side; Redis {version} ({module}), "
             f"{os.cpu_count()} cores.")  # fmt: skip
        done: list[Section] = []
        pod_sections = [s for s in sections if s != "spark"]
        if pod_sections or rf2:
            served = pod(server.url, ["--default-partitions", str(PARTITIONS)])
            try:
                for name in pod_sections:
                    if name == "v1":
                        section = v1_section(client, served, server.port, records, value)
                    else:
                        small = name == "kafka-small"
                        section = kafka_section(
                            client, served, server.port, records, value, small, fetch_max_bytes
                        )
                    done.append(section)
                    emit("")
                    emit(render(section))
            finally:
                served.stop(timeout=30)
        if "spark" in sections:
            if importlib.util.find_spec("pyspark") is None:
                note = "Spark sink: skipped, pyspark cannot be imported."
                document["notes"].append(note)
                emit("")
                emit(note)
            else:
                section = spark_section(client, server.url, server.port, records, value_size)
                done.append(section)
                emit("")
                emit(render(section))
        if rf2:
            costs = rf2_costs(client, server.url, records, value)
            document["rf2"] = costs
            kafka = next((section for section in done if section.name == "kafka"), None)
            plain_cpu = kafka.produce[1].redis_cpu_us_per_record if kafka is not None else 0
            plain = (
                f" ({costs['redis_cpu_us_per_record'] / plain_cpu:.2f}× the Kafka table's "
                "plain XADD)"
                if plain_cpu
                else ""
            )
            emit("")
            emit(
                f"RF 2 (Kafka producer, linger.ms 5, the replicator on): Redis memory "
                f"{costs['bytes_per_record']:.0f} bytes per record in all, of which "
                f"{costs['replica_streams_bytes_per_record']:.0f} in the replica streams; "
                f"Redis CPU {costs['redis_cpu_us_per_record']:.2f} µs per record, the append "
                f"and its copy{plain}."
            )
        client.close()
    emit("At RF 1 a topic has no replica streams: the memory rows are its logs' (and their "
         "state) alone; RF r adds r-1 replica streams, each a copy of the log.")  # fmt: skip
    for section in done:
        document["sections"][section.name] = {
            "title": section.title,
            "produce": {"pods": asdict(section.produce[0]), "plain": asdict(section.produce[1])},
            "fetch": None if section.fetch is None else {
                "pods": asdict(section.fetch[0]), "plain": asdict(section.fetch[1])
            },
            "table": [list(row) for row in table_rows(section)],
            "notes": section.notes,
        }  # fmt: skip
    return document


@click.command()
@click.option("--records", default=200_000, show_default=True, help="Records a side.")
@click.option("--value-size", default=100, show_default=True, help="Bytes a value.")
@click.option("--sections", default=",".join(SECTIONS), show_default=True,
              help="Which front doors, comma-separated.")  # fmt: skip
@click.option("--rf2/--no-rf2", default=True, show_default=True,
              help="The line of Redis memory and CPU at RF 2 (a pod, its replicator).")  # fmt: skip
@click.option("--short", is_flag=True,
              help="A smoke run: 50,000 records, no Spark, no RF 2 line.")  # fmt: skip
@click.option("--append-module/--no-append-module", default=True, show_default=True,
              help="Redis with the streamadapter module (when built: mapping/connection/"
              "append_module.c), or without it (the scripts' own XADDs).")  # fmt: skip
@click.option("--fetch-max-bytes", type=click.IntRange(1024), default=None,
              help="The Kafka consumers' fetch.max.bytes (default: librdkafka's).")  # fmt: skip
@click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
              help="Write every side's figures as JSON to this file ('-': stdout).")  # fmt: skip
def main(
    records: int,
    value_size: int,
    sections: str,
    rf2: bool,
    append_module: bool,
    short: bool,
    fetch_max_bytes: int | None,
    json_path: Path | None,
) -> None:
    """How close the pods are to plain Redis: records/s, CPU and memory per record."""
    chosen = [s.strip() for s in sections.split(",") if s.strip()]
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        raise click.BadParameter(f"unknown sections {sorted(unknown)}", param_hint="--sections")
    if short:
        records, rf2 = SHORT_RECORDS, False
        chosen = [s for s in chosen if s != "spark"]
    to_stdout = json_path is not None and str(json_path) == "-"
    emit = (lambda line: click.echo(line, err=True)) if to_stdout else click.echo
    document = run(records, value_size, chosen, rf2, emit, append_module, fetch_max_bytes)
    if json_path is not None:
        text = json.dumps(document, indent=2)
        if to_stdout:
            click.echo(text)
        else:
            json_path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
