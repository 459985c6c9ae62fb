"""One line naming the cause and a non-zero exit status, never a traceback: how the operator
commands fail when Redis cannot be reached or answers with an error (``group describe``,
``group list``, ``group reset-offsets``, ``topic tail``).

The pod's parts run in a task group (adapter/cli/local_pod.py), which wraps what the work
raised in an exception group: the cause is found inside it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adapter.cli.options import RedisTarget
from mapping.cluster import redact
from mapping.errors import BrokerError, Unavailable

# click's own ways out (usage errors, ClickException, Exit, Abort): passed on as they are
_CLICK = (click.ClickException, click.exceptions.Exit, click.Abort)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def message_of(error: BaseException, url: str) -> str | None:
    """The line an operator reads for ``error``; None for an error that is a bug (it keeps
    its traceback)."""
    where = f"Redis at {redact(url)}"
    if isinstance(error, Unavailable):
        return f"{where} is unavailable: {error.message}"
    if isinstance(error, BrokerError):
        return f"{error.code}: {error.message}"
    if isinstance(error, RedisConnectionError | RedisTimeoutError | OSError):
        return f"{where} is unavailable: {error}"
    if isinstance(error, RedisError):
        return f"{where} answered an error: {error}"
    return None


def one_line_errors(command: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a command taking ``target`` (``options.redis_target``, applied after this):
    Redis' failures become a one-line ``click.ClickException`` (exit status 1)."""

    @functools.wraps(command)
    def run(*args: Any, target: RedisTarget, **kwargs: Any) -> Any:
        try:
            return command(*args, target=target, **kwargs)
        except _CLICK:
            raise
        except Exception as error:
            leaves = _leaves(error)
            for leaf in leaves:
                if isinstance(leaf, _CLICK):
                    raise leaf from None
            for leaf in leaves:
                message = message_of(leaf, target.url)
                if message is not None:
                    raise click.ClickException(message) from None
            raise

    return run
