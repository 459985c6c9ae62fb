"""``python -m adapter topic create|describe``: topics with their own replication settings.

Topics are also created on first use with the pod's defaults; ``create`` sets partitions,
replication factor and min ISR up front. A topic's settings never change once created.
"""

from __future__ import annotations

import click
import redis

from mapping import scripts
from mapping.keys import DEFAULT_PREFIX, Keys, is_valid_name

_redis_url = click.option(
    "--redis-url",
    required=True,
    envvar="ADAPTER_REDIS_URL",
    show_envvar=True,
    help="redis://HOST:PORT/DB of the deployment.",
)
_key_prefix = click.option(
    "--key-prefix",
    default=DEFAULT_PREFIX,
    envvar="ADAPTER_KEY_PREFIX",
    show_envvar=True,
    show_default=True,
    help="Prefix of every Redis key.",
)


def _name(value: str) -> str:
    if not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value


@click.group()
def topic() -> None:
    """Create and inspect topics."""


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@click.option("--partitions", type=click.IntRange(1, 10_000), default=3, show_default=True)
@click.option("--replication-factor", type=click.IntRange(1, 16), default=3, show_default=True)
@click.option("--min-insync-replicas", type=click.IntRange(1, 16), default=2, show_default=True)
@_redis_url
@_key_prefix
def create(
    name: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
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
    client = redis.Redis.from_url(redis_url)
    try:
        script = scripts.load("ensure_topic")
        reply = client.eval(script.source, 1, keys.topic(name), *wanted)
        stored = (int(reply[0]), int(reply[1]), int(reply[2]))
        if reply[3]:
            client.sadd(keys.topics, name)
            client.publish(keys.topics_channel, name)
    finally:
        client.close()
    settings = (
        f"partitions={stored[0]} replication_factor={stored[1]} min_insync_replicas={stored[2]}"
    )
    if not reply[3] and stored != wanted:
        raise click.ClickException(f"topic {name} exists with other settings: {settings}")
    click.echo(f"{'created' if reply[3] else 'exists'} topic={name} {settings}")


@topic.command()
@click.argument("name", callback=lambda _c, _p, v: _name(v))
@_redis_url
@_key_prefix
def describe(name: str, redis_url: str, key_prefix: str) -> None:
    """Show topic NAME: settings, and per partition role, log end, hw, ISR, replicas."""
    keys = Keys(key_prefix)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        settings = client.hgetall(keys.topic(name))
        if not settings:
            raise click.ClickException(f"no topic {name}")
        partitions = int(settings["partitions"])
        rf = int(settings["replication_factor"])
        click.echo(
            f"topic={name} partitions={partitions} replication_factor={rf} "
            f"min_insync_replicas={settings['min_insync_replicas']}"
        )
        for p in range(partitions):
            state = client.hgetall(keys.partition(name, p).state)
            replicas = " ".join(
                f"{r}:{state.get(f'replica.{r}.acked_offset', '-1')}" for r in range(1, rf)
            )
            click.echo(
                f"partition={p} role={state.get('role', 'leader')} "
                f"log_end={state.get('log_end', '-1')} hw={state.get('hw', '-1')} "
                f"isr=[{state.get('isr', ' '.join(map(str, range(rf))))}] "
                f"acked=[{replicas}]"
            )
    finally:
        client.close()
