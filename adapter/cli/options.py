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
from mapping.sentinel import sentinel_url

_file = click.Path(exists=True, dir_okay=False, path_type=Path)

# The parts of `redis_target`; a command that reads or writes the deployment takes
# `@redis_target` (URL, login and prefix as one `RedisTarget`), never these alone: without the
# login options it could not reach a password-protected Redis.
redis_url = click.option(
    "--redis-url",
    default=None,  # required unless --redis-sentinel names the deployment
    envvar="ADAPTER_REDIS_URL",
    show_envvar=True,
    help="redis://HOST:PORT/DB of the deployment (rediss:// for TLS, redis+cluster://HOST:PORT "
    "for a cluster); or --redis-sentinel.",
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


# Where the primary is when Sentinel watches it (mapping/sentinel.py): instead of --redis-url.
# The --redis-username/--redis-password/--redis-tls-* options still log in to the data nodes.
REDIS_SENTINEL_OPTIONS = [
    click.option(
        "--redis-sentinel",
        default=None,
        envvar="ADAPTER_REDIS_SENTINEL",
        show_envvar=True,
        metavar="[rediss://]HOST:PORT,...",
        help="Redis Sentinel instead of --redis-url: ask these sentinels for the primary and "
        "follow it across failovers (rediss:// for TLS to sentinels and Redis alike).",
    ),
    click.option(
        "--redis-sentinel-master",
        default=None,
        envvar="ADAPTER_REDIS_SENTINEL_MASTER",
        show_envvar=True,
        metavar="NAME",
        help="With --redis-sentinel: the name the sentinels monitor the primary under.",
    ),
    click.option(
        "--redis-sentinel-username",
        default=None,
        envvar="ADAPTER_REDIS_SENTINEL_USERNAME",
        show_envvar=True,
        help="With --redis-sentinel: ACL user on the sentinels, when they have their own.",
    ),
    click.option(
        "--redis-sentinel-password",
        default=None,
        envvar="ADAPTER_REDIS_SENTINEL_PASSWORD",
        show_envvar=True,
        help="With --redis-sentinel: the sentinels' own password (their requirepass); prefer "
        "the environment variable.",
    ),
]


def deployment_url(
    redis_url: str | None,
    sentinel: str | None,
    master: str | None,
    sentinel_login: list[str | None],
    *,
    required: bool,
) -> str | None:
    """The deployment's URL: ``--redis-url``, or the ``redis+sentinel://`` URL that
    ``--redis-sentinel`` and ``--redis-sentinel-master`` make. Usage errors say which option
    is wrong."""
    if sentinel is None:
        if master is not None or any(value is not None for value in sentinel_login):
            raise click.UsageError(
                "--redis-sentinel-master/--redis-sentinel-username/--redis-sentinel-password "
                "need --redis-sentinel"
            )
        if redis_url is None and required:
            raise click.UsageError("Missing option '--redis-url' (or --redis-sentinel)")
        return redis_url
    if redis_url is not None:
        raise click.UsageError("give --redis-url or --redis-sentinel, not both")
    if not master:
        raise click.UsageError("--redis-sentinel needs --redis-sentinel-master NAME")
    try:
        return sentinel_url(sentinel, master)
    except ValueError as exc:
        raise click.UsageError(f"--redis-sentinel: {exc}") from None


@dataclass(frozen=True)
class RedisTarget:
    """The deployment a command works on: its Redis, how to log in, and its key prefix."""

    url: str
    keys: Keys
    login: dict[str, Any] = field(default_factory=dict)  # see mapping.cluster.credentials

    def connect(self, **options: Any) -> SyncClient:
        """A synchronous client (a cluster client for a ``redis+cluster://`` URL, one that
        follows the primary for a ``redis+sentinel://`` URL)."""
        return connect_sync(self.url, **self.login, **options)


def check_redis_tls(url: str | None, tls_files: list[Path | None]) -> None:
    """TLS files only mean something with a TLS URL: say so instead of redis-py's TypeError."""
    if any(path is not None for path in tls_files) and not (url and is_tls_url(url)):
        raise click.UsageError(
            "--redis-tls-ca/--redis-tls-cert/--redis-tls-key need a rediss:// "
            "(or rediss+cluster://) --redis-url, or --redis-sentinel rediss://..."
        )


def redis_target(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add --redis-url (or the --redis-sentinel options), the login options and --key-prefix
    to ``command``, which receives them as one ``target: RedisTarget``."""

    @functools.wraps(command)
    def with_target(
        *args: Any,
        redis_url: str | None,
        key_prefix: str,
        redis_username: str | None,
        redis_password: str | None,
        redis_tls_ca: Path | None,
        redis_tls_cert: Path | None,
        redis_tls_key: Path | None,
        redis_sentinel: str | None,
        redis_sentinel_master: str | None,
        redis_sentinel_username: str | None,
        redis_sentinel_password: str | None,
        **kwargs: Any,
    ) -> Any:
        url = deployment_url(
            redis_url,
            redis_sentinel,
            redis_sentinel_master,
            [redis_sentinel_username, redis_sentinel_password],
            required=True,
        )
        assert url is not None
        check_redis_tls(url, [redis_tls_ca, redis_tls_cert, redis_tls_key])
        login = credentials(
            username=redis_username,
            password=redis_password,
            tls_ca=redis_tls_ca,
            tls_cert=redis_tls_cert,
            tls_key=redis_tls_key,
            sentinel_username=redis_sentinel_username,
            sentinel_password=redis_sentinel_password,
        )
        return command(*args, target=RedisTarget(url, Keys(key_prefix), login), **kwargs)

    options = [redis_url, *REDIS_LOGIN_OPTIONS, *REDIS_SENTINEL_OPTIONS, key_prefix]
    for option in reversed(options):
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
        "--max-append-bytes",
        default=defaults.max_append_bytes,
        type=click.IntRange(0),
        show_envvar=True,
        help="Backpressure: bytes of requests (Kafka Produce, V1 request lines) one pod "
        "answers at once; beyond it connections wait their turn with reading paused, so a "
        "saturated Redis slows clients down instead of timing out (0: no limit).",
    ),
    click.option(
        "--max-connection-append-bytes",
        default=defaults.max_connection_append_bytes,
        type=click.IntRange(0),
        show_envvar=True,
        help="Backpressure: the same bound per connection (one request is always admitted; "
        "0: no limit).",
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
    *REDIS_SENTINEL_OPTIONS,
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
    url = deployment_url(  # serve without either starts an embedded Redis
        options.get("redis_url"),
        options.get("redis_sentinel"),
        options.get("redis_sentinel_master"),
        [options.get("redis_sentinel_username"), options.get("redis_sentinel_password")],
        required=False,
    )
    check_redis_tls(
        url,
        [options.get(name) for name in ("redis_tls_ca", "redis_tls_cert", "redis_tls_key")],
    )
    if options.get("tls_key") and not options.get("tls_cert"):
        raise click.UsageError("--tls-key needs --tls-cert")
    if options.get("tls_client_ca") and not options.get("tls_cert"):
        raise click.UsageError("--tls-client-ca needs --tls-cert (client certificates need TLS)")
