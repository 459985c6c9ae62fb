"""Redis Sentinel: find the primary through sentinels and follow it across failovers.

A deployment watched by sentinels is named by ``redis+sentinel://HOST:PORT,HOST:PORT/NAME``
(``rediss+sentinel://`` for TLS, to the sentinels and the data nodes alike): the sentinels'
addresses and the name of the primary they monitor (``sentinel monitor NAME ...``). The
command lines build it from ``--redis-sentinel`` and ``--redis-sentinel-master``, the Spark
connector from ``redis.sentinel`` and ``redis.sentinelMaster``. A ``USER:PASSWORD@`` in it is
the data nodes' login, as in a ``redis://`` URL, and a query may name TLS files
(``?ssl_ca_certs=ca.pem&ssl_certfile=...&ssl_keyfile=...``, for both, as in a ``rediss://``
URL); the sentinels' own login (``requirepass`` or an ACL user on the sentinels) comes as
the options ``sentinel_username``/``sentinel_password``.

The clients are redis-py's ``Sentinel(...).master_for(NAME)``: every new connection asks a
sentinel for the primary's address, so after a failover a broken connection reconnects to
the new primary; a READONLY reply (the pod still talks to a node that was demoted) drops the
connection as a connection error, and the next one asks the sentinels again. Options are
those of a plain client (mapping.connection.cluster): no automatic retries, the same socket
timeouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import redis
import redis.sentinel
from redis.asyncio import Redis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.retry import AbstractRetry, Retry

SENTINEL_SCHEMES = {"redis+sentinel": "redis", "rediss+sentinel": "rediss"}
DEFAULT_SENTINEL_PORT = 26379
# Options that log in to the sentinels rather than to the data nodes.
SENTINEL_LOGIN = ("sentinel_username", "sentinel_password")
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``redis+sentinel://`` URL names."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    tls: bool = False
    username: str | None = None  # the data nodes' login, from the URL
    password: str | None = None
    tls_files: tuple[tuple[str, str], ...] = ()  # (redis-py option, path) from the query


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SENTINEL_SCHEMES


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` (port 26379) or ``[IPV6]:PORT``."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
    if not host:
        raise ValueError(f"sentinel address {text!r} is not HOST:PORT")
    try:
        port = int(port_text) if port_text else DEFAULT_SENTINEL_PORT
    except ValueError:
        raise ValueError(f"sentinel address {text!r} has no valid port") from None
    if not 0 < port < 65536:
        raise ValueError(f"sentinel address {text!r} has no valid port")
    return host, port


def sentinel_url(sentinels: str, master: str) -> str:
    """The URL for ``--redis-sentinel [rediss://]HOST:PORT,...`` and ``--redis-sentinel-master
    NAME``. Raises ``ValueError`` saying what is wrong."""
    scheme, sep, hosts = sentinels.strip().partition("://")
    if not sep:
        scheme, hosts = "redis", sentinels.strip()
    hosts, mark, query = hosts.partition("?")
    if scheme.lower() not in ("redis", "rediss"):
        raise ValueError(f"sentinels are HOST:PORT,... (rediss:// before them for TLS), "
                         f"got {sentinels!r}")  # fmt: skip
    master = master.strip()
    if not master or "/" in master:
        raise ValueError(f"sentinel master name {master!r} is not a name")
    addresses = [_address(one) for one in hosts.split(",") if one.strip()]
    if not addresses:
        raise ValueError(f"no sentinel address in {sentinels!r}")
    netloc = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in addresses)
    url = f"{scheme.lower()}+sentinel://{netloc}/{master}{mark}{query}"
    parse_sentinel_url(url)  # the rest of the checks
    return url


def parse_sentinel_url(url: str) -> SentinelTarget:
    """``redis+sentinel://[USER:PASSWORD@]HOST:PORT,.../NAME``; ``ValueError`` otherwise."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in SENTINEL_SCHEMES:
        raise ValueError(f"not a redis+sentinel:// URL: {url!r}")
    netloc, _, path = rest.partition("/")
    login, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = login.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    path, _, query = path.partition("?")
    master = unquote(path.strip("/"))
    if not master or "/" in master:
        raise ValueError("a redis+sentinel:// URL ends with /NAME, the monitored primary's name")
    addresses = tuple(_address(one) for one in hosts.split(",") if one.strip())
    if not addresses:
        raise ValueError("a redis+sentinel:// URL names at least one sentinel HOST:PORT")
    tls = SENTINEL_SCHEMES[scheme.lower()] == "rediss"
    files = _tls_files(query)
    if files and not tls:
        raise ValueError("TLS files in a redis+sentinel:// URL need rediss+sentinel://")
    return SentinelTarget(addresses, master, tls, username, password, files)


def _tls_files(query: str) -> tuple[tuple[str, str], ...]:
    pairs = tuple(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    unknown = sorted({name for name, _ in pairs} - set(_TLS_OPTIONS))
    if unknown:
        raise ValueError(f"unknown sentinel URL option(s) {', '.join(unknown)}; "
                         f"known: {', '.join(_TLS_OPTIONS)}")  # fmt: skip
    return pairs


def redact(url: str) -> str:
    """``url`` without its password (several hosts: urllib cannot parse it)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    login, at, hosts = netloc.rpartition("@")
    if not at or ":" not in login:
        return url
    user = login.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{hosts}{slash}{path}"


def _split_options(
    target: SentinelTarget, options: dict[str, Any], no_retry: AbstractRetry[Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the data nodes' connection options, the sentinels' connection options)."""
    node = dict(options)
    sentinel: dict[str, Any] = {}
    for name in SENTINEL_LOGIN:
        value = node.pop(name, None)
        if value is not None:
            sentinel[name.removeprefix("sentinel_")] = value
    if target.username is not None:
        node.setdefault("username", target.username)
    if target.password is not None:
        node.setdefault("password", target.password)
    for name, path in target.tls_files:
        node.setdefault(name, path)
    # Timeouts bound a call to a dead sentinel as they bound one to Redis, and no retries:
    # the next sentinel is the retry (redis-py's would try a dead one four times first).
    sentinel["retry"] = no_retry
    for name in ("socket_timeout", "socket_connect_timeout", "maint_notifications_config"):
        if name in node:
            sentinel[name] = node[name]
    if target.tls:
        node["ssl"] = True  # SentinelManagedSSLConnection
        sentinel["ssl"] = True
        for name in _TLS_OPTIONS:  # one CA and client certificate for both, as TLS is
            if name in node:
                sentinel[name] = node[name]
    return node, sentinel


class SentinelRedis(Redis):
    """``master_for``'s client, which also closes its sentinels' connections."""

    sentinel: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel is not None:
            sentinel, self.sentinel = self.sentinel, None
            await sentinel.aclose()


class SyncSentinelRedis(redis.Redis):
    """The synchronous ``SentinelRedis``."""

    sentinel: redis.sentinel.Sentinel | None = None

    def close(self) -> None:
        super().close()
        if self.sentinel is not None:
            sentinel, self.sentinel = self.sentinel, None
            sentinel.close()


def connect_async(url: str, **options: Any) -> SentinelRedis:
    """An asyncio client of the primary that ``url``'s sentinels name, following failovers.
    ``options``: a plain client's (mapping.connection.cluster.connect_async) plus
    ``SENTINEL_LOGIN``."""
    target = parse_sentinel_url(url)
    node, sentinel_options = _split_options(target, options, AsyncRetry(NoBackoff(), 0))
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)
    client = sentinel.master_for(target.master, redis_class=SentinelRedis, **node)
    client.sentinel = sentinel
    return client


def connect_sync(url: str, **options: Any) -> SyncSentinelRedis:
    """The synchronous ``connect_async`` (command lines, the Spark connector)."""
    target = parse_sentinel_url(url)
    node, sentinel_options = _split_options(target, options, Retry(NoBackoff(), 0))
    sentinel = redis.sentinel.Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options)
    client = sentinel.master_for(target.master, redis_class=SyncSentinelRedis, **node)
    client.sentinel = sentinel
    return client
