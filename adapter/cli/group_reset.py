"""``python -m adapter group reset-offsets``: kafka-consumer-groups --reset-offsets.

    group reset-offsets GROUP --topic T [--partitions 0,1]
        (--to-earliest | --to-latest | --to-datetime ISO8601 | --to-timestamp MS
         | --to-offset N | --shift-by N) [--dry-run | --execute]

Prints the plan (a dry run, the default as in Kafka's tool) or writes it (``--execute``)
through the path of every Kafka commit (mapping/operations/offset_reset.py: the commit check and its
fence, never keys written by hand). Refused while the group has live members of any
protocol (mapping/operations/reset_rules.py, the console's rules too), as Kafka's tool
refuses a group that is not Empty or Dead. A group that does not exist yet gets the offsets
(Kafka's tool allows it too: a way to place a new group).

A share group (KIP-932) has start offsets instead (kafka-share-groups.sh --reset-offsets):
``--to-earliest``, ``--to-latest``, ``--to-offset`` and ``--to-datetime`` / ``--to-timestamp``
move each share-partition's start there with nothing in flight
(``ShareGroupState.alter``, AlterShareGroupOffsets' path), refused while the share group has
live members (Kafka's NON_EMPTY_GROUP).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from adapter.cli import options
from adapter.cli.columns import cell, echo_columns
from adapter.cli.group import session_timeout_option
from adapter.cli.options import RedisTarget, topic_name

if TYPE_CHECKING:  # (imported where the command runs, never for its --help)
    from adapter.pod import Pod
    from mapping.operations.offset_reset import PlannedOffset, ResetTarget


def _partition_list(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        found = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError:
        raise click.BadParameter("a comma-separated list of partitions, e.g. 0,1") from None
    if not found or found[0] < 0:
        raise click.BadParameter("a comma-separated list of partitions, e.g. 0,1")
    return found


def _datetime_ms(value: str | None) -> int | None:
    """An ISO 8601 date and time as ms since the epoch; without a zone, local time (as
    Kafka's tool reads --to-datetime)."""
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            "an ISO 8601 date and time, e.g. 2026-11-24T09:30:00.000Z"
        ) from None
    return round(moment.astimezone().timestamp() * 1000)


def _target(
    to_earliest: bool,
    to_latest: bool,
    to_datetime: int | None,
    to_timestamp: int | None,
    to_offset: int | None,
    shift_by: int | None,
) -> ResetTarget:
    from mapping.operations.offset_reset import (
        EARLIEST,
        LATEST,
        OFFSET,
        SHIFT,
        TIMESTAMP,
        ResetTarget,
    )

    given = [
        ResetTarget(kind, value or 0)
        for kind, value, present in (
            (EARLIEST, None, to_earliest),
            (LATEST, None, to_latest),
            (TIMESTAMP, to_datetime, to_datetime is not None),
            (TIMESTAMP, to_timestamp, to_timestamp is not None),
            (OFFSET, to_offset, to_offset is not None),
            (SHIFT, shift_by, shift_by is not None),
        )
        if present
    ]
    if len(given) != 1:
        raise click.UsageError(
            "give one of --to-earliest, --to-latest, --to-datetime, --to-timestamp, "
            "--to-offset, --shift-by"
        )
    return given[0]


@click.command(name="reset-offsets")  # of ``group`` (adapter/cli/group.py)
@click.argument("group_name", metavar="GROUP")  # any group id (Kafka: any characters)
@click.option(
    "--topic", "topic", required=True, callback=lambda _c, _p, v: topic_name(v),
    help="The topic whose offsets are reset.",
)  # fmt: skip
@click.option(
    "--partitions", "partitions", default=None, callback=lambda _c, _p, v: _partition_list(v),
    help="Only these partitions, e.g. 0,1 (default: every partition of --topic).",
)  # fmt: skip
@click.option("--to-earliest", is_flag=True, help="To the first record still in the log.")
@click.option("--to-latest", is_flag=True, help="To the high watermark (past every record).")
@click.option(
    "--to-datetime", default=None, callback=lambda _c, _p, v: _datetime_ms(v),
    help="To the first record appended at or after this ISO 8601 time (no zone: local time); "
    "none: the high watermark.",
)  # fmt: skip
@click.option(
    "--to-timestamp", type=click.IntRange(0), default=None,
    help="As --to-datetime, in ms since the epoch.",
)  # fmt: skip
@click.option(
    "--to-offset", type=click.IntRange(0), default=None,
    help="To this offset (into the log's range: earliest..high watermark).",
)  # fmt: skip
@click.option(
    "--shift-by", type=int, default=None,
    help="Move the committed offset by N RECORDS (negative: back). Offsets are time-encoded, "
    "so this counts records, not offset units.",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the plan only (the default).")
@click.option("--execute", is_flag=True, help="Write the plan.")
@session_timeout_option
@options.redis_target
def reset_offsets(
    group_name: str,
    topic: str,
    partitions: list[int] | None,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: int | None,
    to_timestamp: int | None,
    to_offset: int | None,
    shift_by: int | None,
    dry_run: bool,
    execute: bool,
    session_timeout_ms: int,
    target: RedisTarget,
) -> None:
    """Reset GROUP's committed offsets on --topic, as kafka-consumer-groups --reset-offsets:
    prints GROUP TOPIC PARTITION CURRENT-OFFSET NEW-OFFSET NEW-LAG (the lag in RECORDS the
    group will have there); writes only with --execute. Refused while the group has live
    members (Kafka: "Assignments can only be reset if the group is inactive").

    A share group: each share-partition's start offset (CURRENT-OFFSET: the start now, "-"
    when not initialised; NEW-LAG: the records available from the new start), with
    --to-earliest, --to-latest, --to-offset, --to-datetime or --to-timestamp; refused while
    it has live members (NON_EMPTY_GROUP)."""
    from adapter.cli.group import share_state
    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.offset_reset import CannotReset
    from mapping.operations.reset_rules import reset_group

    wanted = _target(to_earliest, to_latest, to_datetime, to_timestamp, to_offset, shift_by)
    if dry_run and execute:
        raise click.UsageError("give --dry-run or --execute, not both")

    async def work(pod: Pod) -> list[PlannedOffset]:
        try:
            return await reset_group(
                pod.topics, pod.kafka, pod.kafka_groups, share_state(pod), group_name, topic,
                partitions, wanted, execute,
            )  # fmt: skip
        except CannotReset as exc:
            raise click.ClickException(str(exc)) from None

    plan = run_on_pod(target, work, session_timeout_ms=session_timeout_ms)
    for p in plan:
        if p.clamped:
            click.echo(
                f"WARN: the new offset of {p.topic}-{p.partition} is outside the log: set to "
                f"its {p.clamped} offset {p.new}",
                err=True,
            )
    echo_columns(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "NEW-LAG"],
        [
            [group_name, p.topic, str(p.partition), cell(p.current), str(p.new), str(p.lag)]
            for p in plan
        ],
    )
    if not execute:
        click.echo("(dry run: nothing was written; --execute writes it)", err=True)
