"""``python -m adapter quota set|show|remove``: Kafka's client quotas in Redis, the ones
AlterClientQuotas / DescribeClientQuotas change and show (every pod follows them at once).
mapping.security.quotas (redis) is imported where a command runs, never for its --help."""

from __future__ import annotations

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget

_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def _entity_options(command: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        (
            click.option("--user", help="The user (its SASL / AUTH name)."),
            click.option("--user-default", is_flag=True, help="The default user."),
            click.option("--client-id", help="The client id."),
            click.option("--client-id-default", is_flag=True, help="The default client id."),
        )
    ):
        command = option(command)
    return command


def _entity(
    user: str | None, user_default: bool, client_id: str | None, client_id_default: bool
) -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = []
    if user is not None or user_default:
        pairs.append(("user", None if user_default else user))
    if client_id is not None or client_id_default:
        pairs.append(("client-id", None if client_id_default else client_id))
    return pairs


@click.group()
def quota() -> None:
    """Kafka's client quotas per user and/or client id (bytes per second; see
    docs/security.md, "Quotas")."""


@quota.command("set")
@_entity_options
@click.option("--producer-byte-rate", type=int, help="Produce bytes per second.")
@click.option("--consumer-byte-rate", type=int, help="Fetch bytes per second.")
@click.option(
    "--request-percentage",
    type=float,
    help="Percent of one event loop's time per window its requests may hold.",
)
@options.redis_target
def set_quota(
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_id_default: bool,
    producer_byte_rate: int | None,
    consumer_byte_rate: int | None,
    request_percentage: float | None,
    target: RedisTarget,
) -> None:
    """Set quotas of an entity, e.g. ``--user alice --client-id app --producer-byte-rate
    1048576``."""
    rates = (producer_byte_rate, consumer_byte_rate, request_percentage)
    values = dict(zip(_KEYS, rates, strict=True))
    ops = [(key, float(value), False) for key, value in values.items() if value is not None]
    _alter(target, _entity(user, user_default, client_id, client_id_default), ops)


@quota.command()
@_entity_options
@click.option("--key", "keys", multiple=True, type=click.Choice(_KEYS), required=True)
@options.redis_target
def remove(
    user: str | None,
    user_default: bool,
    client_id: str | None,
    client_id_default: bool,
    keys: tuple[str, ...],
    target: RedisTarget,
) -> None:
    """Remove quotas of an entity."""
    ops = [(key, 0.0, True) for key in keys]
    _alter(target, _entity(user, user_default, client_id, client_id_default), ops)


def _alter(
    target: RedisTarget, pairs: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]
) -> None:
    from mapping.security.quotas import (
        QuotaError,
        alteration,
        describe_entity,
        entity_of,
        quota_field,
    )

    try:
        entity = entity_of(pairs)
        changes = alteration(ops)
    except QuotaError as exc:
        raise click.UsageError(exc.message) from None
    if not changes:
        raise click.UsageError("nothing to change")
    client = target.connect()
    try:
        sets = {quota_field(entity, k): repr(v) for k, v in changes.items() if v is not None}
        removes = [quota_field(entity, k) for k, v in changes.items() if v is None]
        if sets:
            client.hset(target.keys.client_quotas, mapping=sets)
        if removes:
            client.hdel(target.keys.client_quotas, *removes)
        client.publish(target.keys.client_quotas_changed_channel, "changed")
    finally:
        client.close()
    click.echo(f"altered {describe_entity(entity)}")


@quota.command()
@options.redis_target
def show(target: RedisTarget) -> None:
    """Every entity's quotas, one line each."""
    from mapping.security.quotas import describe_entity, parse_quotas

    client = target.connect()
    try:
        quotas = parse_quotas(client.hgetall(target.keys.client_quotas))
    finally:
        client.close()
    for entity, values in sorted(quotas.items(), key=lambda item: describe_entity(item[0])):
        shown = " ".join(f"{k}={v:g}" for k, v in sorted(values.items()))
        click.echo(f"{describe_entity(entity)} {shown}")
