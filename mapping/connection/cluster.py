"""Redis Cluster support: which URL names a cluster, and clients for either kind of Redis.

A URL ``redis+cluster://host:port`` (``rediss+cluster://`` for TLS) names any node of a Redis
Cluster; the client discovers the others. Every key carries a hash tag (see mapping.core.keys), so
each script touches one slot and runs unchanged on a cluster. What differs:

- redis-py cannot queue EVALSHA in a cluster pipeline, so a cluster pod sends its calls with
  ``ClusterBatcher`` (mapping/connection/cluster_batcher.py) instead of ``RedisBatcher``;
- pub/sub: a cluster propagates PUBLISH to every node, so the pod's one pub/sub connection
  may be to any node (``pubsub_connection`` picks the next one on each reconnect);
- Redis ``WAIT`` (``--redis-wait-replicas``) is per node and is refused on a cluster.

A ``redis+sentinel://`` URL names sentinels and the primary they watch
(mapping/connection/sentinel.py);
``connect_async``/``connect_sync`` give its client too, so every caller follows failovers.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.maint_notifications import MaintNotificationsConfig

from mapping.connection import redis_errors, sentinel


def redact(url: str) -> str:
    """``url`` without its password, for logs and messages (even a malformed one)."""
    if sentinel.is_sentinel_url(url):
        return sentinel.redact(url)  # several hosts: urlsplit cannot read the port
    parts = urlsplit(url)
    login, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in login:
        return url
    netloc = f"{login.partition(':')[0]}:***@{host}"
    return urlunsplit(parts._replace(netloc=netloc))


CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

AsyncClient = Redis | RedisCluster
SyncClient = redis.Redis | SyncRedisCluster


PLAIN_SCHEMES = ("redis", "rediss", "unix")
URL_FORMS = (
    "redis://HOST:PORT/DB (rediss:// for TLS), redis+cluster://HOST:PORT for a cluster, "
    "redis+sentinel://HOST:PORT,.../NAME for sentinels"
)


def url_problem(url: str) -> str | None:
    """What is wrong with a deployment's URL (scheme, host, port, database), or None; said
    before any client is made (redis-py's own errors come later, as tracebacks)."""
    scheme, sep, _ = url.partition("://")
    scheme = scheme.lower()
    if not sep:
        return f"not a URL; expected {URL_FORMS}"
    if sentinel.is_sentinel_url(url):
        try:
            sentinel.parse_sentinel_url(url)
        except ValueError as exc:
            return str(exc)
        return None
    if scheme not in PLAIN_SCHEMES and scheme not in CLUSTER_SCHEMES:
        return f"unknown scheme {scheme}://; expected {URL_FORMS}"
    parts = urlsplit(url)
    if scheme == "unix":
        return None if parts.path else "unix:// needs the socket's path: unix:///path/redis.sock"
    try:
        parts.port  # noqa: B018  (parsing it is the check)
    except ValueError:
        return "the port is not a number in 0-65535"
    if not parts.hostname:
        return f"no host; expected {URL_FORMS}"
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"the database {database!r} is not a number"
    return None


def is_cluster_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in CLUSTER_SCHEMES


def plain_url(url: str) -> str:
    """The URL redis-py understands: ``redis+cluster://`` -> ``redis://``."""
    scheme, sep, rest = url.partition("://")
    return f"{CLUSTER_SCHEMES.get(scheme.lower(), scheme)}{sep}{rest}"


def _pool_checks_connections() -> dict[str, Any]:
    """redis-py 8 turns on "maintenance notifications" (a Redis Enterprise feature) by
    default, and with them on, its pools skip the check that a pooled connection's socket
    is still open: after a Redis restart, each connection left idle in the pool failed
    one request with "Connection closed by server". Off, the pool reconnects it instead."""
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


def connect_async(url: str, timeout_s: float, **options: Any) -> AsyncClient:
    """An asyncio client for a single Redis, a cluster or a sentinel-watched primary, with no
    automatic retries (a retried produce could append twice). Cluster redirections
    (MOVED/ASK) still apply."""
    common = dict(
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
        **_pool_checks_connections(),
        **options,
    )
    if sentinel.is_sentinel_url(url):
        return sentinel.connect_async(url, **common)
    _drop_sentinel_login(common)
    if is_cluster_url(url):
        # Per node. ClusterBatcher runs at most half as many calls at once (redis-py raises
        # rather than waits when a node's pool is used up); the rest is for the pod's
        # other calls on this client.
        cluster = RedisCluster.from_url(plain_url(url), max_connections=256, **common)
        # A failed connect then says "not sent": the batcher answers it as retriable.
        redis_errors.mark_connect_failures(cluster)
        return cluster
    return Redis.from_url(url, **common)


def on_every_connection(client: AsyncClient, hook: Any) -> None:
    """Run ``hook`` (redis-py's ``redis_connect_func``) as each connection of ``client`` is
    set up, before its first command: a cluster client takes it on the nodes known now and
    on those it discovers later (its constructor does not take the option)."""
    if not isinstance(client, RedisCluster):
        pool_kwargs = client.connection_pool.connection_kwargs
        pool_kwargs["redis_connect_func"] = hook
        return
    client.nodes_manager.connection_kwargs["redis_connect_func"] = hook
    nodes = [
        *client.nodes_manager.startup_nodes.values(),
        *client.nodes_manager.nodes_cache.values(),
    ]
    for node in nodes:
        node.connection_kwargs["redis_connect_func"] = hook


def credentials(
    *,
    username: str | None = None,
    password: str | None = None,
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    sentinel_username: str | None = None,
    sentinel_password: str | None = None,
) -> dict[str, Any]:
    """redis-py's keyword arguments for an ACL user, a password and TLS files beyond what
    the URL carries (``rediss://USER:PASSWORD@HOST:PORT/DB``); unset ones are left out, so
    the URL's own still apply. The pod and every command line build their clients with it.
    ``sentinel_*``: the sentinels' own login (only with a ``redis+sentinel://`` URL)."""
    options: dict[str, Any] = {}
    if sentinel_username is not None:
        options["sentinel_username"] = sentinel_username
    if sentinel_password is not None:
        options["sentinel_password"] = sentinel_password
    if username is not None:
        options["username"] = username
    if password is not None:
        options["password"] = password
    for name, path in (("ssl_ca_certs", tls_ca), ("ssl_certfile", tls_cert),
                       ("ssl_keyfile", tls_key)):  # fmt: skip
        if path is not None:
            options[name] = str(path)
    return options


def is_tls_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in ("rediss", "rediss+cluster", "rediss+sentinel")


def connect_sync(url: str, **options: Any) -> SyncClient:
    """A synchronous client (CLI, Spark connector) for a single Redis, a cluster or the
    primary that sentinels name."""
    options = {**_pool_checks_connections(), **options}
    if sentinel.is_sentinel_url(url):
        return sentinel.connect_sync(url, **options)
    _drop_sentinel_login(options)
    if is_cluster_url(url):
        return SyncRedisCluster.from_url(plain_url(url), **options)
    return redis.Redis.from_url(url, **options)


class LazySyncClient:
    """A synchronous client made on first use and made anew after a failure (``reset``):
    what a metrics scrape thread or a health probe keeps between requests."""

    def __init__(self, url: str, timeout_s: float, **options: Any) -> None:
        self.url = url
        self.options = {
            "socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, **options
        }  # fmt: skip
        self._client: SyncClient | None = None

    def get(self) -> SyncClient:
        if self._client is None:
            self._client = connect_sync(self.url, **self.options)
        return self._client

    def reset(self) -> None:
        """Drop the client (after a failure): the next ``get`` connects again."""
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken client: nothing to keep from it
                pass


def _drop_sentinel_login(options: dict[str, Any]) -> None:
    """The sentinels' login means nothing to a plain Redis or a cluster (the command lines
    refuse it without sentinels)."""
    for name in sentinel.SENTINEL_LOGIN:
        options.pop(name, None)


_next_node = itertools.count()


def pubsub_connection(client: AsyncClient) -> Any:
    """A new, unconnected connection for SUBSCRIBE: from the pool of a single Redis, or to
    one of the cluster's nodes (the next one each time, so a lost node is left behind)."""
    if isinstance(client, RedisCluster):
        nodes = client.get_nodes() or [client.get_default_node()]
        node = nodes[next(_next_node) % len(nodes)]
        return node.connection_class(**node.connection_kwargs)
    return client.connection_pool.make_connection()
