"""``python -m bench.script_cost``: instructions per record that Redis spends appending, counted
by callgrind (valgrind), so the figures repeat exactly from run to run whatever else the
machine does, unlike a rate.

A ``redis-server`` of its own runs under ``valgrind --tool=callgrind`` collecting only inside
``processInputBuffer`` (parsing the requests, running the commands, queuing the replies); each
shape below is appended ``--calls`` times in batches of ``--records`` records (every size of
the list: large batches beside the small ones a lingering producer sends), in a fresh server
each, and its instructions divided by the records. The baseline is the minimal Redis work for
the same records (docs/performance.md: "the limit is plain Redis"): one pipelined
``XADD <stream> * v <value>`` per record, measured at the same boundary; each shape's ratio to
it is printed, and for the scripts the part inside EVALSHA (``evalShaCommand``; what the
history in docs/performance.md counted: 41k instructions per null-key Kafka record, then 25k).

``--commandstats`` runs the same calls against a redis-server without valgrind and prints
INFO commandstats' microseconds per record inside the command (EVALSHA's, XADD's for the
baseline) and INFO cpu's (Redis's user + system CPU over the run, per record).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import click
import redis
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from mapping.connection import scripts
from mapping.connection.append_module import load_arguments
from mapping.connection.embedded import RedisProcess, free_port
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.core.records import RawRecords, sent_batch
from mapping.partition.kafka import kafka_produce_call, kafka_produce_many_call
from mapping.partition.partition_scripts import PartitionHead, partition_produce_call

VALUE = b"x" * 100
CREATE_TIME = 1_700_000_000_000
PRODUCER_ID = 1000
PLAIN = "plain XADD"

# shape -> the commands appending `records` records as call number `call` on a partition
Build = Callable[[PartitionHead, int, int], list[tuple]]
SHAPES: dict[str, Build] = {
    PLAIN: lambda head, n, call: [("XADD", head.keys.log, "*", "v", VALUE)] * n,
    "kafka null key": lambda head, n, call: [kafka_produce_call(
        head, [(None, VALUE, CREATE_TIME, [])] * n)],
    "kafka null key idempotent": lambda head, n, call: [kafka_produce_call(
        head, [(None, VALUE, CREATE_TIME, [])] * n, producer_id=PRODUCER_ID,
        producer_epoch=0, base_sequence=call * n)],
    "kafka key": lambda head, n, call: [kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [])] * n)],
    "kafka key + header": lambda head, n, call: [kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [("source", b"web")])] * n)],
    "V1 PRODUCE": lambda head, n, call: [partition_produce_call(head, [b"key-1", VALUE] * n)],
    # the same batches written by the streamadapter module's one command
    # (mapping/connection/append_module.c)
    "kafka null key (module)": lambda head, n, call: [kafka_produce_call(
        head, [(None, VALUE, CREATE_TIME, [])] * n, append_module=True)],
    "kafka null key idempotent (module)": lambda head, n, call: [kafka_produce_call(
        head, [(None, VALUE, CREATE_TIME, [])] * n, producer_id=PRODUCER_ID,
        producer_epoch=0, base_sequence=call * n, append_module=True)],
    "kafka key (module)": lambda head, n, call: [kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [])] * n, append_module=True)],
    "kafka key + header (module)": lambda head, n, call: [kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [("source", b"web")])] * n, append_module=True)],
    "V1 PRODUCE (module)": lambda head, n, call: [partition_produce_call(
        head, [b"key-1", VALUE] * n, append_module=True)],
    "V1 PRODUCE (V1PRODUCE)": lambda head, n, call: [partition_produce_call(
        head, [b"key-1", VALUE] * n, append_module=True, produce_module=True)],
    # the batch as a producer sent it, its records read by the module (a Produce's path)
    "kafka null key as sent (module)": lambda head, n, call: [kafka_produce_call(
        head, [], append_module=True, raw=_as_sent(n, None))],
    "kafka key as sent (module)": lambda head, n, call: [kafka_produce_call(
        head, [], append_module=True, raw=_as_sent(n, b"key-1"))],
    # ... and the whole call in the module, no script (STREAMADAPTER.PRODUCE)
    "kafka null key as sent (PRODUCE)": lambda head, n, call: [kafka_produce_call(
        head, [], append_module=True, raw=_as_sent(n, None), produce_module=True)],
    "kafka null key idempotent as sent (PRODUCE)": lambda head, n, call: [kafka_produce_call(
        head, [], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=call * n,
        append_module=True, raw=_as_sent(n, None), produce_module=True)],
    "kafka key as sent (PRODUCE)": lambda head, n, call: [kafka_produce_call(
        head, [], append_module=True, raw=_as_sent(n, b"key-1"), produce_module=True)],
    # ... and batches of 4 records, as many as make the call's records, in one call
    # (STREAMADAPTER.PRODUCEMANY: a pod's small batches of a partition queued together)
    "kafka null key as sent in batches of 4 (PRODUCEMANY)": lambda head, n, call: [
        kafka_produce_many_call(head, [
            sent_batch(_as_sent(min(n, 4), None), -1, -1, -1, 0, False)] * max(1, n // 4))],
    "kafka null key idempotent as sent in batches of 4 (PRODUCEMANY)": lambda head, n, call: [
        kafka_produce_many_call(head, [
            sent_batch(_as_sent(min(n, 4), None), PRODUCER_ID, 0, call * n + first, 86_400_000,
                       False)
            for first in range(0, max(n, 4), 4)])],
    # the Spark sink's chunk of keyed records (spark/sink_append.lua, one writer task)
    "Spark sink": lambda head, n, call: [_sink_chunk(head, n, call, False)],
    "Spark sink (module)": lambda head, n, call: [_sink_chunk(head, n, call, True)],
}  # fmt: skip


def _sink_chunk(head: PartitionHead, records: int, call: int, module: bool) -> tuple:
    """The Spark sink's call for a chunk of ``records`` keyed records, the ``call``-th of
    one task (its replay marker moving on): pairs, packed with the module."""
    from spark_connector.appender import spark_sink_append_call  # the spark extra's
    from spark_connector.sink_records import Record

    chunk = [Record(None, None, b"key-1", VALUE)] * records
    markers = Keys("cost").sink_markers("t", 0)
    return spark_sink_append_call(head, markers, "w:0", 0, call * records, chunk, (), module)


@cache
def _as_sent(records: int, key: bytes | None) -> RawRecords:
    """A RecordBatch of ``records`` plain records as a producer sends it, kept as sent."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for offset in range(records):
        builder.append(offset, CREATE_TIME, key, VALUE, [])
    data = bytes(builder.build())
    return RawRecords(data, CREATE_TIME, records)


@dataclass(frozen=True, slots=True)
class Cost:
    """Instructions per record: all of Redis' request handling, and the part in EVALSHA (or
    in STREAMADAPTER.PRODUCE)."""

    whole: float
    script: float | None


def _head() -> PartitionHead:
    return PartitionHead(Keys("cost").partition("t", 0), codec.DEFAULT_SEQUENCE_BITS, 1, 10_000)


def _load_scripts(client: redis.Redis, commands: list[tuple]) -> None:
    for command in commands:
        if command[0] == "EVALSHA":
            script = scripts.by_sha(command[1])
            assert script is not None
            client.script_load(script.source)


def _run(client: redis.Redis, shape: str, records: int, calls: int) -> None:
    head = _head()
    build = SHAPES[shape]
    _load_scripts(client, build(head, records, 0))
    for call in range(calls):
        pipe = client.pipeline(transaction=False)
        for command in build(head, records, call):
            pipe.execute_command(*command)
        for reply in pipe.execute(raise_on_error=True):
            # kafka/produce.lua answers its status first (0: appended)
            if shape.endswith("(PRODUCEMANY)"):  # a reply of each batch's
                reply = reply[0]
            if shape.startswith("kafka") and reply[0] != 0:
                raise RuntimeError(f"{shape}: the append answered {reply[:5]}")


def _connect(port: int, process: subprocess.Popen[bytes]) -> redis.Redis:
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 60  # valgrind starts slowly
    while True:
        try:
            client.ping()
            return client
        except redis.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start under valgrind") from None
            time.sleep(0.1)


def _inclusive(out: Path, functions: tuple[str, ...]) -> dict[str, int]:
    """Inclusive instructions of ``functions`` in a callgrind output (0: never called)."""
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(out)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = dict.fromkeys(functions, 0)
    for line in annotated.splitlines():
        match = re.match(r"\s*([\d,]+)\s.*:(\w+)(?:\s|$)", line)
        if match and match.group(2) in found:
            found[match.group(2)] = max(found[match.group(2)], int(match[1].replace(",", "")))
    return found


# Commands the run sends besides the appends (their cost is taken off the total).
SETUP = ("pingCommand", "scriptCommand", "shutdownCommand")


def instructions_per_record(
    shape: str, records: int, calls: int, keep: Path | None = None, server: str = "redis-server"
) -> Cost:
    """Instructions per record Redis spends on ``calls`` appends of ``records`` records;
    ``keep``: a folder to copy the callgrind output into (for ``callgrind_annotate``)."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        port = free_port()
        process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--collect-atstart=no", "--toggle-collect=processInputBuffer",
             server, "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", folder, *load_arguments(Path(folder))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = _connect(port, process)
            _run(client, shape, records, calls)
            client.shutdown(nosave=True)
            process.wait(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
        totals = [
            int(line.split()[1])
            for line in out.read_text().splitlines()
            if line.startswith(("totals:", "summary:"))
        ]
        if not totals or not totals[0]:
            raise RuntimeError(
                "callgrind counted nothing in processInputBuffer (a redis-server without symbols?)"
            )
        inclusive = _inclusive(out, (_command_function(shape), *SETUP))
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"\W+", "_", shape).strip("_")
            shutil.copy(out, keep / f"{name}.{records}.callgrind")
    whole = totals[0] - sum(inclusive[name] for name in SETUP)
    script = inclusive[_command_function(shape)] / (records * calls) if shape != PLAIN else None
    return Cost(whole / (records * calls), script)


# the module's commands, by the end of a shape's name: their function, their name
_MODULE_COMMANDS = {
    "(PRODUCE)": ("produce_command", "streamadapter.produce"),
    "(PRODUCEMANY)": ("produce_many_command", "streamadapter.producemany"),
    "(V1PRODUCE)": ("v1_produce_command", "streamadapter.v1produce"),
}


def _module_command(shape: str) -> tuple[str, str] | None:
    return next((c for end, c in _MODULE_COMMANDS.items() if shape.endswith(end)), None)


def _command_function(shape: str) -> str:
    """The function of Redis (or of the module) that runs a shape's call."""
    command = _module_command(shape)
    return command[0] if command else "evalShaCommand"


def _command_stat(shape: str) -> str:
    """A shape's command in INFO commandstats."""
    if shape == PLAIN:
        return "cmdstat_xadd"
    command = _module_command(shape)
    return f"cmdstat_{command[1]}" if command else "cmdstat_evalsha"


@dataclass(frozen=True, slots=True)
class Timing:
    """Microseconds per record: inside the command (INFO commandstats), and Redis' CPU."""

    command_us: float
    cpu_us: float


def _cpu_s(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def commandstats_per_record(client: redis.Redis, shape: str, records: int, calls: int) -> Timing:
    """INFO commandstats and INFO cpu per record over ``calls`` appends (a fresh database)."""
    client.flushall()
    client.config_resetstat()
    cpu = _cpu_s(client)
    _run(client, shape, records, calls)
    cpu = _cpu_s(client) - cpu
    stats: dict[str, Any] = client.info("commandstats")
    return Timing(
        float(stats[_command_stat(shape)]["usec"]) / (records * calls),
        cpu * 1e6 / (records * calls),
    )


def _sizes(text: str) -> list[int]:
    return [int(size) for size in text.split(",") if size.strip()]


@click.command()
@click.option(
    "--records",
    default="500,4",
    show_default=True,
    help="Records per call, one run per size (comma-separated).",
)
@click.option(
    "--total",
    default=4000,
    show_default=True,
    help="Records per shape and size (calls = total / records, at least 2).",
)
@click.option("--shapes", default=",".join(SHAPES), show_default=True, help="Comma-separated.")
@click.option(
    "--commandstats/--no-commandstats",
    default=False,
    show_default=True,
    help="Also time the same calls on a redis-server without valgrind (INFO commandstats, "
    "INFO cpu).",
)
@click.option(
    "--keep", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Keep each run's callgrind output here (callgrind_annotate FILE shows where the "
    "instructions go).",
)  # fmt: skip
@click.option(
    "--server", default="redis-server", show_default=True,
    help="The redis-server to count in (one built with symbols names Lua's own functions).",
)  # fmt: skip
def main(
    records: str, total: int, shapes: str, commandstats: bool, keep: Path | None, server: str
) -> None:
    """Instructions per record Redis spends appending (callgrind), beside plain XADD."""
    if shutil.which("valgrind") is None:
        raise click.ClickException("needs valgrind (apt-get install valgrind)")
    chosen = [shape.strip() for shape in shapes.split(",") if shape.strip()]
    unknown = [shape for shape in chosen if shape not in SHAPES]
    if unknown:
        raise click.ClickException(f"unknown shapes {unknown}; known: {list(SHAPES)}")
    if PLAIN not in chosen:
        chosen.insert(0, PLAIN)
    click.echo(
        f"{'shape':44}{'records':>8}{'per record':>12}{'in command':>12}{'x XADD':>8}"
        "  (instructions)"
    )
    for size in _sizes(records):
        calls = max(2, total // size)
        plain = instructions_per_record(PLAIN, size, calls, keep, server).whole
        for shape in chosen:
            cost = (
                instructions_per_record(shape, size, calls, keep, server)
                if shape != PLAIN
                else None
            )
            whole = cost.whole if cost else plain
            script = f"{cost.script:12,.0f}" if cost and cost.script else f"{'-':>12}"
            click.echo(f"{shape:44}{size:8}{whole:12,.0f}{script}{whole / plain:8.2f}")
    if not commandstats:
        return
    click.echo(
        f"\n{'shape':44}{'records':>8}{'usec in cmd':>12}{'x XADD':>8}{'CPU us':>8}{'x XADD':>8}"
    )
    with tempfile.TemporaryDirectory() as folder:
        server = RedisProcess(Path(folder), appendonly=False).start()
        try:
            client = redis.Redis(port=server.port)
            for size in _sizes(records):
                calls = max(2, total * 5 // size)
                plain_timing = commandstats_per_record(client, PLAIN, size, calls)
                for shape in chosen:
                    timing = (
                        commandstats_per_record(client, shape, size, calls)
                        if shape != PLAIN
                        else plain_timing
                    )
                    click.echo(
                        f"{shape:44}{size:8}{timing.command_us:12.2f}"
                        f"{timing.command_us / plain_timing.command_us:8.2f}"
                        f"{timing.cpu_us:8.2f}{timing.cpu_us / plain_timing.cpu_us:8.2f}"
                    )
            client.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
