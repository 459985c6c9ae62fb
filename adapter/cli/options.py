"""Options shared by the command lines: where the deployment's Redis is and how to log in
to it (the same options, and ``ADAPTER_REDIS_*`` variables, for ``serve`` and every other
command), and ``serve``'s limits, TLS, authentication and startup checks."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from adapter.settings import Settings
from mapping.cluster import SyncClient, connect_sync, credentials, is_tls_url
from mapping.keys import DEFAULT_PREFIX, Keys

_file = click.Path(exists=True, dir_okay=False, path_type=Path)

# The parts of `redis_target`; a command that reads or writes the deployment takes
# `@redis_target` (URL, login and prefix as one `RedisTarget`), never these alone: without the
# login options it could not reach a password-protected Redis.
redis_url = click.option(
    "--redis-url",
    required=True,
    envvar="ADAPTER_REDIS_URL",
    show_envvar=True,
    help="redis://HOST:PORT/DB of the deployment (rediss:// for TLS, redis+cluster://HOST:PORT "
    "for a cluster).",
)
key_prefix = click.option(
    "--key-prefix",
    default=DEFAULT_PREFIX,
    envvar="ADAPTER_KEY_PREFIX",
    show_envvar=True,
    show_default=True,
    help="Prefix of every Redis key.",
)
as_json = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")

# How to log in to Redis beyond what the URL carries. The variables are named explicitly so
# that ADAPTER_REDIS_PASSWORD reaches every subcommand (click's automatic names would be
# ADAPTER_TOPIC_CREATE_REDIS_PASSWORD and so on).
REDIS_LOGIN_OPTIONS = [
    click.option(
        "--redis-username",
        default=None,
        envvar="ADAPTER_REDIS_USERNAME",
        show_envvar=True,
        help="Redis ACL user (or in the URL).",
    ),
    click.option(
        "--redis-password",
        default=None,
        envvar="ADAPTER_REDIS_PASSWORD",
        show_envvar=True,
        help="Redis password (or in the URL); prefer the environment variable.",
    ),
    click.option(
        "--redis-tls-ca",
        default=None,
        type=_file,
        envvar="ADAPTER_REDIS_TLS_CA",
        show_envvar=True,
        help="With rediss://: trust this PEM CA for Redis' certificate.",
    ),
    click.option(
        "--redis-tls-cert",
        default=None,
        type=_file,
        envvar="ADAPTER_REDIS_TLS_CERT",
        show_envvar=True,
        help="With rediss://: client certificate presented to Redis.",
    ),
    click.option(
        "--redis-tls-key",
        default=None,
        type=_file,
        envvar="ADAPTER_REDIS_TLS_KEY",
        show_envvar=True,
        help="With rediss://: private key of --redis-tls-cert.",
    ),
]


@dataclass(frozen=True)
class RedisTarget:
    """The deployment a command works on: its Redis, how to log in, and its key prefix."""

    url: str
    keys: Keys
    login: dict[str, Any] = field(default_factory=dict)  # see mapping.cluster.credentials

    def connect(self, **options: Any) -> SyncClient:
        """A synchronous client (a cluster client for a ``redis+cluster://`` URL)."""
        return connect_sync(self.url, **self.login, **options)


def check_redis_tls(url: str | None, tls_files: list[Path | None]) -> None:
    """TLS files only mean something with a TLS URL: say so instead of redis-py's TypeError."""
    if any(path is not None for path in tls_files) and not (url and is_tls_url(url)):
        raise click.UsageError(
            "--redis-tls-ca/--redis-tls-cert/--redis-tls-key need a rediss:// "
            "(or rediss+cluster://) --redis-url"
        )


def redis_target(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --redis-url, the login options and --key-prefix to ``command``, which receives
    them as one ``target: RedisTarget``."""

    @functools.wraps(command)
    def with_target(
        *args: Any,
        redis_url: str,
        key_prefix: str,
        redis_username: str | None,
        redis_password: str | None,
        redis_tls_ca: Path | None,
        redis_tls_cert: Path | None,
        redis_tls_key: Path | None,
        **kwargs: Any,
    ) -> Any:
        check_redis_tls(redis_url, [redis_tls_ca, redis_tls_cert, redis_tls_key])
        login = credentials(
            username=redis_username,
            password=redis_password,
            tls_ca=redis_tls_ca,
            tls_cert=redis_tls_cert,
            tls_key=redis_tls_key,
        )
        return command(*args, target=RedisTarget(redis_url, Keys(key_prefix), login), **kwargs)

    for option in reversed([redis_url, *REDIS_LOGIN_OPTIONS, key_prefix]):
        with_target = option(with_target)
    return with_target


defaults = Settings()

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
        help="Require V1 AUTH <user> <password> and Kafka SASL; users from this file of "
        "<user>:<hash>[:<SCRAM secrets>] lines (made by `adapter user hash`).",
    ),
    click.option(
        "--auth-redis/--no-auth-redis",
        default=False,
        show_envvar=True,
        help="Require V1 AUTH <user> <password> and Kafka SASL; users stored in Redis "
        "(`adapter user add`).",
    ),
    click.option(
        "--auth-timeout-s",
        default=defaults.auth_timeout_s,
        type=click.FloatRange(0),
        show_envvar=True,
        help="With authentication on: close a connection that has not authenticated this "
        "long after it opened (0: never).",
    ),
    *REDIS_LOGIN_OPTIONS,
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
    click.option(
        "--allow-evicting-redis/--no-allow-evicting-redis",
        default=False,
        show_envvar=True,
        help="Start even when Redis' maxmemory-policy evicts keys (anything but noeviction), "
        "which silently loses records, offsets and group state once memory is full.",
    ),
]


def security_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Apply every option above to ``serve`` (their names are `Settings` fields)."""
    for option in reversed(SERVE_OPTIONS):
        command = option(command)
    return command


def check_tls_options(options: dict[str, Any]) -> None:
    check_redis_tls(
        options.get("redis_url"),
        [options.get(name) for name in ("redis_tls_ca", "redis_tls_cert", "redis_tls_key")],
    )
    if options.get("tls_key") and not options.get("tls_cert"):
        raise click.UsageError("--tls-key needs --tls-cert")
    if options.get("tls_client_ca") and not options.get("tls_cert"):
        raise click.UsageError("--tls-client-ca needs --tls-cert (client certificates need TLS)")
