"""The load generator: V1 connections driven from their own processes.

Each process runs an asyncio loop (uvloop when installed) with ``asyncio.Protocol``
connections that keep a fixed window of requests in flight (``window=1``: one at a time), or,
with ``rate``, send one request at a time on a fixed schedule (latency is measured from the
scheduled send time, so a stalled server cannot hide its queueing). Replies are counted in
bulk (newlines, ``|ERR|``, commas for CONSUME records), so a generator process costs far less
per request than the adapter it drives. ``ports`` spreads the connections over several pods;
each process reports the CPU it used inside the measured window, and the first one that of
``watch_pids`` (pods, Redis) and of the whole machine over the same window.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import multiprocessing
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from bench.stats import Histogram
from tests.support.procfs import cpu_seconds, host_cpu_seconds

CYCLE = 4096  # distinct request lines per connection, sent round and round


@dataclass(frozen=True)
class Load:
    port: int
    kind: str  # "produce", "consume" or "groups"
    connections: int
    window: int = 1  # requests in flight per connection
    rate: float | None = None  # total requests/s, one at a time per connection
    warmup_s: float = 0.5
    duration_s: float = 2.0
    topic: str = "bench"
    acks: str = "1"
    value_size: int = 100
    keys: int = 256
    pages: tuple[tuple[int, int], ...] = ()  # CONSUME start positions (partition, offset)
    group_prefix: str = "bench-g"
    processes: int = 1
    ports: tuple[int, ...] = ()  # several pods: connection i goes to ports[i % len(ports)]
    watch_pids: tuple[int, ...] = ()  # processes whose CPU the first generator samples


@dataclass
class Cpu:
    """CPU seconds used inside the measured window: by each generator process (``loaders``)
    and by each of ``Load.watch_pids`` (``watched``), and the machine's busy share of all its
    cores (``host``), the last two sampled by the first process."""

    loaders: list[float] = field(default_factory=list)
    watched: list[float] = field(default_factory=list)
    host: float | None = None


@dataclass
class Result:
    requests: int = 0
    records: int = 0
    errors: int = 0
    error_sample: str = ""
    histogram: Histogram = field(default_factory=Histogram)
    cpu: Cpu = field(default_factory=Cpu)

    def merge(self, other: Result) -> None:
        self.requests += other.requests
        self.records += other.records
        self.errors += other.errors
        self.error_sample = self.error_sample or other.error_sample
        self.histogram.merge(other.histogram)
        self.cpu.loaders += other.cpu.loaders
        if not self.cpu.watched and other.cpu.host is not None:
            self.cpu.watched, self.cpu.host = other.cpu.watched, other.cpu.host


def _lines(
    load: Load, conn: int, generation: str = "", assigned: list[int] | None = None
) -> list[bytes]:
    value = ("v" * load.value_size)[: load.value_size]
    lines: list[str] = []
    if load.kind == "produce":
        for i in range(CYCLE):
            key = (conn * 7919 + i) % load.keys
            lines.append(f"V1|{i}|PRODUCE|{load.topic} k{key}:{value} acks={load.acks}")
    elif load.kind == "consume":
        pages = load.pages
        start = conn * 13
        for i in range(CYCLE):
            partition, offset = pages[(start + i) % len(pages)]
            lines.append(f"V1|{i}|CONSUME|{load.topic} {partition} {offset}")
    elif load.kind == "groups":
        group, member = f"{load.group_prefix}-{conn}", f"c{conn}"
        owned = assigned or [0]
        for i in range(CYCLE):
            step = i % 10
            if step == 0:  # a current member re-joining: no rebalance
                lines.append(f"V1|{i}|JOIN|{group} {load.topic} {member}")
            elif step < 5:
                lines.append(f"V1|{i}|HEARTBEAT|{group} {load.topic} {member} {generation}")
            else:
                partition = owned[i % len(owned)]
                lines.append(
                    f"V1|{i}|COMMIT|{group} {load.topic} {member} {generation} {partition} {i}"
                )
    else:
        raise ValueError(f"unknown workload {load.kind}")
    return [(line + "\n").encode() for line in lines]


class _Connection(asyncio.Protocol):
    def __init__(self, runner: _Runner, conn: int) -> None:
        self.runner = runner
        self.conn = conn
        self.lines: list[bytes] = []
        self.position = 0
        self.in_flight: collections.deque[list[float | int]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.setup: asyncio.Future[bytes] | None = None
        self.setup_buffer = b""
        self.tail = b""
        self.closed = asyncio.get_running_loop().create_future()
        self.next_due = 0.0
        self.interval = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self.setup is not None and not self.setup.done():
            self.setup.set_exception(ConnectionError("closed during setup"))

    async def request_once(self, line: bytes) -> bytes:
        """A setup request (JOIN) before the clock starts."""
        self.setup = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(line)
        return await self.setup

    def send(self, count: int, sent_at: float) -> None:
        lines, position = self.lines, self.position
        end = position + count
        if end <= len(lines):
            data = b"".join(lines[position:end])
        else:
            end -= len(lines)
            data = b"".join(lines[position:]) + b"".join(lines[:end])
        self.position = end
        self.in_flight.append([sent_at, count])
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self.setup is not None and not self.setup.done():
            self.setup_buffer += data
            if b"\n" in self.setup_buffer:
                self.setup.set_result(self.setup_buffer)
                self.setup_buffer = b""
            return
        runner = self.runner
        now = time.perf_counter()
        done = data.count(b"\n")
        errors = data.count(b"|ERR|") + (self.tail + data[:4]).count(b"|ERR|")
        self.tail = data[-4:]
        measuring = runner.measure_from <= now <= runner.measure_until
        if errors and measuring:
            runner.result.errors += errors
            if not runner.result.error_sample:
                at = data.find(b"|ERR|")
                runner.result.error_sample = data[max(0, at - 20) : at + 120].decode(
                    errors="replace"
                )
        if measuring and runner.load.kind == "consume":
            runner.result.records += data.count(b",") + done
        remaining = done
        histogram = runner.result.histogram
        while remaining and self.in_flight:
            entry = self.in_flight[0]
            take = min(remaining, int(entry[1]))
            if measuring:
                histogram.add(now - float(entry[0]), take)
                runner.result.requests += take
            remaining -= take
            if take == entry[1]:
                self.in_flight.popleft()
            else:
                entry[1] = int(entry[1]) - take
        if now >= runner.stop_at:
            if not self.in_flight and self.transport is not None:
                self.transport.close()
            return
        if runner.load.rate:
            self.next_due += self.interval
            if self.next_due <= now:  # overdue: the reply came back late
                self.send(1, now)
            else:
                asyncio.get_running_loop().call_later(self.next_due - now, self._send_due)
        elif done:
            self.send(done, now)

    def _send_due(self) -> None:
        now = time.perf_counter()
        if now < self.runner.stop_at:
            # Timers fire up to ~1 ms late: that delay is the generator's, not the server's,
            # so the clock starts at the real send (the schedule itself does not drift).
            self.send(1, now)
        elif self.transport is not None:
            self.transport.close()


class _Runner:
    def __init__(self, load: Load, first_conn: int, count: int, start_at: float) -> None:
        self.load = load
        self.first_conn = first_conn
        self.count = count
        self.result = Result()
        self._window(start_at)

    def _window(self, start_at: float) -> None:
        self.start_at = start_at
        self.measure_from = start_at + self.load.warmup_s
        self.measure_until = self.measure_from + self.load.duration_s
        self.stop_at = self.measure_until

    async def run(self) -> Result:
        loop = asyncio.get_running_loop()
        connections: list[_Connection] = []
        ports = self.load.ports or (self.load.port,)
        for i in range(self.count):
            conn = self.first_conn + i
            _, protocol = await loop.create_connection(
                lambda c=conn: _Connection(self, c), "127.0.0.1", ports[conn % len(ports)]
            )
            connections.append(protocol)
        try:
            for protocol in connections:
                await self._prepare(protocol)
        except BaseException:
            for protocol in connections:
                if protocol.transport is not None:
                    protocol.transport.close()
            raise
        await asyncio.sleep(max(0.0, self.start_at - time.perf_counter()))
        now = time.perf_counter()
        if now > self.start_at + 0.05:
            # This process came up late (a loaded machine): its window starts now, whole.
            self._window(now)
        load = self.load
        for protocol in connections:
            if load.rate:
                protocol.interval = load.connections / load.rate
                protocol.next_due = now + random.random() * protocol.interval
                loop.call_later(protocol.next_due - now, protocol._send_due)
            else:
                protocol.send(load.window, now)
        # CPU at the window's edges (its start by a timer: a few ms late on a busy loop)
        first = self.first_conn == 0
        watched = load.watch_pids if first else ()
        edges: list[list[float]] = []

        def sample() -> None:
            host = host_cpu_seconds() if first else (0.0, 0.0)
            edges.append([*host, time.process_time(), *(cpu_seconds(pid) for pid in watched)])

        loop.call_later(max(0.0, self.measure_from - time.perf_counter()), sample)
        await asyncio.sleep(max(0.0, self.stop_at - time.perf_counter()))
        sample()  # stop_at is the window's end
        if len(edges) == 2:
            busy, all_cores, *used = [end - begin for begin, end in zip(*edges, strict=True)]
            host = busy / all_cores if first and all_cores else None
            self.result.cpu = Cpu(loaders=used[:1], watched=used[1:], host=host)
        # Let what is in flight come back (bounded), then close.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.gather(*(p.closed for p in connections))
        for protocol in connections:
            if protocol.transport is not None:
                protocol.transport.close()
        return self.result

    async def _prepare(self, protocol: _Connection) -> None:
        load = self.load
        if load.kind != "groups":
            protocol.lines = _lines(load, protocol.conn)
            return
        group, member = f"{load.group_prefix}-{protocol.conn}", f"c{protocol.conn}"
        reply = await protocol.request_once(f"V1|0|JOIN|{group} {load.topic} {member}\n".encode())
        text = reply.decode(errors="replace").strip()
        if "|OK|" not in text:
            # a failed JOIN fails the workload (an error in its row), never a skipped row
            raise RuntimeError(f"JOIN failed: {text}")
        fields = dict(
            part.split("=", 1) for part in text.split("|OK|", 1)[1].split(" ") if "=" in part
        )
        assigned_text = text.split("assigned=", 1)[1] if "assigned=" in text else "[0]"
        assigned = [int(x) for x in assigned_text.strip("[]").split() if x.isdigit()] or [0]
        protocol.lines = _lines(load, protocol.conn, fields.get("generation", "1"), assigned)


def _event_loop_policy() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _process_main(load: Load, first_conn: int, count: int, start_at: float, out: Any) -> None:
    _event_loop_policy()
    try:
        result = asyncio.run(_Runner(load, first_conn, count, start_at).run())
    except Exception as exc:  # reported to the parent, which prints it in the row
        result = Result(errors=1, error_sample=f"load generator failed: {exc!r}")
    out.send(result)
    out.close()


def run_load(load: Load) -> Result:
    """Drive the adapter with ``load`` from ``load.processes`` generator processes."""
    context = multiprocessing.get_context("spawn")
    processes = max(1, min(load.processes, load.connections))
    # Spawning takes a while; every process starts sending at the same instant.
    start_at = time.perf_counter() + 0.8 + 0.002 * load.connections
    workers = []
    first = 0
    for i in range(processes):
        count = load.connections // processes + (1 if i < load.connections % processes else 0)
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(
            target=_process_main, args=(load, first, count, start_at, writer), daemon=True
        )
        process.start()
        writer.close()
        workers.append((process, reader))
        first += count
    total = Result()
    for process, reader in workers:
        timeout = load.warmup_s + load.duration_s + 60
        if reader.poll(timeout):
            total.merge(reader.recv())
        else:
            total.merge(Result(errors=1, error_sample="load generator did not report"))
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
    return total
