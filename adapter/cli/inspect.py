"""Read-only commands: ``python -m adapter inspect ...`` (adapter/cli/transactions.py adds
the transaction views).

    inspect topics               one line per topic
    inspect topic NAME           settings, then per partition role, last offset, log end
                                 offset (Kafka's, exclusive), hw, ISR, ...
    inspect groups [--topic T]   one line per (group, topic), share groups' too
    inspect group GROUP TOPIC    generation, members, assignment, committed offsets, lag;
                                 a share group's start offsets, records in flight and
                                 available, lag

Lag is in records (partition/lag.lua), unlike Kafka tools' log end minus committed offset,
which counts time-encoded offset units (docs/operations.md).

Each takes the Redis target options of every command (adapter/cli/options.py) and ``--json``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import click

from adapter.cli import options
from adapter.cli.lazy import LazyGroup
from adapter.cli.options import RedisTarget, topic_name
from adapter.cli.topic_configs import describe_configs

if TYPE_CHECKING:  # (imported where a command runs, never for its --help)
    from mapping.operations import inspection
    from mapping.operations.share_group_overview import ShareGroupOverview


def read_share_groups(
    target: RedisTarget, group_name: str | None, topic_name: str | None
) -> list[ShareGroupOverview]:
    """Share group ``group_name`` (None: every share group) with its share-partitions
    (``topic_name``: of that topic only)."""
    from adapter.cli.group import share_state
    from adapter.cli.local_pod import run_on_pod
    from adapter.pod import Pod
    from mapping.operations.share_group_overview import share_overview

    async def work(pod: Pod) -> list[ShareGroupOverview]:
        state = share_state(pod)
        names = [group_name] if group_name is not None else await state.group_names()
        found = [await share_overview(state, g, topic=topic_name) for g in names]
        return [o for o in found if o is not None]

    return run_on_pod(target, work)


def share_lines(share: ShareGroupOverview) -> list[dict[str, Any]]:
    """``inspect groups``' entries of a share group: one per topic it has state on (none:
    one without a topic)."""
    from mapping.operations.share_group_overview import SHARE, topic_totals

    head = {"group": share.group, "type": SHARE, "state": share.state,
            "group_epoch": share.group_epoch, "members": len(share.members)}  # fmt: skip
    totals = topic_totals(share.partitions)
    if not totals:
        return [{**head, "topic": None}]
    return [
        {**head, "topic": t.topic, "partitions": t.partitions, "available": t.available,
         "in_flight": t.in_flight, "lag": t.lag}
        for t in totals
    ]  # fmt: skip


def print_topic(view: inspection.TopicView) -> None:
    click.echo(
        f"topic={view.name} partitions={view.partitions} "
        f"replication_factor={view.replication_factor} "
        f"min_insync_replicas={view.min_insync_replicas} {view.retention.describe()}"
    )
    for p in view.partition_views:
        acked = " ".join(f"{r}:{o}" for r, o in p.acked.items())
        # compaction's counts where it has been at work (docs/compaction.md)
        compaction = f" dirty={p.dirty} compacted={p.compacted}" if p.dirty or p.compacted else ""
        if 0 <= p.indexed < p.last_offset:  # the index cursor has records to index
            compaction += f" indexed_to={p.indexed}"
        click.echo(
            f"partition={p.partition} role={p.role} last_offset={p.last_offset} "
            f"log_end_offset={p.log_end_offset} hw={p.high_watermark} "
            f"isr=[{' '.join(map(str, p.isr))}] acked=[{acked}] "
            f"records={p.records} first_offset={p.first_offset}{compaction}"
        )


def echo_json(value: Any) -> None:
    click.echo(json.dumps(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value))


def describe_topic(name: str, target: RedisTarget, as_json: bool, configs: bool = False) -> None:
    from mapping.operations import inspection
    from mapping.topic.topics import read_settings_sync

    client = target.connect()
    try:
        view = inspection.topic(client, target.keys, name)
        stored_settings = read_settings_sync(client, target.keys, name)
    finally:
        client.close()
    if view is None:
        raise click.ClickException(f"no topic {name}")
    if as_json:
        echo_json(view)
    else:
        print_topic(view)
        if configs:  # (``topic describe``; ``inspect topic`` keeps its lines)
            click.echo(describe_configs(stored_settings))


@click.group(
    name="inspect",
    cls=LazyGroup,
    lazy_subcommands={  # adapter/cli/transactions.py
        "transactions": "adapter.cli.transactions:inspect_transactions",
        "open-transactions": "adapter.cli.transactions:inspect_open_transactions",
    },
)
def inspect_group() -> None:
    """Look at a deployment's topics and groups (read-only)."""


@inspect_group.command(name="topics")
@options.redis_target
@options.as_json
def inspect_topics(target: RedisTarget, as_json: bool) -> None:
    """One line per topic: settings, records, and the partitions' hw."""
    from mapping.operations import inspection

    keys = target.keys
    client = target.connect()
    try:
        views = [inspection.topic(client, keys, n) for n in inspection.topic_names(client, keys)]
    finally:
        client.close()
    views = [v for v in views if v is not None]
    if as_json:
        echo_json([dataclasses.asdict(v) for v in views])
        return
    for v in views:
        under = sum(1 for p in v.partition_views if len(p.isr) < v.replication_factor)
        click.echo(
            f"topic={v.name} partitions={v.partitions} "
            f"replication_factor={v.replication_factor} "
            f"min_insync_replicas={v.min_insync_replicas} "
            f"records={sum(p.records for p in v.partition_views)} "
            f"under_replicated_partitions={under} {v.retention.describe()}"
        )


@inspect_group.command(name="topic")
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@options.redis_target
@options.as_json
def inspect_topic(name: str, target: RedisTarget, as_json: bool) -> None:
    """Topic NAME: settings, then per partition role, last_offset (the last record's),
    log_end_offset (Kafka's: what ListOffsets latest answers, hw + 1 as readers reach it;
    kafka-consumer-groups' LOG-END-OFFSET), hw, ISR, acked offsets."""
    describe_topic(name, target, as_json)


@inspect_group.command(name="groups")
@click.option("--topic", "topic_name", default=None, help="Only groups of this topic.")
@options.redis_target
@options.as_json
def inspect_groups(topic_name: str | None, target: RedisTarget, as_json: bool) -> None:
    """One line per (group, topic): generation, members, total lag in records.

    Offsets are time-encoded (offset = ms << B | seq, B = 10 by default): the lag Kafka tools
    compute, log end minus committed (kafka-consumer-groups, kafka_exporter, Burrow), counts
    offset units, about 2^B per millisecond, not records. This lag, and the pods' metrics
    kafka_consumergroup_lag and adapter_consumer_lag_records, count records
    (docs/operations.md).

    Share groups (type=share): one line per topic they have share-partitions on, with the
    records available (not delivered yet), in flight (acquired, or released for
    redelivery) and the lag (both), in records."""
    from mapping.operations import inspection

    keys = target.keys
    client = target.connect()
    try:
        views = [
            inspection.group(client, keys, g, t)
            for g, t in inspection.group_pairs(client, keys)
            if topic_name is None or t == topic_name
        ]
    finally:
        client.close()
    views = [v for v in views if v is not None]
    shares = [
        line
        for share in read_share_groups(target, None, topic_name)
        for line in share_lines(share)
        if topic_name is None or line["topic"] == topic_name
    ]
    if as_json:
        echo_json([*(dataclasses.asdict(v) for v in views), *shares])
        return
    for v in views:
        click.echo(
            f"group={v.group} topic={v.topic} generation={v.generation} "
            f"assignor={v.assignor} members={len(v.members)} "
            f"lag={sum(p.lag for p in v.partitions)}"
        )
    for line in shares:
        where = f" topic={line['topic']}" if line["topic"] is not None else ""
        counts = (
            f" partitions={line['partitions']} available={line['available']} "
            f"in_flight={line['in_flight']} lag={line['lag']}"
            if line["topic"] is not None
            else ""
        )
        click.echo(
            f"group={line['group']} type=share{where} state={line['state']} "
            f"group_epoch={line['group_epoch']} members={line['members']}{counts}"
        )


@inspect_group.command(name="group")
@click.argument("group_name", metavar="GROUP")  # any group id (Kafka: any characters)
@click.argument("topic_name", metavar="TOPIC", callback=lambda _c, _p, v: topic_name(v))
@options.redis_target
@options.as_json
def inspect_one_group(group_name: str, topic_name: str, target: RedisTarget, as_json: bool) -> None:
    """GROUP on TOPIC: generation, members and their partitions, committed offsets, lag.

    lag = records from the committed offset up to the high watermark ("N+": at least N).
    Offsets are time-encoded: Kafka tools' LAG (log end minus committed) counts offset
    units, about 2^B (1,024) per millisecond, not records (docs/operations.md).

    A share group: its state, group epoch, members and, per share-partition of TOPIC, the
    start offset, records in flight and available, and the lag (in records; "-": not
    initialised)."""
    from mapping.operations import inspection
    from mapping.operations.share_group_overview import cell, overview_json

    client = target.connect()
    try:
        view = inspection.group(client, target.keys, group_name, topic_name)
    finally:
        client.close()
    shares = read_share_groups(target, group_name, topic_name)
    share = shares[0] if shares else None
    if view is None and share is None:
        raise click.ClickException(f"no group {group_name} on topic {topic_name}")
    if as_json:
        if view is None:
            assert share is not None  # (refused above when neither exists)
            echo_json({**overview_json(share), "topic": topic_name})
        else:
            found = dataclasses.asdict(view)
            if share is not None:
                found["share"] = overview_json(share)
            echo_json(found)
        return
    if share is not None:
        click.echo(
            f"group={share.group} type=share topic={topic_name} state={share.state} "
            f"group_epoch={share.group_epoch} assignor={share.assignor} "
            f"members={len(share.members)}"
        )
        for m in share.members:
            click.echo(
                f"member={m.member_id} client_id={cell(m.client_id)} host={cell(m.host)} "
                f"partitions=[{' '.join(map(str, m.assignment.get(topic_name, [])))}]"
            )
        for p in share.partitions:
            click.echo(
                f"partition={p.partition} start_offset={cell(p.start_offset)} "
                f"in_flight={p.in_flight} available={cell(p.available)} lag={cell(p.lag)}"
            )
    if view is None:
        return
    click.echo(
        f"group={view.group} topic={view.topic} generation={view.generation} "
        f"assignor={view.assignor} members={len(view.members)}"
    )
    for m in view.members:
        click.echo(
            f"member={m.consumer_id} partitions=[{' '.join(map(str, m.partitions))}] "
            f"last_heartbeat_ms={m.last_heartbeat_ms}"
        )
    for p in view.partitions:
        committed = "-" if p.committed is None else str(p.committed)
        lag = str(p.lag) if p.lag_is_exact else f"{p.lag}+"
        click.echo(
            f"partition={p.partition} owner={p.owner or '-'} committed={committed} "
            f"hw={p.high_watermark} lag={lag}"
        )
