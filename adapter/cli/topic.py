"""Operations commands: ``python -m adapter topic ...``.

    topic create NAME [--partitions N --replication-factor N --min-insync-replicas N
                       --retention-ms MS --retention-bytes B --retention-ignore-groups]
    topic alter NAME [--partitions N (grow only) --retention-ms MS --retention-bytes B
                      --retention-ignore-groups/...]
    topic list                   one line per topic: partitions, replication, cleanup policy
    topic describe NAME          (= inspect topic NAME)
    topic trim [NAME]            apply retention now (pods also do it periodically)
    topic compact [NAME]         compact the compacted topics now (pods do it periodically)
    topic delete NAME            delete it: records, replicas, state, settings, its groups

Topics are also created on first use with the pod's defaults; ``create`` sets partitions,
replication factor and min ISR up front (replication never changes once created); ``alter``
changes retention at any time and grows the partition count (as Kafka's CreatePartitions:
every pod reads the new count at once, and key partitioning uses it from then on).
Every command takes ``--redis-url`` (a ``redis+cluster://`` URL for a cluster), the Redis
login options of ``serve`` (``--redis-username``, ``--redis-password``/
``ADAPTER_REDIS_PASSWORD``, ``--redis-tls-*``) and ``--key-prefix``; ``list`` and ``describe``
take ``--json``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import click

from adapter.cli import options
from adapter.cli.lazy import LazyGroup
from adapter.cli.options import RedisTarget, topic_name
from adapter.cli.topic_configs import (
    config_option,
    delete_config_option,
    deleted_fields,
    describe_configs,
    parse_configs,
    stored_fields,
)
from mapping.topic.topic_config import (
    MAX_PARTITIONS,
    MAX_REPLICATION_FACTOR,
    config_field,
    is_internal_topic,
    retention_fields,
)
from mapping.topic.topic_configs import TOPIC_CONFIGS

if TYPE_CHECKING:  # (imported where a command runs, never for its --help)
    from mapping.partition.partitions import Partitions

T = TypeVar("T")
MIN_ISR = "min.insync.replicas"


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


@click.group(cls=LazyGroup, lazy_subcommands={"tail": "adapter.cli.topic_tail:tail"})
def topic() -> None:
    """Create, change and inspect topics."""


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@click.option("--partitions", type=click.IntRange(1, MAX_PARTITIONS), default=3, show_default=True)
@click.option(
    "--replication-factor",
    type=click.IntRange(1, MAX_REPLICATION_FACTOR),
    default=3,
    show_default=True,
)
@click.option(
    "--min-insync-replicas",
    type=click.IntRange(1, MAX_REPLICATION_FACTOR),
    default=2,
    show_default=True,
)
@_retention_options()
@config_option
@options.redis_target
def create(
    name: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    retention_ms: int | None,
    retention_bytes: int | None,
    retention_ignore_groups: bool | None,
    configs: tuple[str, ...],
    target: RedisTarget,
) -> None:
    """Create topic NAME (an existing topic with other settings is an error). Names Kafka
    reserves for its internal topics (__consumer_offsets, ...) are refused."""
    wanted_configs = parse_configs(configs)
    if MIN_ISR in wanted_configs:
        min_insync_replicas = int(wanted_configs.pop(MIN_ISR))
    if is_internal_topic(name):
        raise click.BadParameter(f"creation of internal topic {name} is prohibited (Kafka's)")
    if min_insync_replicas > replication_factor:
        raise click.BadParameter(
            "cannot exceed --replication-factor", param_hint="--min-insync-replicas"
        )
    from mapping.operations import inspection
    from mapping.topic.topics import alter_configs_sync, ensure_topic_sync, read_settings_sync

    keys = target.keys
    wanted = (partitions, replication_factor, min_insync_replicas)
    client = target.connect()
    try:
        ensured = ensure_topic_sync(client, keys, name, *wanted)
        assert ensured is not None  # created, or there
        config, created = ensured.config, ensured.created
        stored = (config.partitions, config.replication_factor, config.min_insync_replicas)
        settings = (
            f"partitions={stored[0]} replication_factor={stored[1]} min_insync_replicas={stored[2]}"
        )
        if not created and stored != wanted:
            raise click.ClickException(f"topic {name} exists with other settings: {settings}")
        changes = retention_fields(retention_ms, retention_bytes, retention_ignore_groups)
        alter_configs_sync(client, keys, name, {**changes, **stored_fields(wanted_configs)})
        stored_settings = read_settings_sync(client, keys, name)
        retention = inspection.retention_of(stored_settings)
    finally:
        client.close()
    click.echo(f"{'created' if created else 'exists'} topic={name} {settings} "
               f"{retention.describe()}{_shown(configs, stored_settings)}")  # fmt: skip


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@click.option(
    "--partitions",
    type=click.IntRange(1),
    help="Grow the topic to this many partitions (never fewer: records stay where they are).",
)
@_retention_options()
@config_option
@delete_config_option
@options.redis_target
def alter(
    name: str,
    partitions: int | None,
    retention_ms: int | None,
    retention_bytes: int | None,
    retention_ignore_groups: bool | None,
    configs: tuple[str, ...],
    deleted: tuple[str, ...],
    target: RedisTarget,
) -> None:
    """Change topic NAME's configs (retention, --config, --delete-config), or grow its
    partition count (replication never changes). Every pod hears of it at once (pub/sub)."""
    config_changes = {**deleted_fields(deleted), **stored_fields(parse_configs(configs))}
    changes = {
        **retention_fields(retention_ms, retention_bytes, retention_ignore_groups),
        **config_changes,
    }
    if partitions is not None:
        _refuse_internal(name, "adding partitions to")
        _grow(name, partitions, target)
        if not changes:  # only the partitions changed: their line says it all
            return
    from mapping.operations import inspection
    from mapping.topic.topics import alter_configs_sync, read_settings_sync

    keys = target.keys
    client = target.connect()
    try:
        if not read_settings_sync(client, keys, name):
            raise click.ClickException(f"no topic {name}")
        alter_configs_sync(client, keys, name, changes)
        stored_settings = read_settings_sync(client, keys, name)
        retention = inspection.retention_of(stored_settings)
    finally:
        client.close()
    shown = _shown(configs + deleted, stored_settings)
    click.echo(f"altered topic={name} {retention.describe()}{shown}")


def _refuse_internal(name: str, what: str) -> None:
    """Kafka's internal topics keep their shape: __consumer_offsets is the pods' mirror of
    the committed offsets (mapping/group/offsets_mirror.py: its records are placed by partition
    count), the others are never made."""
    if is_internal_topic(name):
        raise click.BadParameter(f"{what} internal topic {name} is prohibited")


def _shown(asked: tuple[str, ...], stored_settings: dict[str, str]) -> str:
    """The configs set, after a command that named configs (else nothing: the output of
    the retention options stays as it was)."""
    return f" {describe_configs(stored_settings)}" if asked else ""


def _grow(name: str, count: int, target: RedisTarget) -> None:
    from adapter.cli.local_pod import run_on_redis
    from mapping.operations.topic_lifecycle import (
        InvalidPartitions,
        PartitionGrowth,
        add_partitions,
    )

    async def work(partitions: Partitions) -> PartitionGrowth | InvalidPartitions | None:
        try:
            return await add_partitions(partitions.topics, name, count)
        except InvalidPartitions as exc:  # (the task group would wrap it)
            return exc

    growth = run_on_redis(target, work)
    if isinstance(growth, InvalidPartitions):
        raise click.ClickException(str(growth))
    if growth is None:
        raise click.ClickException(f"no topic {name}")
    click.echo(f"altered topic={name} partitions={growth.before}->{growth.after}")


@dataclasses.dataclass(frozen=True)
class TopicListing:
    """One line of ``topic list``."""

    name: str
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    cleanup_policy: str


CLEANUP_POLICY = "cleanup.policy"


@topic.command(name="list")
@options.redis_target
@options.as_json
def list_topics(target: RedisTarget, as_json: bool) -> None:
    """One line per topic, by name: partitions, replication factor, min ISR and cleanup
    policy (``inspect topics`` adds records and hw, ``topic describe`` each partition)."""
    from mapping.operations import inspection
    from mapping.topic.topics import read_settings_sync

    client = target.connect()
    try:
        listed = []
        for name in inspection.topic_names(client, target.keys):
            stored = read_settings_sync(client, target.keys, name)
            if not stored:  # deleted meanwhile
                continue
            listed.append(
                TopicListing(
                    name,
                    int(stored["partitions"]),
                    int(stored["replication_factor"]),
                    int(stored["min_insync_replicas"]),
                    stored.get(config_field(CLEANUP_POLICY))
                    or str(TOPIC_CONFIGS[CLEANUP_POLICY].default),
                )
            )
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(t) for t in listed]))
        return
    for t in listed:
        click.echo(
            f"topic={t.name} partitions={t.partitions} replication_factor={t.replication_factor} "
            f"min_insync_replicas={t.min_insync_replicas} cleanup_policy={t.cleanup_policy}"
        )


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@options.redis_target
@options.as_json
def describe(name: str, target: RedisTarget, as_json: bool) -> None:
    """Show topic NAME: settings, per partition role, log end, hw, ISR, replicas, then the
    Kafka configs set on it."""
    from adapter.cli.inspect import describe_topic

    describe_topic(name, target, as_json, configs=True)


@topic.command()
@click.argument("name", required=False, callback=lambda _c, _p, v: v and topic_name(v))
@options.redis_target
def trim(name: str | None, target: RedisTarget) -> None:
    """Apply retention now to topic NAME (default: every topic)."""
    from adapter.cli.local_pod import run_on_redis
    from mapping.operations.retention import enforce_all, enforce_topic

    async def work(partitions: Partitions) -> list:
        return await (enforce_all(partitions) if name is None else enforce_topic(partitions, name))

    for r in run_on_redis(target, work):
        click.echo(
            f"topic={r.topic} partition={r.partition} trimmed={r.trimmed} "
            f"first_offset={r.first_kept}"
        )


@topic.command()
@click.argument("name", required=False, callback=lambda _c, _p, v: v and topic_name(v))
@options.redis_target
def compact(name: str | None, target: RedisTarget) -> None:
    """Compact topic NAME now (default: every compacted topic); see docs/compaction.md."""
    from adapter.cli.local_pod import run_on_redis
    from mapping.partition.compaction import compact_all, compact_topic

    async def work(partitions: Partitions) -> list:
        return await (compact_all(partitions) if name is None else compact_topic(partitions, name))

    for r in run_on_redis(target, work):
        click.echo(
            f"topic={r.topic} partition={r.partition} removed={r.removed} "
            f"tombstones_removed={r.tombstones_removed} dirty={r.dirty}"
        )


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: topic_name(v))
@options.redis_target
def delete(name: str, target: RedisTarget) -> None:
    """Delete topic NAME: its records, replicas, partition state, settings and groups.

    Every pod forgets the topic at once; a pod with auto-creation on makes it anew (with
    its defaults) when a command names it again."""
    from adapter.cli.local_pod import run_on_pod
    from mapping.operations.topic_lifecycle import delete_topic

    deletion = run_on_pod(
        target, lambda pod: delete_topic(pod.topics, name, mirror=pod.offsets_mirror)
    )
    if deletion is None:
        raise click.ClickException(f"no topic {name}")
    click.echo(
        f"deleted topic={name} partitions={deletion.partitions} "
        f"groups=[{' '.join(deletion.groups)}]"
    )
