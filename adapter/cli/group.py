"""``python -m adapter group ...``: consumer groups, as ``kafka-consumer-groups`` handles them.

    group list [--json]                          every group: protocol, state, members
    group describe GROUP [--json]                state, members, and per partition the
                                                 committed offset, log end offset and lag
    group reset-offsets GROUP --topic T ...      (adapter/cli/group_reset.py)
    group delete GROUP [--topic T] [--force]

A group name may be used by Kafka's classic protocol, KIP-848 and V1 (one at a time while
members are live); all of them share each (group, topic)'s committed offsets
(mapping/operations/group_overview.py reads them together). GROUP is any group id: a Kafka group's
may
hold any character (quote it for the shell), a V1 group's is ``[A-Za-z0-9._-]``. Lag is in
records: offsets are time-encoded, so log end minus committed offset is not a record count.

A group is keyed by (group, topic) for deletion: without ``--topic`` GROUP is deleted for
every topic it has. A group with live members (a member whose session has not run out) is
refused, as Kafka's DeleteGroups answers NON_EMPTY_GROUP, unless ``--force`` (its members
then get "group not found" and JOIN again).
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

import click

from adapter.cli import options
from adapter.cli.columns import cell, echo_columns
from adapter.cli.lazy import LazyGroup
from adapter.cli.options import RedisTarget
from adapter.settings import Settings
from mapping.core.keys import is_valid_name

if TYPE_CHECKING:  # (imported where a command runs, never for its --help)
    from adapter.pod import Pod
    from mapping.group.deletion import GroupDeletion
    from mapping.operations.group_overview import GroupOverview

# V1 members are live while heard from within this long (the pods' --session-timeout-ms)
session_timeout_option = click.option(
    "--session-timeout-ms",
    default=Settings().session_timeout_ms,
    type=click.IntRange(1),
    show_default=True,
    help="A V1 member heard from within this long is live (the pods' --session-timeout-ms).",
)


def _name(value: str | None) -> str | None:
    if value is not None and not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value


@click.group(
    cls=LazyGroup, lazy_subcommands={"reset-offsets": "adapter.cli.group_reset:reset_offsets"}
)
def group() -> None:
    """List, describe, reset the offsets of, and delete consumer groups."""


@group.command()
@click.argument("group_name", metavar="GROUP")
@click.option(
    "--topic", "topic_name", default=None, callback=lambda _c, _p, v: _name(v),
    help="Only GROUP's group of this topic (default: of every topic).",
)  # fmt: skip
@click.option("--force", is_flag=True, help="Delete even a group with live members.")
@session_timeout_option
@options.redis_target
def delete(
    group_name: str,
    topic_name: str | None,
    force: bool,
    session_timeout_ms: int,
    target: RedisTarget,
) -> None:
    """Delete GROUP: members, assignment, generation, committed offsets, its listing."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.group.deletion import DELETED, NON_EMPTY, delete_groups

    results: list[GroupDeletion] = run_on_pod(
        target,
        lambda pod: delete_groups(
            pod.topics,
            group_name,
            topic_name,
            force=force,
            session_timeout_ms=session_timeout_ms,
            mirror=pod.offsets_mirror,
        ),
    )
    deleted = [r for r in results if r.outcome == DELETED]
    refused = [r for r in results if r.outcome == NON_EMPTY]
    for r in deleted:
        click.echo(f"deleted group={r.group} topic={r.topic}")
    for r in refused:
        click.echo(
            f"refused group={r.group} topic={r.topic}: {r.message} (NON_EMPTY_GROUP; "
            "--force deletes it anyway)",
            err=True,
        )
    if refused:
        raise SystemExit(1)
    if not deleted:
        where = f" on topic {topic_name}" if topic_name else ""
        raise click.ClickException(f"no group {group_name}{where}")


def read_overview(target: RedisTarget, group_name: str, session_timeout_ms: int) -> GroupOverview:
    """GROUP across its protocols; a one-line error when it does not exist."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.group_overview import overview
    from mapping.replication.durable_reads import confirm_read

    async def work(pod: Pod) -> GroupOverview | None:
        found = await overview(pod.kafka_groups, group_name, pod.partitions.sequence_bits)
        if found is not None:  # committed offsets shown once the Redis replicas have them
            topics = {p.topic for p in found.partitions}
            read = [pod.keys.group(group_name, t).offsets for t in sorted(topics)]
            await confirm_read(pod.client, pod.keys, read)
        return found

    found = run_on_pod(target, work, session_timeout_ms=session_timeout_ms)
    if found is None:
        raise click.ClickException(f"Consumer group '{group_name}' does not exist.")
    return found


@group.command(name="list")
@session_timeout_option
@options.redis_target
@options.as_json
def list_groups(session_timeout_ms: int, target: RedisTarget, as_json: bool) -> None:
    """Every group (Kafka classic, KIP-848 and V1, and groups that only have committed
    offsets): protocol, state and live members."""
    import asyncio

    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.group_overview import group_names, overview

    async def work(pod: Pod) -> list[GroupOverview]:
        bits = pod.partitions.sequence_bits
        names = await group_names(pod.kafka_groups)
        found = await asyncio.gather(
            *(overview(pod.kafka_groups, g, bits, offsets=False) for g in names)
        )
        return [o for o in found if o is not None]

    found = run_on_pod(target, work, session_timeout_ms=session_timeout_ms)
    if as_json:
        click.echo(json.dumps([_summary_json(o) for o in found]))
        return
    rows = [[o.group, cell(o.protocol), o.state, str(len(o.members))] for o in found]
    echo_columns(["GROUP", "PROTOCOL", "STATE", "#MEMBERS"], rows)


def _summary_json(o: GroupOverview) -> dict:
    return {"group": o.group, "protocol": o.protocol, "state": o.state, "members": len(o.members)}


@group.command()
@click.argument("group_name", metavar="GROUP")  # any group id (Kafka: any characters)
@session_timeout_option
@options.redis_target
@options.as_json
def describe(group_name: str, session_timeout_ms: int, target: RedisTarget, as_json: bool) -> None:
    """GROUP under every protocol (Kafka classic, KIP-848, V1): state, generation, members
    (member id, client id, host, assigned partitions), and per partition of every topic it
    commits on or is assigned: CURRENT-OFFSET (committed), LOG-END-OFFSET (Kafka's high
    watermark) and LAG, in RECORDS from the committed offset to the high watermark
    (offsets are time-encoded: LOG-END-OFFSET minus CURRENT-OFFSET is not a record count;
    "N+": at least N). The columns are kafka-consumer-groups --describe's."""
    found = read_overview(target, group_name, session_timeout_ms)
    if as_json:
        click.echo(json.dumps({**dataclasses.asdict(found), "lag_unit": "records"}))
        return
    g = found.group
    echo_columns(
        ["GROUP", "PROTOCOL", "TOPIC", "STATE", "GENERATION", "ASSIGNMENT-STRATEGY", "#MEMBERS"],
        [
            [g, s.protocol, cell(s.topic), s.state, str(s.generation),
             cell(s.assignment_strategy), str(s.members)]
            for s in found.states
        ]
        or [[g, cell(found.protocol), "-", found.state, "-", "-", "0"]],
    )  # fmt: skip
    click.echo()
    if not found.members:
        click.echo(f"Consumer group '{g}' has no active members.")
    else:
        echo_columns(
            ["GROUP", "CONSUMER-ID", "PROTOCOL", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"],
            [
                [g, m.member_id, m.protocol, cell(m.host), cell(m.client_id),
                 str(sum(len(ps) for ps in m.assignment.values())), _assignment(m.assignment)]
                for m in found.members
            ],
        )  # fmt: skip
    click.echo()
    by_id = {m.member_id: m for m in found.members}
    rows = []
    for p in found.partitions:
        owner = by_id.get(p.member_id or "")
        lag = "-" if p.lag is None else f"{p.lag}{'' if p.lag_exact else '+'}"
        rows.append(
            [g, p.topic, str(p.partition), cell(p.current_offset), str(p.log_end_offset), lag,
             cell(p.member_id), cell(owner and owner.host), cell(owner and owner.client_id)]
        )  # fmt: skip
    echo_columns(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
         "HOST", "CLIENT-ID"],
        rows,
    )  # fmt: skip


def _assignment(assignment: dict[str, list[int]]) -> str:
    """kafka-consumer-groups --members --verbose's form: ``orders(0,1), audit(2)``."""
    parts = [f"{t}({','.join(map(str, ps))})" for t, ps in sorted(assignment.items()) if ps]
    return ", ".join(parts) or "-"
