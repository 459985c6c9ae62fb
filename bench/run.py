"""``python -m bench``: the raw-Redis baseline and the adapter side by side, in one run.

What runs where (a 2-core machine is the reference):

- one ``redis-server`` started here (``mapping.connection.embedded.RedisProcess``, a free port,
never
  6379; AOF off: the benchmark measures CPU, not the disk), shared by every row; with
  ``--redis-replicas N``, N replicas following it (the cost of ``--adapter-args
  '--redis-wait-replicas 1'``, docs/durability.md);
- the baseline: this process, redis-py + hiredis straight to that Redis, while nothing
  else runs: the adapter's produce script one record per EVALSHA, 1024 per pipeline round
  trip; the same one at a time (the raw round trip); XRANGE ... COUNT 1000 pages, 16 per
  round trip, from the same page starts the CONSUME rows read; the group scripts of the
  groups mix (one member), pipelined and one at a time;
- the adapter: a ``python -m adapter serve`` child process (then ``--workers 2``);
- the load: ``--load-procs`` generator processes (``bench.loadgen``, asyncio + uvloop when
  installed), never inside the adapter's process. On 2 cores Redis, the adapter and the
  generator share the cores (no pinning), so a ratio is what one such machine gets end to
  end; ``--workers 2`` in particular competes with Redis and the generator for the same 2
  cores.

Rows: PRODUCE acks=1 / acks=all, CONSUME and a groups mix (JOIN 1 : HEARTBEAT 4 : COMMIT 5,
each connection its own group; left out with ``--no-groups``) over 1, 16 and 256
connections, pipelined (1024 requests in flight over all connections, at least 2 each;
CONSUME 32) and one at a time; then PRODUCE on one connection
paced at half its one-at-a-time maximum (latency from the real send; the same pace straight
to Redis is measured too, since idling between requests costs wake-ups on a VM); then
PRODUCE through ``--workers 2``; then ``--soak`` seconds of PRODUCE over fresh connections
watching the adapter's RSS. Topics have 3 partitions and one replica (RF 1), so acks=all
measures the waiting path, not a replicator. Ratios: PRODUCE rows against the raw EVALSHA
rate of the same mode, CONSUME against raw XRANGE records/s, the groups mix against the raw
group scripts of the same mode, --workers 2 against one worker.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import redis

from adapter.client import Client
from bench import baseline, compaction, loadgen
from bench.kafka_rows import measure as measure_kafka_rows
from bench.report import Row, format_row, machine, make_row, ratio, targets
from mapping.connection.embedded import RedisProcess
from mapping.core.keys import DEFAULT_PREFIX, Keys
from tests.support.pods import RF1, Pod
from tests.support.procfs import rss_bytes

PARTITIONS = 3
PIPELINE_DEPTH = 1024  # requests in flight per pipelined row, over all its connections
CONSUME_DEPTH = 32  # CONSUME replies are ~1000 records each


# --- the adapter under test ----------------------------------------------------------------


def start_pod(redis_url: str, workers: int, log_dir: Path, extra: list[str]) -> Pod:
    """``python -m adapter serve --workers N`` as a child process, logging into ``log_dir``:
    topics of PARTITIONS partitions and one replica, no replicator, warnings only."""
    return Pod(
        redis_url,
        "--default-partitions", str(PARTITIONS), *RF1, "--no-replicator",
        "--log-level", "WARNING", *extra,
        kafka_port=0, workers=workers, log_dir=log_dir,
    ).start(timeout=30)  # fmt: skip


def _wait_for_replicas(port: int, count: int, timeout_s: float = 60.0) -> None:
    """Until ``count`` replicas finished their first sync with the Redis on ``port``."""
    deadline = time.monotonic() + timeout_s
    with redis.Redis(port=port) as admin:
        while admin.execute_command("WAIT", count, 1000) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} replica(s) not in sync within {timeout_s:g}s")


def _rss_mib(pod: Pod) -> float:
    return sum(rss_bytes(pid) for pid in pod.pids()) / (1 << 20)


# --- the run -------------------------------------------------------------------------------


@dataclass
class Options:
    duration_s: float
    warmup_s: float
    connections: list[int]
    load_procs: int
    value_size: int
    prefill: int
    workers: int
    groups: bool
    soak_s: float
    adapter_args: list[str] = field(default_factory=list)
    kafka_records: int = 200_000  # 0: no Kafka rows
    kafka_latency_s: float = 5.0
    redis_replicas: int = 0  # replicas following the Redis (for --redis-wait-replicas rows)


def prefill_topic(port: int, topic: str, count: int, value_size: int) -> list[tuple[int, int]]:
    """Write ``count`` records through the adapter; return full-page CONSUME starts."""
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    value = b"v" * value_size
    with Client("127.0.0.1", port, timeout=120) as client:
        for start in range(0, count, 5000):
            records = [(f"k{i % 256}", value) for i in range(start, min(count, start + 5000))]
            for reply in client.produce_many(topic, records):
                offsets[reply.partition].append(reply.offset)
    pages = []
    for partition, found in offsets.items():
        for i in range(0, len(found) - 999, 1000):
            pages.append((partition, found[i]))
    if not pages:
        raise click.ClickException("prefill too small for one full CONSUME page")
    return pages


def _window(kind: str, connections: int, pipelined: bool) -> int:
    if not pipelined:
        return 1
    depth = CONSUME_DEPTH if kind == "consume" else PIPELINE_DEPTH
    return max(2, depth // connections)


def _adapter_row(name: str, load: loadgen.Load, workers: int, mode: str) -> Row:
    result = loadgen.run_load(load)
    records = result.records if load.kind == "consume" else result.requests
    row = make_row(name, "adapter", load.connections, mode, result.requests, records,
               load.duration_s, result.histogram, workers=workers, errors=result.errors,
               note=result.error_sample)  # fmt: skip
    row.extra["window"] = load.window
    if load.rate:
        row.extra["offered_per_s"] = load.rate
    return row


def run(options: Options, log: Any = print) -> dict[str, Any]:
    rows: list[Row] = []
    memory: list[dict[str, Any]] = []
    notes: list[str] = []
    keys = Keys(DEFAULT_PREFIX)
    run_id = uuid.uuid4().hex[:6]
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-")))
        # a replica's first sync at once (Redis 7 waits 5 s for more replicas by default)
        fast_sync = ["--repl-diskless-sync-delay", "0"] if options.redis_replicas else []
        server = RedisProcess(tmp / "redis", appendonly=False, extra_args=fast_sync)
        stack.callback(server.stop)
        server.start()
        log(f"redis-server on {server.url}; adapter logs in {tmp}")
        for index in range(options.redis_replicas):
            follow = ["--replicaof", "127.0.0.1", str(server.port)]
            replica = RedisProcess(tmp / f"replica{index}", appendonly=False, extra_args=follow)
            stack.callback(replica.stop)
            replica.start()
        if options.redis_replicas:
            _wait_for_replicas(server.port, options.redis_replicas)
            log(f"{options.redis_replicas} replica(s) in sync")

        def started_pod(workers: int) -> Pod:
            pod = start_pod(server.url, workers, tmp, options.adapter_args)
            stack.callback(pod.stop, timeout=15)
            return pod

        pod = started_pod(1)
        consume_topic = f"bench-c-{run_id}"
        pages = prefill_topic(pod.port, consume_topic, options.prefill, options.value_size)
        log(f"prefilled {options.prefill} records: {len(pages)} full CONSUME pages")

        # (1) the baseline, while nothing else runs
        seconds = options.duration_s
        produce_calls = baseline.produce_calls(keys, f"bench-raw-{run_id}", PARTITIONS,
                                               options.value_size)  # fmt: skip
        m = baseline.pipelined(server.url, produce_calls, seconds, PIPELINE_DEPTH)
        raw_produce = make_row("raw EVALSHA produce", "redis", 1, "pipelined", m.operations,
                           m.records, m.seconds, m.histogram)  # fmt: skip
        m = baseline.round_trips(server.url, produce_calls, seconds)
        raw_rtt = make_row("raw EVALSHA produce", "redis", 1, "one-at-a-time", m.operations,
                       m.records, m.seconds, m.histogram)  # fmt: skip
        m = baseline.xrange_pages(server.url, keys, consume_topic, pages, seconds, 16)
        raw_xrange = make_row("raw XRANGE pages", "redis", 1, "pipelined", m.operations, m.records,
                          m.seconds, m.histogram)  # fmt: skip
        raw_groups: dict[str, Row] = {}
        if options.groups:
            group_calls = baseline.groups_calls(server.url, keys, f"bench-p-{run_id}",
                                                PARTITIONS, f"bench-raw-g-{run_id}")  # fmt: skip
            for mode, m in (
                ("pipelined", baseline.pipelined(server.url, group_calls, seconds,
                                                 PIPELINE_DEPTH)),
                ("one-at-a-time", baseline.round_trips(server.url, group_calls, seconds)),
            ):  # fmt: skip
                raw_groups[mode] = make_row("raw group scripts", "redis", 1, mode, m.operations,
                                        m.records, m.seconds, m.histogram)  # fmt: skip
        rows += [raw_produce, raw_rtt, raw_xrange, *raw_groups.values()]
        for row in rows:
            log(format_row(row))

        # (2) the adapter, one process
        groups_note = "" if options.groups else "groups skipped (--no-groups)"
        if groups_note:
            notes.append(groups_note)
            log(groups_note)
        memory.append({"after": "start", "rss_mib": _rss_mib(pod)})
        workloads = [
            ("PRODUCE acks=1", "produce", "1"),
            ("PRODUCE acks=all", "produce", "all"),
            ("CONSUME", "consume", "1"),
            ("groups mix", "groups", "1"),
        ]
        for name, kind, acks in workloads:
            if kind == "groups" and groups_note:
                continue
            for connections in options.connections:
                for pipelined in (True, False):
                    mode = "pipelined" if pipelined else "one-at-a-time"
                    load = loadgen.Load(
                        port=pod.port,
                        kind=kind,
                        connections=connections,
                        window=_window(kind, connections, pipelined),
                        warmup_s=options.warmup_s,
                        duration_s=options.duration_s,
                        topic=consume_topic if kind == "consume" else f"bench-p-{run_id}",
                        acks=acks,
                        value_size=options.value_size,
                        pages=tuple(pages),
                        group_prefix=f"bench-g-{run_id}-{connections}-{mode}",
                        processes=options.load_procs,
                    )
                    row = _adapter_row(name, load, 1, mode)
                    if kind == "produce":
                        base = raw_produce if pipelined else raw_rtt
                        row.ratio, row.ratio_to = ratio(row.requests_per_s, base), base.mode
                    elif kind == "consume":
                        row.ratio = ratio(row.records_per_s, raw_xrange, records=True)
                        row.ratio_to = "XRANGE records/s"
                    elif mode in raw_groups:
                        row.ratio = ratio(row.requests_per_s, raw_groups[mode])
                        row.ratio_to = f"raw group scripts {mode}"
                    rows.append(row)
                    memory.append({"after": f"{name} {connections} {mode}",
                                   "rss_mib": _rss_mib(pod)})  # fmt: skip
                    log(format_row(row))

        # unpipelined PRODUCE on one connection at half its one-at-a-time maximum: the
        # latency of a request that never queues behind another
        single = [r for r in rows if r.system == "adapter" and r.name == "PRODUCE acks=1"
                  and r.mode == "one-at-a-time" and r.connections == 1]  # fmt: skip
        if single:
            load = loadgen.Load(
                port=pod.port,
                kind="produce",
                connections=1,
                rate=single[0].requests_per_s / 2,
                warmup_s=options.warmup_s,
                duration_s=options.duration_s,
                topic=f"bench-p-{run_id}",
                value_size=options.value_size,
                processes=options.load_procs,
            )
            row = _adapter_row("PRODUCE acks=1 @ half max", load, 1, "paced")
            if row.p99_us and raw_rtt.p99_us:
                row.ratio, row.ratio_to = row.p99_us / raw_rtt.p99_us, "p99 / raw EVALSHA p99"
            # The same pace straight to Redis: shows what idling between requests costs
            # on this machine (wake-ups), apart from the adapter.
            m = baseline.round_trips(server.url, produce_calls, seconds, rate=load.rate)
            raw_paced = make_row("raw EVALSHA produce", "redis", 1, "paced", m.operations,
                             m.records, m.seconds, m.histogram)  # fmt: skip
            if row.p99_us and raw_paced.p99_us:
                row.extra["p99_vs_raw_paced_p99"] = row.p99_us / raw_paced.p99_us
                row.ratio_to += f" ({row.p99_us / raw_paced.p99_us:.2f}x raw paced p99)"
            rows += [row, raw_paced]
            log(format_row(row))
            log(format_row(raw_paced))
        memory.append({"after": "all one-worker rows", "rss_mib": _rss_mib(pod)})
        if options.soak_s > 0:
            memory += _soak(pod, options, f"bench-soak-{run_id}", log)
        pod.stop(timeout=15)

        # (3) --workers N against one worker, same load
        if options.workers > 1:
            pod = started_pod(options.workers)
            for connections in sorted({16, max(options.connections)}):
                load = loadgen.Load(
                    port=pod.port,
                    kind="produce",
                    connections=connections,
                    window=_window("produce", connections, True),
                    warmup_s=options.warmup_s,
                    duration_s=options.duration_s,
                    topic=f"bench-p-{run_id}",
                    value_size=options.value_size,
                    processes=options.load_procs,
                )
                row = _adapter_row("PRODUCE acks=1", load, options.workers, "pipelined")
                single = next((r for r in rows if r.name == "PRODUCE acks=1" and r.workers == 1
                               and r.mode == "pipelined" and r.connections == connections),
                              None)  # fmt: skip
                if single is not None:
                    row.ratio, row.ratio_to = ratio(row.requests_per_s, single), "1 worker"
                rows.append(row)
                log(format_row(row))
            pod.stop(timeout=15)

        # (4) the Kafka front door (bench/kafka.py), each row with its baseline
        if options.kafka_records > 0:
            kafka_rows = measure_kafka_rows(
                server.url, options.kafka_records, options.kafka_latency_s, options.adapter_args
            )
            rows += kafka_rows
            for row in kafka_rows:
                log(format_row(row))
        else:
            notes.append("Kafka rows skipped (--no-kafka)")

        # (5) compaction (bench/compaction.py: a Redis of its own), beside produce on idle Redis
        compaction_rows = compaction.rows(
            min(options.prefill * 4, 200_000), 1_000, options.duration_s
        )
        rows += compaction_rows
        for row in compaction_rows:
            log(format_row(row))

    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "options": options.__dict__,
        "rows": [row.__dict__ for row in rows],
        "memory": memory,
        "notes": notes,
        "targets": targets(rows),
    }


def _soak(pod: Pod, options: Options, topic: str, log: Any) -> list[dict[str, Any]]:
    """Sustained pipelined PRODUCE over 64 connections that come and go (a new set every
    step), RSS after each step: growth per request or per connection would show here."""
    samples = []
    steps = 6
    for step in range(steps):
        load = loadgen.Load(
            port=pod.port,
            kind="produce",
            connections=64,
            window=_window("produce", 64, True),
            warmup_s=0.1,
            duration_s=options.soak_s / steps,
            topic=topic,
            value_size=options.value_size,
            processes=options.load_procs,
        )
        result = loadgen.run_load(load)
        sample = {"after": f"soak step {step + 1}/{steps}", "rss_mib": _rss_mib(pod),
                  "requests": result.requests, "errors": result.errors}  # fmt: skip
        log(f"soak {sample}")
        samples.append(sample)
    return samples
