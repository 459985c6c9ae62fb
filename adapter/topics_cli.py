"""Operations commands: ``python -m adapter topic ...`` and ``python -m adapter inspect ...``.

    topic create NAME [--partitions N --replication-factor N --min-insync-replicas N
                       --retention-ms MS --retention-bytes B --retention-ignore-groups]
    topic alter NAME [--retention-ms MS --retention-bytes B --retention-ignore-groups/...]
    topic describe NAME          (= inspect topic NAME)
    topic trim [NAME]            apply retention now (pods also do it periodically)
    inspect topics               one line per topic
    inspect topic NAME           settings, then per partition role, log end, hw, ISR, ...
    inspect groups [--topic T]   one line per (group, topic)
    inspect group GROUP TOPIC    generation, members, assignment, committed offsets, lag

Topics are also created on first use with the pod's defaults; ``create`` sets partitions,
replication factor and min ISR up front (they never change once created); retention may be
changed at any time with ``alter``. Every command takes ``--redis-url`` (a
``redis+cluster://`` URL for a cluster) and ``--key-prefix``; ``inspect`` takes ``--json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import anyio
import click

from mapping import inspect, scripts
from mapping.cluster import SyncClient, connect_sync
from mapping.codec import DEFAULT_SEQUENCE_BITS
from mapping.keys import DEFAULT_PREFIX, Keys, is_valid_name

_redis_url = click.option(
    "--redis-url",
    required=True,
    envvar="ADAPTER_REDIS_URL",
    show_envvar=True,
    help="redis://HOST:PORT/DB of the deployment (redis+cluster://HOST:PORT for a cluster).",
)
_key_prefix = click.option(
    "--key-prefix",
    default=DEFAULT_PREFIX,
    envvar="ADAPTER_KEY_PREFIX",
    show_envvar=True,
    show_default=True,
    help="Prefix of every Redis key.",
)
_as_json = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")


def _retention_options() -> Callable[[Callable], Callable]:
    def apply(f: Callable) -> Callable:
        f = click.option(
            "--retention-ignore-groups/--retention-respect-groups",
            default=None,
            help="Trim records groups have not committed yet too (default: respect groups).",
        )(f)
        f = click.option(
            "--retention-bytes",
            type=click.IntRange(-1),
            default=None,
            help="Trim each partition to about this many bytes of Redis memory (-1, the "
            "default: no limit).",
        )(f)
        f = click.option(
            "--retention-ms",
            type=click.IntRange(-1),
            default=None,
            help="Trim records older than this (-1, the default: keep forever).",
        )(f)
        return f

    return apply


def _name(value: str) -> str:
    if not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value


def _client(redis_url: str, **options: Any) -> SyncClient:
    return connect_sync(redis_url, **options)


def _store_retention(
    client: SyncClient, keys: Keys, name: str, ms: int | None, size: int | None, ignore: bool | None
) -> None:
    fields: dict[str, int] = {}
    if ms is not None:
        fields["retention_ms"] = ms
    if size is not None:
        fields["retention_bytes"] = size
    if ignore is not None:
        fields["retention_ignore_groups"] = int(ignore)
    if fields:
        client.hset(keys.topic(name), mapping=fields)


@click.group()
def topic() -> None:
    """Create, change and inspect topics."""


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@click.option("--partitions", type=click.IntRange(1, 10_000), default=3, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option("--min-insync-replicas", type=click.IntRange(1, 16), default=2, show_default=True)
@_retention_options()
@_redis_url
@_key_prefix
def create(
    name: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    retention_ms: int | None,
    retention_bytes: int | None,
    retention_ignore_groups: bool | None,
    redis_url: str,
    key_prefix: str,
) -> None:
    """Create topic NAME (an existing topic with other settings is an error)."""
    if min_insync_replicas > replication_factor:
        raise click.BadParameter(
            "cannot exceed --replication-factor", param_hint="--min-insync-replicas"
        )
    keys = Keys(key_prefix)
    wanted = (partitions, replication_factor, min_insync_replicas)
    client = _client(redis_url)
    try:
        script = scripts.load("ensure_topic")
        reply = client.eval(script.source, 1, keys.topic(name), *wanted)
        stored = (int(reply[0]), int(reply[1]), int(reply[2]))
        if reply[3]:
            client.sadd(keys.topics, name)
            client.publish(keys.topics_channel, name)
        settings = (
            f"partitions={stored[0]} replication_factor={stored[1]} min_insync_replicas={stored[2]}"
        )
        if not reply[3] and stored != wanted:
            raise click.ClickException(f"topic {name} exists with other settings: {settings}")
        _store_retention(client, keys, name, retention_ms, retention_bytes, retention_ignore_groups)
        retention = inspect.retention_of(client.hgetall(keys.topic(name)))
    finally:
        client.close()
    click.echo(f"{'created' if reply[3] else 'exists'} topic={name} {settings} "
               f"{retention.describe()}")  # fmt: skip


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@_retention_options()
@_redis_url
@_key_prefix
def alter(
    name: str,
    retention_ms: int | None,
    retention_bytes: int | None,
    retention_ignore_groups: bool | None,
    redis_url: str,
    key_prefix: str,
) -> None:
    """Change topic NAME's retention (partitions and replication never change)."""
    keys = Keys(key_prefix)
    client = _client(redis_url)
    try:
        if not client.exists(keys.topic(name)):
            raise click.ClickException(f"no topic {name}")
        _store_retention(client, keys, name, retention_ms, retention_bytes, retention_ignore_groups)
        retention = inspect.retention_of(client.hgetall(keys.topic(name)))
    finally:
        client.close()
    click.echo(f"altered topic={name} {retention.describe()}")


def _print_topic(view: inspect.TopicView) -> None:
    click.echo(
        f"topic={view.name} partitions={view.partitions} "
        f"replication_factor={view.replication_factor} "
        f"min_insync_replicas={view.min_insync_replicas} {view.retention.describe()}"
    )
    for p in view.partition_views:
        acked = " ".join(f"{r}:{o}" for r, o in p.acked.items())
        click.echo(
            f"partition={p.partition} role={p.role} log_end={p.log_end} "
            f"hw={p.high_watermark} isr=[{' '.join(map(str, p.isr))}] acked=[{acked}] "
            f"records={p.records} first_offset={p.first_offset}"
        )


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value))


def _describe(name: str, redis_url: str, key_prefix: str, as_json: bool) -> None:
    client = _client(redis_url)
    try:
        view = inspect.topic(client, Keys(key_prefix), name)
    finally:
        client.close()
    if view is None:
        raise click.ClickException(f"no topic {name}")
    if as_json:
        _echo_json(view)
    else:
        _print_topic(view)


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@_redis_url
@_key_prefix
@_as_json
def describe(name: str, redis_url: str, key_prefix: str, as_json: bool) -> None:
    """Show topic NAME: settings, and per partition role, log end, hw, ISR, replicas."""
    _describe(name, redis_url, key_prefix, as_json)


@topic.command()
@click.argument("name", required=False, callback=lambda _c, _p, v: v and _name(v))
@_redis_url
@_key_prefix
def trim(name: str | None, redis_url: str, key_prefix: str) -> None:
    """Apply retention now to topic NAME (default: every topic)."""
    from mapping.retention import enforce_all, enforce_topic

    async def run() -> list:
        from mapping.store import Store, connect, make_batcher

        client = connect(redis_url)
        batcher = make_batcher(client)
        store = Store(batcher, Keys(key_prefix))
        store.sequence_bits = await _stored_bits(client, store.keys)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(batcher.run)
                try:
                    if name is None:
                        return await enforce_all(store)
                    return await enforce_topic(store, name)
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            await client.aclose()

    for r in anyio.run(run):
        click.echo(
            f"topic={r.topic} partition={r.partition} trimmed={r.trimmed} "
            f"first_offset={r.first_kept}"
        )


async def _stored_bits(client: Any, keys: Keys) -> int:
    stored = await client.hget(keys.meta, "sequence_bits")
    return int(stored) if stored is not None else DEFAULT_SEQUENCE_BITS


@click.group(name="inspect")
def inspect_group() -> None:
    """Look at a deployment's topics and groups (read-only)."""


@inspect_group.command(name="topics")
@_redis_url
@_key_prefix
@_as_json
def inspect_topics(redis_url: str, key_prefix: str, as_json: bool) -> None:
    """One line per topic: settings, records, and the partitions' hw."""
    keys = Keys(key_prefix)
    client = _client(redis_url)
    try:
        views = [inspect.topic(client, keys, n) for n in inspect.topic_names(client, keys)]
    finally:
        client.close()
    views = [v for v in views if v is not None]
    if as_json:
        _echo_json([dataclasses.asdict(v) for v in views])
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
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@_redis_url
@_key_prefix
@_as_json
def inspect_topic(name: str, redis_url: str, key_prefix: str, as_json: bool) -> None:
    """Topic NAME: settings, then per partition role, log end, hw, ISR, acked offsets."""
    _describe(name, redis_url, key_prefix, as_json)


@inspect_group.command(name="groups")
@click.option("--topic", "topic_name", default=None, help="Only groups of this topic.")
@_redis_url
@_key_prefix
@_as_json
def inspect_groups(topic_name: str | None, redis_url: str, key_prefix: str, as_json: bool) -> None:
    """One line per (group, topic): generation, members, total lag."""
    keys = Keys(key_prefix)
    client = _client(redis_url)
    try:
        views = [
            inspect.group(client, keys, g, t)
            for g, t in inspect.group_pairs(client, keys)
            if topic_name is None or t == topic_name
        ]
    finally:
        client.close()
    views = [v for v in views if v is not None]
    if as_json:
        _echo_json([dataclasses.asdict(v) for v in views])
        return
    for v in views:
        click.echo(
            f"group={v.group} topic={v.topic} generation={v.generation} "
            f"assignor={v.assignor} members={len(v.members)} "
            f"lag={sum(p.lag for p in v.partitions)}"
        )


@inspect_group.command(name="group")
@click.argument("group_name", metavar="GROUP", callback=lambda _c, _p, v: _name(v))
@click.argument("topic_name", metavar="TOPIC", callback=lambda _c, _p, v: _name(v))
@_redis_url
@_key_prefix
@_as_json
def inspect_one_group(
    group_name: str, topic_name: str, redis_url: str, key_prefix: str, as_json: bool
) -> None:
    """GROUP on TOPIC: generation, members and their partitions, committed offsets, lag."""
    client = _client(redis_url)
    try:
        view = inspect.group(client, Keys(key_prefix), group_name, topic_name)
    finally:
        client.close()
    if view is None:
        raise click.ClickException(f"no group {group_name} on topic {topic_name}")
    if as_json:
        _echo_json(view)
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
        lag = f"{p.lag}+" if p.lag >= inspect.LAG_COUNT_CAP else str(p.lag)
        click.echo(
            f"partition={p.partition} owner={p.owner or '-'} committed={committed} "
            f"hw={p.high_watermark} lag={lag}"
        )
