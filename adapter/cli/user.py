"""``python -m adapter user add|remove|list|hash``: the users V1 AUTH and Kafka SASL check
(in Redis: the scrypt hash for AUTH and SASL PLAIN, the SCRAM secrets for SASL SCRAM).
mapping.security.auth (redis) is imported where a command runs, never for its --help."""

from __future__ import annotations

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget
from mapping.core.keys import is_valid_name


def _user_name(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value


_password = click.option(
    "--password",
    prompt=True,
    hide_input=True,
    confirmation_prompt=True,
    envvar="ADAPTER_USER_PASSWORD",
    help="The password (prompted for when not given; or ADAPTER_USER_PASSWORD).",
)


@click.group()
def user() -> None:
    """Manage the client users V1 AUTH and Kafka SASL check (pods started with --auth-redis)."""


@user.command()
@click.argument("name", callback=_user_name)
@_password
@options.redis_target
def add(name: str, password: str, target: RedisTarget) -> None:
    """Add user NAME, or set a new password for an existing one (stores the scrypt hash and
    the SCRAM-SHA-256/512 secrets Kafka SASL SCRAM needs)."""
    from mapping.security.auth import RedisUsers

    users = RedisUsers(target.connect(), target.keys)
    try:
        created = users.add(name, password)
    finally:
        users.client.close()
    click.echo(f"{'added' if created else 'updated'} user={name}")


@user.command()
@click.argument("name", callback=_user_name)
@options.redis_target
def remove(name: str, target: RedisTarget) -> None:
    """Remove user NAME (its open connections stay authenticated until they close)."""
    from mapping.security.auth import RedisUsers

    users = RedisUsers(target.connect(), target.keys)
    try:
        if not users.remove(name):
            raise click.ClickException(f"no user {name}")
    finally:
        users.client.close()
    click.echo(f"removed user={name}")


@user.command(name="list")
@options.redis_target
def list_users(target: RedisTarget) -> None:
    """List the users stored in Redis."""
    from mapping.security.auth import RedisUsers

    users = RedisUsers(target.connect(), target.keys)
    try:
        for name in users.names():
            click.echo(name)
    finally:
        users.client.close()


@user.command(name="hash")
@click.argument("name", callback=_user_name)
@_password
def hash_line(name: str, password: str) -> None:
    """Print an --auth-file line for user NAME (nothing is stored): the scrypt hash (V1 AUTH,
    Kafka SASL PLAIN) and the SCRAM-SHA-256/512 secrets (Kafka SASL SCRAM)."""
    from mapping.security.auth import auth_file_line

    click.echo(auth_file_line(name, password))
