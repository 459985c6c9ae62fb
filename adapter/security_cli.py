"""The ``serve`` options for limits, TLS, authentication and startup checks, and
``python -m adapter user add|remove|list|hash`` for the users AUTH checks in Redis."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from adapter.settings import Settings
from adapter.topics_cli import _key_prefix, _redis_url
from mapping.auth import RedisUsers, hash_password
from mapping.cluster import connect_sync
from mapping.keys import Keys, is_valid_name

defaults = Settings()
_file = click.Path(exists=True, dir_okay=False, path_type=Path)

SERVE_OPTIONS = [
    click.option(
        "--max-connections",
        default=defaults.max_connections,
        type=click.IntRange(0),
        show_envvar=True,
        help="Open client connections per pod; one more gets ERR|UNAVAILABLE and is closed "
        "(0: no limit).",
    ),
    click.option(
        "--idle-timeout-s",
        default=defaults.idle_timeout_s,
        type=click.FloatRange(0),
        show_envvar=True,
        help="Close a connection that sends nothing (with nothing outstanding), or takes no "
        "reply, for this long (0: never).",
    ),
    click.option(
        "--tcp-keepalive-s",
        default=defaults.tcp_keepalive_s,
        type=click.IntRange(0),
        show_envvar=True,
        help="TCP keepalive: probe an idle connection after this long and drop a vanished "
        "peer (0: OS defaults).",
    ),
    click.option(
        "--max-in-flight",
        default=defaults.max_in_flight,
        type=click.IntRange(0),
        show_envvar=True,
        help="Requests of one connection answered at once; the pod reads no more from a "
        "connection until their replies are sent (0: no limit).",
    ),
    click.option(
        "--consume-max-bytes",
        default=defaults.consume_max_bytes,
        type=click.IntRange(0),
        show_envvar=True,
        help="Value bytes one CONSUME returns at most (the first record always; 0: no limit).",
    ),
    click.option(
        "--tls-cert",
        default=None,
        type=_file,
        show_envvar=True,
        help="PEM certificate (chain): serve V1 over TLS.",
    ),
    click.option(
        "--tls-key",
        default=None,
        type=_file,
        show_envvar=True,
        help="PEM private key of --tls-cert.",
    ),
    click.option(
        "--tls-client-ca",
        default=None,
        type=_file,
        show_envvar=True,
        help="Require client certificates signed by this PEM CA.",
    ),
    click.option(
        "--auth-file",
        default=None,
        type=_file,
        show_envvar=True,
        help="Require AUTH <user> <password>; users from this file of <user>:<hash> lines "
        "(made by `adapter user hash`).",
    ),
    click.option(
        "--auth-redis/--no-auth-redis",
        default=False,
        show_envvar=True,
        help="Require AUTH <user> <password>; users stored in Redis (`adapter user add`).",
    ),
    click.option(
        "--auth-timeout-s",
        default=defaults.auth_timeout_s,
        type=click.FloatRange(0),
        show_envvar=True,
        help="With authentication on: close a connection that has not authenticated this "
        "long after it opened (0: never).",
    ),
    click.option(
        "--redis-username", default=None, show_envvar=True, help="Redis ACL user (or in the URL)."
    ),
    click.option(
        "--redis-password",
        default=None,
        show_envvar=True,
        help="Redis password (or in the URL); prefer the environment variable.",
    ),
    click.option(
        "--redis-tls-ca",
        default=None,
        type=_file,
        show_envvar=True,
        help="With rediss://: trust this PEM CA for Redis' certificate.",
    ),
    click.option(
        "--redis-tls-cert",
        default=None,
        type=_file,
        show_envvar=True,
        help="With rediss://: client certificate presented to Redis.",
    ),
    click.option(
        "--redis-tls-key",
        default=None,
        type=_file,
        show_envvar=True,
        help="With rediss://: private key of --redis-tls-cert.",
    ),
    click.option(
        "--require-aof/--no-require-aof",
        default=False,
        show_envvar=True,
        help="Refuse to start unless Redis has AOF on (acknowledged records survive a "
        "Redis restart).",
    ),
    click.option(
        "--redis-startup-timeout-s",
        default=defaults.redis_startup_timeout_s,
        type=click.FloatRange(0),
        show_envvar=True,
        help="How long a starting pod waits for Redis to answer before giving up.",
    ),
]


def security_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Apply every option above to ``serve`` (their names are `Settings` fields)."""
    for option in reversed(SERVE_OPTIONS):
        command = option(command)
    return command


def check_tls_options(options: dict[str, Any]) -> None:
    if options.get("tls_key") and not options.get("tls_cert"):
        raise click.UsageError("--tls-key needs --tls-cert")
    if options.get("tls_client_ca") and not options.get("tls_cert"):
        raise click.UsageError("--tls-client-ca needs --tls-cert (client certificates need TLS)")


# --- python -m adapter user ...


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


def _users(redis_url: str, key_prefix: str) -> RedisUsers:
    return RedisUsers(connect_sync(redis_url), Keys(key_prefix))


@click.group()
def user() -> None:
    """Manage the client users AUTH checks (pods started with --auth-redis)."""


@user.command()
@click.argument("name", callback=_user_name)
@_password
@_redis_url
@_key_prefix
def add(name: str, password: str, redis_url: str, key_prefix: str) -> None:
    """Add user NAME, or set a new password for an existing one."""
    users = _users(redis_url, key_prefix)
    try:
        created = users.add(name, password)
    finally:
        users.client.close()
    click.echo(f"{'added' if created else 'updated'} user={name}")


@user.command()
@click.argument("name", callback=_user_name)
@_redis_url
@_key_prefix
def remove(name: str, redis_url: str, key_prefix: str) -> None:
    """Remove user NAME (its open connections stay authenticated until they close)."""
    users = _users(redis_url, key_prefix)
    try:
        if not users.remove(name):
            raise click.ClickException(f"no user {name}")
    finally:
        users.client.close()
    click.echo(f"removed user={name}")


@user.command(name="list")
@_redis_url
@_key_prefix
def list_users(redis_url: str, key_prefix: str) -> None:
    """List the users stored in Redis."""
    users = _users(redis_url, key_prefix)
    try:
        for name in users.names():
            click.echo(name)
    finally:
        users.client.close()


@user.command(name="hash")
@click.argument("name", callback=_user_name)
@_password
def hash_line(name: str, password: str) -> None:
    """Print an --auth-file line for user NAME (nothing is stored)."""
    click.echo(f"{name}:{hash_password(password)}")
