"""``python -m adapter group ...``: consumer groups, as ``kafka-consumer-groups`` handles them.

    group list [--json]                          every group: protocol, state, members
    group describe GROUP [--json]                state, members, and per partition the
                                                 committed offset, log end offset and lag
                                                 (a share group: per share-partition the
                                                 start offset, lag, records in flight)
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

Share groups (KIP-932, mapping/operations/share_group_overview.py) are listed, described,
reset and deleted by the same commands, as kafka-share-groups.sh handles them.
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
    from mapping.operations.share_group_overview import ShareGroupOverview
    from mapping.share_group.state import ShareGroupState

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


def share_state(pod: Pod) -> ShareGroupState:
    """The deployment's share groups (KIP-932) through a pod's batcher."""
    from mapping.share_group.state import ShareGroupState

    return ShareGroupState(pod.batcher, pod.keys, pod.partitions.sequence_bits)


@click.group(
    cls=LazyGroup, lazy_subcommands={"reset-offsets": "adapter.cli.group_reset:reset_offsets"}
)
def group() -> None:
    """List, describe, reset the offsets of, and delete consumer groups and share groups."""


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
    """Delete GROUP: members, assignment, generation, committed offsets, its listing. A
    share group: its membership and its state on every share-partition (with --topic: only
    its state on that topic's partitions, as kafka-share-groups.sh --delete-offsets)."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.group.deletion import DELETED, NON_EMPTY, delete_groups

    async def work(pod: Pod) -> tuple[list[GroupDeletion], str]:
        share = await _delete_share_group(pod, group_name, topic_name, force)
        results = await delete_groups(
            pod.topics,
            group_name,
            topic_name,
            force=force,
            session_timeout_ms=session_timeout_ms,
            mirror=pod.offsets_mirror,
        )
        return results, share

    results, share = run_on_pod(target, work)
    deleted = [r for r in results if r.outcome == DELETED]
    refused = [r for r in results if r.outcome == NON_EMPTY]
    where = f" topic={topic_name}" if topic_name else ""
    if share == DELETED:
        click.echo(f"deleted share group={group_name}{where}")
    for r in deleted:
        click.echo(f"deleted group={r.group} topic={r.topic}")
    if share.startswith(NON_EMPTY):
        click.echo(
            f"refused share group={group_name}{where}: {share[len(NON_EMPTY) + 1 :]} "
            "(NON_EMPTY_GROUP; --force deletes it anyway)",
            err=True,
        )
    for r in refused:
        click.echo(
            f"refused group={r.group} topic={r.topic}: {r.message} (NON_EMPTY_GROUP; "
            "--force deletes it anyway)",
            err=True,
        )
    if refused or share.startswith(NON_EMPTY):
        raise SystemExit(1)
    if not deleted and share != DELETED:
        where = f" on topic {topic_name}" if topic_name else ""
        raise click.ClickException(f"no group {group_name}{where}")


async def _delete_share_group(
    pod: Pod, group_name: str, topic_name: str | None, force: bool
) -> str:
    """Delete share group ``group_name`` (``topic_name``: only its state on that topic):
    DELETED, "" when there is no such share group, or NON_EMPTY and why."""
    from mapping.group.deletion import DELETED, NON_EMPTY
    from mapping.operations.share_group_overview import every_partition

    state = share_state(pod)
    membership = await state.membership(group_name)
    if membership is None:
        return ""
    if membership.members and not force:
        return f"{NON_EMPTY} {len(membership.members)} live members"
    if topic_name is not None:
        await state.delete(group_name, await every_partition(pod.topics, [topic_name]))
    else:
        await state.delete_group(group_name)
    return DELETED


def read_overview(
    target: RedisTarget, group_name: str, session_timeout_ms: int
) -> tuple[GroupOverview | None, ShareGroupOverview | None]:
    """GROUP across its protocols, and the share group of that name; a one-line error when
    neither exists."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.group_overview import overview
    from mapping.operations.share_group_overview import share_overview
    from mapping.replication.durable_reads import confirm_read

    async def work(pod: Pod) -> tuple[GroupOverview | None, ShareGroupOverview | None]:
        found = await overview(pod.kafka_groups, group_name, pod.partitions.sequence_bits)
        if found is not None:  # committed offsets shown once the Redis replicas have them
            topics = {p.topic for p in found.partitions}
            read = [pod.keys.group(group_name, t).offsets for t in sorted(topics)]
            await confirm_read(pod.client, pod.keys, read)
        share = await share_overview(share_state(pod), group_name)
        return found, share

    found, share = run_on_pod(target, work, session_timeout_ms=session_timeout_ms)
    if found is None and share is None:
        raise click.ClickException(f"Consumer group '{group_name}' does not exist.")
    return found, share


@group.command(name="list")
@session_timeout_option
@options.redis_target
@options.as_json
def list_groups(session_timeout_ms: int, target: RedisTarget, as_json: bool) -> None:
    """Every group (Kafka classic, KIP-848 and V1, groups that only have committed
    offsets, and share groups: protocol ``share``): protocol, state and live members."""
    import asyncio

    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.group_overview import group_names, overview
    from mapping.operations.share_group_overview import SHARE, share_overviews, summary_json

    async def work(pod: Pod) -> tuple[list[GroupOverview], list[ShareGroupOverview]]:
        bits = pod.partitions.sequence_bits
        names = await group_names(pod.kafka_groups)
        found = await asyncio.gather(
            *(overview(pod.kafka_groups, g, bits, offsets=False) for g in names)
        )
        shares = await share_overviews(share_state(pod))
        return [o for o in found if o is not None], shares

    found, shares = run_on_pod(target, work, session_timeout_ms=session_timeout_ms)
    listed = sorted(
        [(o.group, _summary_json(o)) for o in found] + [(o.group, summary_json(o)) for o in shares],
        key=lambda entry: (entry[0], entry[1]["protocol"] == SHARE),
    )
    if as_json:
        click.echo(json.dumps([entry for _, entry in listed]))
        return
    rows = [[e["group"], cell(e["protocol"]), e["state"], str(e["members"])] for _, e in listed]
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
    "N+": at least N). The columns are kafka-consumer-groups --describe's.

    A share group (KIP-932): its state, group epoch and members, and per share-partition
    kafka-share-groups.sh --describe --offsets' START-OFFSET and LAG (records not yet
    acknowledged), then IN-FLIGHT (acquired, or released for redelivery) and AVAILABLE (not
    delivered yet)."""
    from mapping.operations.share_group_overview import overview_json

    found, share = read_overview(target, group_name, session_timeout_ms)
    if as_json:
        if found is None:
            assert share is not None  # (read_overview refused neither)
            click.echo(json.dumps(overview_json(share)))
            return
        described = {**dataclasses.asdict(found), "lag_unit": "records"}
        if share is not None:
            described["share"] = overview_json(share)
        click.echo(json.dumps(described))
        return
    if found is not None:
        _echo_overview(found)
    if share is not None:
        if found is not None:
            click.echo()
        _echo_share_overview(share)


def _echo_share_overview(share: ShareGroupOverview) -> None:
    from mapping.operations.share_group_overview import (
        MEMBER_HEADER,
        OFFSETS_HEADER,
        STATE_HEADER,
        member_rows,
        offset_rows,
        state_rows,
    )

    echo_columns(STATE_HEADER, state_rows(share))
    click.echo()
    if share.members:
        echo_columns(MEMBER_HEADER, member_rows(share))
    else:
        click.echo(f"Share group '{share.group}' has no active members.")
    click.echo()
    echo_columns(OFFSETS_HEADER, offset_rows(share))


def _echo_overview(found: GroupOverview) -> None:
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
