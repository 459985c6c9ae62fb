"""The workloads of ``python -m bench.scale``: each measures the pods under its load and the
same work straight to Redis, in the same run, with the same number of load processes.

A workload is a function of a ``Stage`` (a running deployment, the load processes to use,
the options, what earlier workloads left for later ones) returning a ``Pair``; ``WORKLOADS``
lists them in the order they run. A new kind of row is one more function there, as the idle
rows are (their baseline: the same deployment with no client; their numbers: CPU).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench import baseline, loadgen
from bench.kafka import RAW_BATCH
from bench.scale import commands, harness, idle, kafka_load, raw
from bench.scale.deployment import KEYS, Deployment
from bench.scale.report import Pair, Side
from mapping.core import codec
from mapping.partition.kafka import KAFKA_PRODUCE, kafka_produce_call
from mapping.partition.partition_scripts import PARTITION_PRODUCE, PartitionHead

TIMEOUT_S = 900.0  # a load process's report, at the latest
PIPELINE_DEPTH = 1024  # V1 PRODUCE requests in flight, over all connections (as bench/run.py)
CONSUME_DEPTH = 32  # V1 CONSUME requests in flight (each ~1000 records)
MAX_PAGES = 256  # V1 CONSUME page starts


@dataclass(frozen=True)
class Options:
    records: int  # Kafka produce, over all producers
    duration_s: float  # each V1 and idle row
    warmup_s: float
    partitions: int
    value_size: int
    consumers: int | None  # Kafka fetch (None: as many as loaders)
    v1_connections: int  # per pod
    idle_partitions: int = 2000
    idle_consumers: int = 10
    idle_connections: int = 1000  # over all pods
    batch_records: int = 10_000  # librdkafka's batch.num.messages


@dataclass
class Stage:
    deployment: Deployment
    loaders: int
    options: Options
    left: dict[str, Any] = field(default_factory=dict)  # from a workload to a later one

    @property
    def watched(self) -> dict[str, list[int]]:
        return {"pods": self.deployment.pod_pids(), "redis": self.deployment.redis_pids()}

    def commands(self) -> commands.Reading:
        """Every primary's command statistics now (harness.run's probe)."""
        return commands.read(self.deployment.node_ports)

    def split(self, total: int, parts: int) -> list[int]:
        return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _side(outcome: harness.Outcome, **extra: Any) -> Side:
    if outcome.probed is not None:  # Redis' work per record, by command
        extra["redis_per_record"] = commands.per_record(*outcome.probed, outcome.records)
    extra["process_spans_s"] = outcome.spans
    return Side(outcome.records, outcome.rate, outcome.cpu, outcome.errors, outcome.note,
                extra)  # fmt: skip


def kafka_produce(stage: Stage) -> Pair:
    """confluent-kafka producers (one per load process, bootstrapped to every pod) writing
    ``records`` into a topic whose partitions spread over the primaries; raw: the same
    number of processes appending batches of the size librdkafka made (its statistics),
    one ``kafka/produce.lua`` call each, a call per partition a round."""
    d, o = stage.deployment, stage.options
    topic = d.spread_topic("scale-k")
    d.create_kafka_topic(topic)
    shares = stage.split(o.records, stage.loaders)
    outcome = harness.run(
        kafka_load.produce,
        [(d.bootstrap, topic, o.partitions, n, o.value_size, o.batch_records) for n in shares],
        stage.watched, TIMEOUT_S, probe=stage.commands,
    )  # fmt: skip
    made = sum(r.extra.get("batch_records", 0) for r in outcome.reports)
    batches = sum(r.extra.get("batches", 0) for r in outcome.reports)
    batch = round(made / batches) if batches else RAW_BATCH
    stored = d.stored(topic)
    stage.left["kafka_topic"], stage.left["kafka_stored"] = topic, stored
    adapter = _side(outcome, stored=stored, warmup_records=stage.loaders * o.partitions,
                    records_per_batch=batch, batch_from="librdkafka statistics" if batches
                    else f"none reported: bench/kafka.py's {RAW_BATCH}")  # fmt: skip

    raw_topic = d.spread_topic("scale-kr")
    value = b"x" * o.value_size
    work = []
    for p in range(o.partitions):
        keys = KEYS.partition(raw_topic, p)
        head = PartitionHead(keys, codec.DEFAULT_SEQUENCE_BITS, 1, 10_000)
        records = [(None, value, int(time.time() * 1000), [])] * batch
        work.append((d.node_of(keys.log), kafka_produce_call(head, records), batch))
    outcome = harness.run(
        raw.calls,
        [(d.node_ports, (KAFKA_PRODUCE.source,), work, n, 0.0, o.partitions) for n in shares],
        stage.watched, TIMEOUT_S, probe=stage.commands,
    )  # fmt: skip
    spread = [0] * len(d.node_ports)
    for p in range(o.partitions):
        spread[d.node_of(KEYS.partition(topic, p).log)] += 1
    raw_side = _side(outcome, records_per_batch=batch)
    return Pair("Kafka produce", adapter, raw_side, {"partitions_per_primary": spread})


def kafka_fetch(stage: Stage) -> Pair:
    """``consumers`` confluent-kafka consumers of one group reading kafka_produce's topic
    from the start, clocked from the first record (the group settled first); raw: as many
    processes paging the same logs with XRANGE, the partitions dealt round-robin."""
    d, o = stage.deployment, stage.options
    topic, stored = stage.left["kafka_topic"], stage.left["kafka_stored"]
    count = o.consumers or stage.loaders
    assigned = harness.CONTEXT.Array("i", count)
    group = f"scale-g-{uuid.uuid4().hex[:8]}"
    outcome = harness.run(
        kafka_load.consume,
        [(d.bootstrap, topic, group, i, assigned) for i in range(count)],
        stage.watched, TIMEOUT_S, settled=_settled(assigned, o.partitions), probe=stage.commands,
    )  # fmt: skip
    held = [r.extra.get("partitions") for r in outcome.reports]
    adapter = _side(outcome, consumers=count, stored=stored, partitions_per_consumer=held)
    logs = [(d.node_of(KEYS.partition(topic, p).log), KEYS.partition(topic, p).log)
            for p in range(o.partitions)]  # fmt: skip
    outcome = harness.run(
        raw.read_logs, [(d.node_ports, logs[i::count]) for i in range(count)],
        stage.watched, TIMEOUT_S, probe=stage.commands,
    )  # fmt: skip
    return Pair("Kafka fetch", adapter, _side(outcome, processes=count))


def _settled(assigned: Any, partitions: int) -> Callable[[], bool]:
    """True once every partition is assigned, each consumer holding some (when there are
    enough partitions), unchanged for half a second: the group is stable."""
    seen: dict[str, Any] = {"state": None, "since": 0.0}

    def settled() -> bool:
        state = list(assigned[:])
        if sum(state) != partitions or (len(state) <= partitions and min(state) == 0):
            seen["state"] = None
            return False
        if state != seen["state"]:
            seen["state"], seen["since"] = state, time.monotonic()
        return time.monotonic() - seen["since"] >= 0.5

    return settled


def _v1_load(stage: Stage, kind: str, topic: str, depth: int, **kw: Any) -> loadgen.Load:
    d, o = stage.deployment, stage.options
    connections = o.v1_connections * len(d.pods)
    return loadgen.Load(
        port=d.v1_ports[0], ports=d.v1_ports, kind=kind, connections=connections,
        window=max(2, depth // connections), warmup_s=o.warmup_s, duration_s=o.duration_s,
        topic=topic, value_size=o.value_size, processes=stage.loaders,
        watch_pids=(*d.pod_pids(), *d.redis_pids()), **kw,
    )  # fmt: skip


def _v1_side(stage: Stage, load: loadgen.Load) -> Side:
    result = loadgen.run_load(load)
    records = result.records if load.kind == "consume" else result.requests
    seconds = load.duration_s
    pods = len(stage.deployment.pod_pids())
    watched = [used / seconds for used in result.cpu.watched]
    cpu = {"pods": watched[:pods], "redis": watched[pods:],
           "loaders": [used / seconds for used in result.cpu.loaders],
           "host": [] if result.cpu.host is None else [result.cpu.host]}  # fmt: skip
    return Side(records, records / seconds, cpu, result.errors, result.error_sample,
                {"connections": load.connections, "window": load.window})  # fmt: skip


def v1_produce(stage: Stage) -> Pair:
    """Pipelined V1 PRODUCE (acks=1) from bench/loadgen.py's processes over connections
    spread on every pod, for ``duration_s``; raw: the pods' ``partition/produce.lua``, one
    record per call (as bench/run.py's baseline), as many requests in flight."""
    d, o = stage.deployment, stage.options
    topic = d.spread_topic("scale-v")
    stage.left["v1_topic"] = topic
    adapter = _v1_side(stage, _v1_load(stage, "produce", topic, PIPELINE_DEPTH))
    calls = baseline.produce_calls(KEYS, d.spread_topic("scale-vr"), o.partitions, o.value_size)
    work = [(d.node_of(call[3]), call, 1) for call in calls]  # call[3]: the log's key
    per_round = max(16, PIPELINE_DEPTH // stage.loaders)
    args = (d.node_ports, (PARTITION_PRODUCE.source,), work, 0, o.duration_s, per_round)
    outcome = harness.run(raw.calls, [args] * stage.loaders, stage.watched, TIMEOUT_S)
    return Pair("V1 PRODUCE", adapter, _side(outcome))


def v1_consume(stage: Stage) -> Pair:
    """Pipelined V1 CONSUME of v1_produce's topic from page starts 1,000 records apart,
    for ``duration_s``; raw: XRANGE ... COUNT 1000 from the same starts."""
    d, o = stage.deployment, stage.options
    topic = stage.left["v1_topic"]
    pages = _page_starts(d, topic)
    load = _v1_load(stage, "consume", topic, CONSUME_DEPTH, pages=tuple(pages))
    adapter = _v1_side(stage, load)
    work = []
    for partition, offset in pages:
        log = KEYS.partition(topic, partition).log
        start = codec.entry_id(offset, codec.DEFAULT_SEQUENCE_BITS)
        work.append((d.node_of(log), ("XRANGE", log, start, "+", "COUNT", raw.PAGE), 0))
    per_round = max(4, CONSUME_DEPTH // stage.loaders)
    args = (d.node_ports, (), work, 0, o.duration_s, per_round)
    outcome = harness.run(raw.calls, [args] * stage.loaders, stage.watched, TIMEOUT_S)
    return Pair("V1 CONSUME", adapter, _side(outcome), {"pages": len(pages)})


def _page_starts(d: Deployment, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every 1,000th record of each partition (its first included),
    at most MAX_PAGES in all."""
    per_partition = max(1, MAX_PAGES // d.partitions)
    pages = []
    for p in range(d.partitions):
        log = KEYS.partition(topic, p).log
        client = redis.Redis(port=d.node_ports[d.node_of(log)], socket_timeout=60)
        with contextlib.closing(client):
            after = "-"
            for _ in range(per_partition):
                page = client.xrange(log, after, "+", count=raw.PAGE)
                if not page:
                    break
                pages.append((p, codec.entry_offset(page[0][0])))
                after = b"(" + page[-1][0]
    return pages


def _no_clients(stage: Stage) -> Side:
    """The pods and Redis with no client, over ``duration_s``: an idle row's baseline."""
    outcome = harness.run(idle.nothing, [(stage.options.duration_s,)], stage.watched, TIMEOUT_S)
    outcome.cpu.pop("loaders")  # (a process that sleeps)
    return _side(outcome)


def idle_consumers(stage: Stage) -> Pair:
    """``idle_consumers`` confluent-kafka consumers of one group, caught up on a topic of
    ``idle_partitions`` partitions, long-polling for ``duration_s``: the CPU the pods and
    Redis spend on them, beside the same deployment with no client (records: those read,
    none expected)."""
    d, o = stage.deployment, stage.options
    topic = f"scale-idle-{uuid.uuid4().hex[:8]}"
    d.create_kafka_topic(topic, o.idle_partitions)
    baseline_side = _no_clients(stage)
    assigned = harness.CONTEXT.Array("i", o.idle_consumers)
    group = f"scale-idle-{uuid.uuid4().hex[:8]}"
    outcome = harness.run(
        idle.consumer,
        [(d.bootstrap, topic, group, i, assigned, o.duration_s) for i in range(o.idle_consumers)],
        stage.watched, TIMEOUT_S, settled=_settled(assigned, o.idle_partitions),
    )  # fmt: skip
    what = f"{o.idle_consumers} consumers idle on {o.idle_partitions} partitions"
    return Pair("idle consumers", _side(outcome), baseline_side, {"idle": what})


def idle_connections(stage: Stage) -> Pair:
    """``idle_connections`` V1 connections spread over the pods, silent for ``duration_s``
    after one PING each, beside the same deployment with no client (records: the
    connections still open at the end)."""
    d, o = stage.deployment, stage.options
    baseline_side = _no_clients(stage)
    shares = stage.split(o.idle_connections, stage.loaders)
    outcome = harness.run(
        idle.connections, [(d.v1_ports, n, o.duration_s) for n in shares if n],
        stage.watched, TIMEOUT_S,
    )  # fmt: skip
    what = f"{o.idle_connections} idle V1 connections"
    return Pair("idle conns", _side(outcome), baseline_side, {"idle": what})


# name -> (workload, the workloads it needs first); the idle rows only when asked for
WORKLOADS: dict[str, tuple[Callable[[Stage], Pair], tuple[str, ...]]] = {
    "kafka-produce": (kafka_produce, ()),
    "kafka-fetch": (kafka_fetch, ("kafka-produce",)),
    "v1-produce": (v1_produce, ()),
    "v1-consume": (v1_consume, ("v1-produce",)),
    "idle-consumers": (idle_consumers, ()),
    "idle-connections": (idle_connections, ()),
}
THROUGHPUT = ("kafka-produce", "kafka-fetch", "v1-produce", "v1-consume")
IDLE = ("idle-consumers", "idle-connections")
