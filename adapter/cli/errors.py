"""Every command's failure in one line: ``Error: <cause>`` on stderr and a non-zero exit,
never a traceback. The one place that does it is `OneLineErrors`, the class of the command
line's group (``python -m adapter``); what a failure says is the table `causes()` (first
match wins, so a subclass comes before its base).

Commands record the deployment they work on with `name_redis`, so that a Redis failure
names that Redis. ``ADAPTER_LOG_LEVEL=DEBUG`` (or ``serve --log-level DEBUG``) shows the
traceback instead.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from typing import Any

import click

from adapter.cli.lazy import LazyGroup
from mapping.core.errors import BrokerError, ConfigurationError, Unavailable

DEBUG_HINT = "ADAPTER_LOG_LEVEL=DEBUG shows the traceback"
# ctx.meta (shared by a command's contexts): the Redis the command works on, redacted.
_REDIS = "adapter.redis"
_LOGIN_HELP = (
    "give the password with ADAPTER_REDIS_PASSWORD or --redis-password (or in the URL: "
    "redis://USER:PASSWORD@HOST:PORT/DB), and the ACL user with --redis-username"
)

Meta = dict[str, object]


def name_redis(url: str) -> None:
    """Record the deployment the running command works on (without its password)."""
    from mapping.connection.cluster import redact

    context = click.get_current_context(silent=True)
    if context is not None:
        context.meta[_REDIS] = redact(url)


def _redis(meta: Meta) -> str:
    where = meta.get(_REDIS)
    return f"Redis at {where}" if where else "Redis"


def _unreachable(exc: object, meta: Meta) -> str:
    return f"cannot reach {_redis(meta)} (--redis-url, ADAPTER_REDIS_URL): {exc}"


def _login_refused(exc: BaseException, meta: Meta) -> str:
    text = str(exc)
    lowered = text.lower()
    if "without any password" in lowered or "no password is set" in lowered:
        return (
            f"{_redis(meta)} has no password set, but one was given: drop --redis-password "
            "(ADAPTER_REDIS_PASSWORD) and the URL's PASSWORD@"
        )
    if "required" in lowered or "already authenticated" in lowered:  # NOAUTH (HELLO's too)
        return f"{_redis(meta)} requires a password (NOAUTH {text}): {_LOGIN_HELP}"
    return f"{_redis(meta)} refused the login (WRONGPASS {text}): {_LOGIN_HELP}"


def _no_primary(exc: BaseException, meta: Meta) -> str:
    # redis-py's message: "No master found for 'NAME' : <a sentinel client's repr> - KIND, ..."
    found, _, failures = str(exc).partition(" : ")
    kinds = sorted(set(re.findall(r" - ([\w:]+)", failures)))
    why = f" (the sentinels: {', '.join(kinds)})" if kinds else ""
    return (
        f"no sentinel named the primary of {_redis(meta)} (--redis-sentinel, "
        f"--redis-sentinel-master): {found}{why}"
    )


def _os_error(exc: BaseException, _meta: Meta) -> str:
    assert isinstance(exc, OSError)
    if exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}"
    return str(exc)


Cause = tuple[type[BaseException], Callable[[BaseException, Meta], str]]


@functools.cache
def causes() -> list[Cause]:
    """(exception type, what to say). First match wins: subclasses before their bases.
    Built on the first failure: it imports redis, which ``--help`` never needs."""
    import ssl

    from redis.exceptions import (
        AuthenticationError,
        AuthenticationWrongNumberOfArgsError,
        NoPermissionError,
        RedisClusterException,
        RedisError,
        ResponseError,
    )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError
    from redis.sentinel import MasterNotFoundError

    from adapter.sockets import ListenError
    from mapping.connection.embedded import RedisServerError

    return [
        (ListenError, lambda exc, _: str(exc)),
        (ConfigurationError, lambda exc, _: str(exc)),
        (RedisServerError, lambda exc, _: f"embedded redis-server: {exc}"),
        (Unavailable, lambda exc, meta: _unreachable(exc.message, meta)),
        (BrokerError, lambda exc, _: str(exc)),
        (
            AuthenticationWrongNumberOfArgsError,  # AUTH with a user name, to a Redis before ACLs
            lambda exc, meta: f"{_redis(meta)} refused the login: {exc}",
        ),
        (AuthenticationError, _login_refused),
        (NoPermissionError, lambda exc, meta: f"the Redis user lacks a permission: {exc}"),
        (MasterNotFoundError, _no_primary),
        (RedisClusterException, lambda exc, meta: f"{_redis(meta)} (a cluster): {exc}"),
        (RedisTimeoutError, lambda exc, meta: f"{_redis(meta)} did not answer in time: {exc}"),
        (RedisConnectionError, _unreachable),
        (ResponseError, lambda exc, meta: f"{_redis(meta)} answered with an error: {exc}"),
        (RedisError, lambda exc, meta: f"{_redis(meta)}: {exc}"),
        (ssl.SSLError, lambda exc, _: f"TLS: {exc} (check --tls-cert, --tls-key, --tls-client-ca)"),
        (OSError, _os_error),
    ]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside a task group's failure (the pod's parts run in one:
    adapter/cli/local_pod.py), or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def describe(exc: BaseException, meta: Meta | None = None) -> str:
    """One line saying why a command failed: the first failure inside it that `causes()`
    knows."""
    found = leaves(exc)
    for leaf in found:
        for kind, say in causes():
            if isinstance(leaf, kind):
                return _one_line(say(leaf, meta or {}))
    first = found[0]
    return _one_line(f"{type(first).__name__}: {first} ({DEBUG_HINT})")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def show_tracebacks() -> bool:
    """``ADAPTER_LOG_LEVEL=DEBUG``, or ``serve --log-level DEBUG`` (logging at DEBUG)."""
    if os.environ.get("ADAPTER_LOG_LEVEL", "").upper() == "DEBUG":
        return True
    return logging.getLogger().isEnabledFor(logging.DEBUG)


class CommandFailed(click.ClickException):
    """A failure, in one line (click prints ``Error: <message>`` and exits 1)."""


class UsageFailed(click.UsageError):
    """A usage error in one line: the message and where the help is (click's own puts the
    usage synopsis and a hint on lines of their own). Exits 2, as click's."""

    def __init__(self, error: click.UsageError) -> None:
        where = error.ctx.command_path if error.ctx is not None else "python -m adapter"
        super().__init__(_one_line(f"{error.format_message()} (see '{where} --help')"))

    def show(self, file: object = None) -> None:
        click.echo(f"Error: {self.format_message()}", err=True)


class OneLineErrors(LazyGroup):
    """A click group whose commands fail in one line (see the module's docstring)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:  # the group's own options (its commands' are parsed in invoke)
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise UsageFailed(exc) from None

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.exceptions.NoArgsIsHelpError):
            raise  # a normal exit, Ctrl-C, a group named without its command (its help)
        except click.UsageError as exc:
            raise UsageFailed(exc) from None
        except click.ClickException as exc:
            exc.message = _one_line(exc.message)
            raise
        except Exception as exc:
            if show_tracebacks():
                raise
            for leaf in leaves(exc):  # a command's own refusal, raised inside a task group
                if isinstance(leaf, click.ClickException | click.exceptions.Exit):
                    if isinstance(leaf, click.ClickException):
                        leaf.message = _one_line(leaf.message)
                    raise leaf from None
            raise CommandFailed(describe(exc, ctx.meta)) from None
