"""Options shared by the command lines: where the deployment's Redis is and how to log in
to it (the same options, and ``ADAPTER_REDIS_*`` variables, for ``serve`` and every other
command), and the checks of ``serve``'s options that span several of them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from adapter.cli.errors import name_redis
from adapter.declare import declared_options
from adapter.settings import Settings
from mapping.core.keys import DEFAULT_PREFIX, Keys, is_valid_name

if TYPE_CHECKING:
    from mapping.connection.cluster import SyncClient

# mapping.connection.cluster and mapping.connection.sentinel (redis) are imported where a command
# runs, never for
# its --help (adapter/cli/lazy.py)

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

# How to log in to Redis beyond what the URL carries, and where Sentinel watches the primary
# (instead of --redis-url): ``serve``'s shared options (adapter/settings.py), the same for all.
redis_login = [
    declared.click_option() for declared in declared_options(Settings) if declared.option.shared
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
    from mapping.connection.cluster import redact, url_problem
    from mapping.connection.sentinel import sentinel_url

    if sentinel is None:
        if master is not None or any(value is not None for value in sentinel_login):
            raise click.UsageError(
                "--redis-sentinel-master/--redis-sentinel-username/--redis-sentinel-password "
                "need --redis-sentinel"
            )
        if redis_url is None and required:
            raise click.UsageError("Missing option '--redis-url' (or --redis-sentinel)")
        problem = None if redis_url is None else url_problem(redis_url)
        if problem is not None:
            assert redis_url is not None
            raise click.UsageError(f"--redis-url {redact(redis_url)}: {problem}")
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
    login: dict[str, Any] = field(
        default_factory=dict
    )  # see mapping.connection.cluster.credentials

    def connect(self, **options: Any) -> SyncClient:
        """A synchronous client (a cluster client for a ``redis+cluster://`` URL, one that
        follows the primary for a ``redis+sentinel://`` URL)."""
        from mapping.connection.cluster import connect_sync

        return connect_sync(self.url, **self.login, **options)


def check_redis_tls(url: str | None, tls_files: list[Path | None]) -> None:
    """TLS files only mean something with a TLS URL: say so instead of redis-py's TypeError."""
    from mapping.connection.cluster import is_tls_url

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
        from mapping.connection.cluster import credentials

        url = deployment_url(
            redis_url,
            redis_sentinel,
            redis_sentinel_master,
            [redis_sentinel_username, redis_sentinel_password],
            required=True,
        )
        assert url is not None
        check_redis_tls(url, [redis_tls_ca, redis_tls_cert, redis_tls_key])
        name_redis(url)
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

    options = [redis_url, *redis_login, key_prefix]
    for option in reversed(options):
        with_target = option(with_target)
    return with_target


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


def topic_name(value: str) -> str:
    if not is_valid_name(value):
        raise click.BadParameter("must be 1-249 characters of [A-Za-z0-9._-]")
    return value
