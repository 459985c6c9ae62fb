"""``python -m adapter topic tail``: follow a topic as ``kcat -C`` does, no pod needed.

    topic tail TOPIC [--partition P] [--from-beginning | --offset O] [--count N] [--exit]
                     [--format text|json]

Reads committed records only, through the reader V1 CONSUME uses
(mapping/partition/record_reader.py:
never past the last stable offset, never a transaction marker or an aborted record), from
every partition in turn (or ``--partition``), starting at the end (only new records), at
the first record (``--from-beginning``) or at offset O of each partition. It follows until
Ctrl-C, ``--count`` records, or with ``--exit`` the end of every partition (kcat's ``-e``);
between records it waits on the partitions' hw channels (pub/sub), as a Kafka Fetch
long-polls, never polling Redis. A topic grown meanwhile is followed on the partitions it
had when the command started.

Each record is one line. ``text``: ``partition=P offset=O timestamp=MS key=K headers=[N=V
...] value=V``, where keys, values and header names and values are quoted and escaped (see
``quoted``) and a null one is ``null``; ``json``: one object per line with kcat ``-J``'s
names (``topic``, ``partition``, ``offset``, ``ts``, ``key``, ``payload``, ``headers`` as
``[name, value, ...]``), bytes that are not UTF-8 as ``\\xNN``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget, topic_name

if TYPE_CHECKING:  # (imported where the command runs, never for its --help)
    from adapter.pod import Pod
    from mapping.core.records import StoredRecord
    from mapping.topic.topic_config import TopicConfig

# Entries one read of a partition looks at (markers and aborted records included)
PAGE_RECORDS = 500
# How long a wait for a notification lasts before the partitions are read again anyway (a
# follower leaving the ISR moves the hw without a notice while nothing is appended)
WAIT_S = 5.0
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quoted_text(text: str) -> str:
    """``text`` between double quotes, escaped so that any value reads back unambiguously
    and stays on one line: ``\\\\``, ``\\"``, ``\\n``, ``\\r``, ``\\t``; ``\\xNN`` for other
    control bytes and for bytes that are not UTF-8 (decoded as surrogates); ``\\uXXXX`` for
    other unprintable characters. Printable characters, non-ASCII ones included, stay."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def quoted(data: bytes | None) -> str:
    """Bytes as ``quoted_text`` shows them; ``null`` for none (a null key or value)."""
    return "null" if data is None else quoted_text(data.decode("utf-8", "surrogateescape"))


def text_line(record: StoredRecord, partition: int) -> str:
    headers = " ".join(f"{quoted_text(name)}={quoted(value)}" for name, value in record.headers)
    return (
        f"partition={partition} offset={record.offset} timestamp={record.timestamp} "
        f"key={quoted(record.key)} headers=[{headers}] value={quoted(record.value)}"
    )


def _json_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


def json_line(record: StoredRecord, topic_name: str, partition: int) -> str:
    headers: list[str | None] = []
    for name, value in record.headers:
        headers += [name, _json_text(value)]
    return json.dumps(
        {
            "topic": topic_name,
            "partition": partition,
            "offset": record.offset,
            "ts": record.timestamp,
            "key": _json_text(record.key),
            "payload": _json_text(record.value),
            "headers": headers,
        },
        ensure_ascii=False,
    )


@click.command(name="tail")  # of ``topic`` (adapter/cli/topic.py)
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@click.option("--partition", type=click.IntRange(0), default=None, help="Only this partition.")
@click.option("--from-beginning", is_flag=True, help="Start at the first record of each partition.")
@click.option(
    "--offset", type=click.IntRange(0), default=None,
    help="Start at this offset of each partition (the first record at or after it).",
)  # fmt: skip
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after N records.")
@click.option(
    "--exit", "exit_at_end", is_flag=True,
    help="Stop at the end of every partition instead of following (kcat -e).",
)  # fmt: skip
@click.option(
    "--format", "output", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text: partition=P offset=O timestamp=MS key=\"K\" headers=[\"N\"=\"V\"] value=\"V\" "
    "(escaped, null for none); json: one kcat -J object per line.",
)  # fmt: skip
@options.redis_target
def tail(
    name: str,
    partition: int | None,
    from_beginning: bool,
    offset: int | None,
    count: int | None,
    exit_at_end: bool,
    output: str,
    target: RedisTarget,
) -> None:
    """Print topic NAME's committed records (offset, partition, key, value, timestamp,
    headers) and keep following new ones until Ctrl-C, --count or --exit. Starts at the
    end (new records only) unless --from-beginning or --offset. Markers and records of
    aborted transactions are never shown (V1 CONSUME's reader)."""
    if from_beginning and offset is not None:
        raise click.UsageError("give --from-beginning or --offset, not both")

    def show(record: StoredRecord, p: int) -> None:
        click.echo(text_line(record, p) if output == "text" else json_line(record, name, p))

    async def work(pod: Pod) -> None:
        config = await pod.topics.read(name)
        if config is None:
            raise click.ClickException(f"no topic {name}")
        if partition is not None and partition >= config.partitions:
            raise click.ClickException(
                f"topic {name} has {config.partitions} partitions: no partition {partition}"
            )
        chosen = [partition] if partition is not None else list(range(config.partitions))
        start = 0 if from_beginning else offset
        positions = {p: start if start is not None else await _end(pod, config, p) for p in chosen}
        await _follow(pod, config, positions, show, count, exit_at_end)

    from adapter.cli.local_pod import run_on_pod

    try:
        run_on_pod(target, work, pubsub=not exit_at_end)
    except KeyboardInterrupt:  # Ctrl-C ends following (kcat exits 0 too)
        pass


async def _end(pod: Pod, config: TopicConfig, partition: int) -> int:
    """Where new records of the partition will be: its last stable offset (the hw + 1 when
    no transaction is open)."""
    status = await pod.partitions.partition_status(config, partition, reader=True)
    return status.last_stable_offset


async def _follow(
    pod: Pod,
    config: TopicConfig,
    positions: dict[int, int],
    show: Callable[[StoredRecord, int], None],
    count: int | None,
    exit_at_end: bool,
) -> None:
    from mapping.partition.record_reader import read_committed

    shown = 0
    watch = None
    try:
        while True:
            moved = False
            for p, position in positions.items():
                page = await read_committed(pod.partition_txns, config, p, position, PAGE_RECORDS)
                for record in page.records:
                    show(record, p)
                    shown += 1
                    if count is not None and shown >= count:
                        return
                moved |= page.next_offset != position
                positions[p] = page.next_offset
            if moved:
                continue
            if exit_at_end:  # every partition read up to its hw
                return
            if watch is None:
                channels = [pod.keys.partition(config.name, p).hw_channel for p in positions]
                watch = pod.hw_waits.watch(*channels)
                await watch.subscribed(WAIT_S)
                continue  # read again: a record appended before the subscription counts
            await watch.next(WAIT_S)
    finally:
        if watch is not None:
            watch.close()
