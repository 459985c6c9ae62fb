"""``python -m bench.script_cost``: instructions per record that Redis spends inside the append
scripts, counted by callgrind (valgrind), so the figure repeats exactly from run to run
whatever else the machine does, unlike a rate.

A ``redis-server`` of its own runs under ``valgrind --tool=callgrind`` collecting only inside
EVALSHA (``--toggle-collect=evalShaCommand``); each shape below is appended ``--calls`` times
in batches of ``--records`` records, in a fresh server each, and its instructions divided by
the records. This is how the float formatting in the append path was found (see
docs/performance.md): 41k instructions per null-key Kafka record before, 25k after.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click
import redis

from mapping.connection import scripts
from mapping.connection.embedded import free_port
from mapping.core import codec
from mapping.core.keys import Keys
from mapping.partition.kafka import kafka_produce_call
from mapping.partition.partition_scripts import PartitionHead, partition_produce_call

VALUE = b"x" * 100
CREATE_TIME = 1_700_000_000_000

# shape -> the append of `records` records as a call on a partition
SHAPES: dict[str, Callable[[PartitionHead, int], tuple]] = {
    "kafka null key": lambda head, n: kafka_produce_call(
        head, [(None, VALUE, CREATE_TIME, [])] * n),
    "kafka key": lambda head, n: kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [])] * n),
    "kafka key + header": lambda head, n: kafka_produce_call(
        head, [(b"key-1", VALUE, CREATE_TIME, [("source", b"web")])] * n),
    "V1 PRODUCE": lambda head, n: partition_produce_call(head, [b"key-1", VALUE] * n),
}  # fmt: skip


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


def instructions_per_record(shape: str, records: int, calls: int) -> float:
    """Instructions inside EVALSHA per record for ``calls`` appends of ``records`` records."""
    head = PartitionHead(Keys("cost").partition("t", 0), codec.DEFAULT_SEQUENCE_BITS, 1, 10_000)
    command = SHAPES[shape](head, records)
    script = scripts.by_sha(command[1])
    assert script is not None
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        port = free_port()
        process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             "--collect-atstart=no", "--toggle-collect=evalShaCommand",
             "redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
             "--dir", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = _connect(port, process)
            client.script_load(script.source)
            for _ in range(calls):
                client.execute_command(*command)
            client.shutdown(nosave=True)
            process.wait(timeout=60)
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
            "callgrind counted nothing in evalShaCommand (a redis-server without symbols?)"
        )
    return totals[0] / (records * calls)


@click.command()
@click.option("--records", default=500, show_default=True, help="Records per script call.")
@click.option("--calls", default=20, show_default=True, help="Script calls per shape.")
def main(records: int, calls: int) -> None:
    """Instructions per record inside the append scripts (callgrind)."""
    if shutil.which("valgrind") is None:
        raise click.ClickException("needs valgrind (apt-get install valgrind)")
    for shape in SHAPES:
        cost = instructions_per_record(shape, records, calls)
        click.echo(f"{shape:20} {cost:10,.0f} instructions per record")


if __name__ == "__main__":
    main()
