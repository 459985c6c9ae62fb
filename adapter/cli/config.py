"""``adapter config show|set|delete``: the cluster-wide dynamic broker configs (what
``kafka-configs.sh --entity-type brokers --entity-default`` changes) and a group's configs
(``--group``: ``--entity-type groups``), checked as IncrementalAlterConfigs checks them
(mapping.topic.broker_configs); every pod follows a broker config change at once, a group's
at its next request. mapping is imported where a command runs, never for its --help."""

from __future__ import annotations

import json
from collections.abc import Mapping

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget

_GROUP = click.option(
    "--group", help="A group's configs (consumer.*, share.*) instead of the broker configs."
)


@click.group()
def config() -> None:
    """The cluster-wide broker configs, or a group's (see docs/kafka.md, "Configs")."""


def _key(target: RedisTarget, group: str | None) -> str:
    return target.keys.group_configs(group) if group else target.keys.broker_configs


def _stored(target: RedisTarget, group: str | None) -> dict[str, str]:
    from mapping.core.codec import to_str

    client = target.connect()
    try:
        fields = client.hgetall(_key(target, group))
    finally:
        client.close()
    return {to_str(k): to_str(v) for k, v in fields.items()}


def _catalogue(group: str | None) -> Mapping:
    from mapping.topic.broker_configs import ALL_GROUP_CONFIGS, BROKER_CONFIGS

    if group:
        return ALL_GROUP_CONFIGS
    return {n: d for n, d in BROKER_CONFIGS.items() if d.dynamic}


@config.command()
@_GROUP
@click.option("--json", "as_json", is_flag=True, help="One JSON object: name -> value, source.")
@options.redis_target
def show(group: str | None, as_json: bool, target: RedisTarget) -> None:
    """Every config that can be set, with its value: `set` where set, else `default`."""
    stored = _stored(target, group)
    rows = {
        name: {
            "value": stored.get(name, definition.default or ""),
            "source": "set" if name in stored else "default",
        }
        for name, definition in _catalogue(group).items()
    }
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True))
        return
    for name, row in sorted(rows.items()):
        click.echo(f"{name}={row['value']} ({row['source']})")


def _alter(
    target: RedisTarget, group: str | None, current: dict[str, str], updated: dict[str, str]
) -> None:
    """Store ``updated`` (the whole set, where ``current`` is stored) after the checks
    IncrementalAlterConfigs makes."""
    from mapping.topic.broker_configs import broker_changes, group_changes, hash_commands
    from mapping.topic.config_types import InvalidConfig

    try:
        if group:
            changes = group_changes(current, updated, _stored(target, None))
        else:
            changes = broker_changes(current, updated)
    except InvalidConfig as exc:
        raise click.UsageError(str(exc)) from None
    if not changes:
        click.echo("unchanged")
        return
    client = target.connect()
    try:
        for command in hash_commands(_key(target, group), changes):
            client.execute_command(*command)
        if not group:  # every pod reads the broker configs again
            client.publish(target.keys.broker_configs_channel, "changed")
    finally:
        client.close()
    for name, value in sorted(changes.items()):
        click.echo(f"{name}={value}" if value is not None else f"{name} (default again)")


def _known(names: list[str], group: str | None) -> None:
    catalogue = _catalogue(group)
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        kind = "group config" if group else "dynamic broker config"
        raise click.UsageError(f"not a {kind}: {', '.join(unknown)}")


@config.command("set")
@_GROUP
@click.argument("settings", nargs=-1, required=True, metavar="NAME=VALUE...")
@options.redis_target
def set_configs(group: str | None, settings: tuple[str, ...], target: RedisTarget) -> None:
    """Set configs given as NAME=VALUE (for instance
    group.share.min.record.lock.duration.ms=1000, or with --group G
    share.auto.offset.reset=earliest)."""
    pairs = [s.partition("=") for s in settings]
    malformed = [s for s, (_, sep, _) in zip(settings, pairs, strict=True) if not sep]
    if malformed:
        raise click.UsageError(f"expected NAME=VALUE: {', '.join(malformed)}")
    wanted = {name: value for name, _, value in pairs}
    _known(list(wanted), group)
    current = _stored(target, group)
    _alter(target, group, current, {**current, **wanted})


@config.command()
@_GROUP
@click.argument("names", nargs=-1, required=True, metavar="NAME...")
@options.redis_target
def delete(group: str | None, names: tuple[str, ...], target: RedisTarget) -> None:
    """Set configs back to their default."""
    _known(list(names), group)
    current = _stored(target, group)
    _alter(target, group, current, {n: v for n, v in current.items() if n not in names})
