"""Redis errors by kind: did the command run?

Every failure of a Redis call is one of three kinds, and the pod answers by kind:

- **not run**: Redis refused the command before running it, or it never left the pod:
  CLUSTERDOWN, MASTERDOWN, TRYAGAIN, MOVED/ASK left over after redis-py's redirections
  (``ClusterError("TTL exhausted")``), LOADING, READONLY (a replica runs no write), OOM
  (refused before a script's first write), a slot no node covers, no node reachable, and a
  failed connect or handshake (``ConnectFailed``, see ``mark_connect_failures``). Safe to
  send again: ``Unavailable`` (V1 UNAVAILABLE; Kafka KAFKA_STORAGE_ERROR, retriable);
- **outcome unknown**: the command was (or may have been) written, then the connection
  failed or went silent: it may have run. ``OutcomeUnknown`` (V1 UNAVAILABLE; a Kafka
  Produce answers REQUEST_TIMED_OUT, "possibly written");
- **ran and failed**: any other error reply (a script's ``"<CODE> <message>"``, WRONGTYPE,
  NOSCRIPT, which the batcher reloads): left as it is.

The pod's clients never retry by themselves (``Retry(NoBackoff(), 0)`` in
mapping/connection/cluster.py):
redis-py's cluster client then re-sends a command only after a MOVED, ASK or TRYAGAIN reply,
which all say the command did not run, so no append is ever run twice by a retry.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterError,
    MaxConnectionsError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.core.errors import BrokerError, OutcomeUnknown, Unavailable, from_script_error


class ConnectFailed(RedisConnectionError):
    """Connecting to a node, or the handshake after it, failed: nothing of the command was
    written, so it certainly did not run (redis-py raises a plain ConnectionError for both
    this and a connection lost after the write)."""


# Replies and client-side failures that say the command did not run. ClusterError covers
# ClusterDownError and MasterDownError (CLUSTERDOWN, MASTERDOWN) and redis-py's "TTL
# exhausted" after MOVED/ASK/TRYAGAIN; AskError covers MovedError; RedisClusterException
# covers SlotNotCoveredError and "Redis Cluster cannot be connected".
NOT_RUN: tuple[type[BaseException], ...] = (
    ClusterError,
    TryAgainError,
    AskError,
    BusyLoadingError,
    ReadOnlyError,
    OutOfMemoryError,
    RedisClusterException,
    ConnectFailed,
    MaxConnectionsError,
)
# Lost or silent connections: what was written may have run.
UNKNOWN: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)


def not_run(exc: BaseException) -> bool:
    """Whether ``exc`` says Redis certainly did not run the command."""
    return isinstance(exc, NOT_RUN)


def classify(exc: BaseException) -> BaseException:
    """What a caller gets for a failed call: ``Unavailable`` when it did not run,
    ``OutcomeUnknown`` when it may have, a script's BrokerError, or ``exc`` itself (another
    error reply: the command ran and failed)."""
    if isinstance(exc, BrokerError):
        return exc
    if not_run(exc):  # before UNKNOWN: LOADING and ConnectFailed are ConnectionErrors
        return Unavailable(f"redis unavailable: {exc}")
    if isinstance(exc, UNKNOWN):
        return OutcomeUnknown(f"redis outcome unknown: {exc}")
    if isinstance(exc, ResponseError):
        return from_script_error(str(exc)) or exc
    return exc


def _marked(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` whose connect raises ``ConnectFailed``."""
    existing = _MARKED.get(base)
    if existing is not None:
        return existing

    async def connect_check_health(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            await base.connect_check_health(self, *args, **kwargs)
        except ConnectFailed:
            raise
        except Exception as exc:  # refused, timed out, the handshake failed or was cut
            raise ConnectFailed(str(exc) or repr(exc)) from exc

    marked = type(f"ConnectMarked{base.__name__}", (base,), {
        "connect_check_health": connect_check_health,
    })  # fmt: skip
    _MARKED[base] = marked
    _MARKED[marked] = marked
    return marked


_MARKED: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def mark_connect_failures(client: RedisCluster) -> None:
    """Make every connection of ``client`` (the nodes known now and those it discovers
    later) raise ``ConnectFailed`` when connecting fails, so a command that never left the
    pod is told apart from one whose connection broke after it was written."""
    kwargs = client.nodes_manager.connection_kwargs  # every later node is made from these
    kwargs["connection_class"] = _marked(kwargs["connection_class"])
    nodes = [
        *client.nodes_manager.startup_nodes.values(),
        *client.nodes_manager.nodes_cache.values(),
    ]
    for node in nodes:
        node.connection_class = _marked(node.connection_class)
