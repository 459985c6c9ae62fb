"""Checks a pod runs against Redis before it serves, each failing with a message that says
what to change: Redis unreachable or refusing the credentials, a Redis too old for the
scripts, a sequence-bits mismatch with the deployment, a Redis that evicts keys when memory
is full (records, offsets and group state would vanish without an error), AOF off when
durability is required. And one that warns without refusing: a Redis that can fail over
(Sentinel, or replicas) while the pods do not wait for a replica (``failover_loss``).
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from mapping.connection.sentinel import is_sentinel_url
from mapping.core import codec
from mapping.core.codec import to_str
from mapping.core.errors import ConfigurationError
from mapping.core.keys import Keys

# XRANGE/XREVRANGE with exclusive "(" bounds (6.2), scripts that call TIME before writing
# (effects replication, default since 5.0), ACL users (6.0).
MIN_REDIS_VERSION = (6, 2, 0)
# The one maxmemory-policy under which a full Redis refuses writes (the pod answers
# UNAVAILABLE) instead of deleting keys.
SAFE_EVICTION_POLICY = "noeviction"


async def pin_sequence_bits(client: Redis | RedisCluster, keys: Keys, bits: int) -> None:
    """Store the deployment's sequence bits on first start; refuse a pod that disagrees."""
    codec.check_sequence_bits(bits)
    await client.hsetnx(keys.meta, "sequence_bits", bits)
    stored = int(await client.hget(keys.meta, "sequence_bits"))
    if stored != bits:
        raise ConfigurationError(
            f"this deployment uses {stored} sequence bits (stored in Redis at {keys.meta}); "
            f"this pod is configured with {bits}: start it with --sequence-bits {stored}"
        )


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


async def check_redis(
    client: Redis | RedisCluster,
    keys: Keys,
    *,
    sequence_bits: int,
    require_aof: bool,
    url: str,
    allow_evicting: bool = False,
) -> None:
    """Raise ``ConfigurationError`` when this pod must not serve with this Redis.
    Connection errors (Redis not up yet) propagate for the caller to retry."""
    try:
        info = await client.info("server")
    except AuthenticationError as exc:
        raise ConfigurationError(
            f"Redis at {url} refused the credentials ({exc}): check the user name and password "
            "in --redis-url (redis://USER:PASSWORD@HOST:PORT/DB) or --redis-username/"
            "--redis-password"
        ) from None
    except NoPermissionError:
        info = None  # an ACL user without INFO: the version cannot be checked, go on
    if info is not None:
        version = to_str(info.get("redis_version", "0"))
        if parse_version(version) < MIN_REDIS_VERSION:
            wanted = ".".join(map(str, MIN_REDIS_VERSION))
            raise ConfigurationError(
                f"Redis at {url} is version {version}; the adapter needs {wanted} or newer"
            )
    try:
        await pin_sequence_bits(client, keys, sequence_bits)
    except NoPermissionError as exc:
        raise ConfigurationError(
            f"the Redis user lacks a permission the adapter needs ({exc}); grant it the keys "
            f"'~{keys.prefix}:*', the channels '&{keys.prefix}:*' and the commands "
            "'+@read +@write +@stream +@hash +@set +@sortedset +@pubsub +@scripting "
            "+@connection +time +info' (or '+@all -@dangerous +info')"
        ) from None
    if not allow_evicting:
        await _check_eviction(client, url)
    if require_aof:
        await _check_aof(client, url)


async def memory_info(client: Redis | RedisCluster) -> list[dict]:
    """``INFO memory`` of the Redis, or of every primary of a cluster."""
    if isinstance(client, RedisCluster):
        replies = await client.info("memory", target_nodes=RedisCluster.PRIMARIES)
        # one node answers with its dict, several with {node name: dict}
        return list(replies.values()) if "maxmemory_policy" not in replies else [replies]
    return [await client.info("memory")]


async def _eviction_policies(client: Redis | RedisCluster) -> list[str]:
    """maxmemory-policy of the Redis, or of every primary of a cluster."""
    infos = await memory_info(client)
    return [to_str(info.get("maxmemory_policy", SAFE_EVICTION_POLICY)) for info in infos]


async def _check_eviction(client: Redis | RedisCluster, url: str) -> None:
    override = "or start the pod with --allow-evicting-redis (records may then vanish)"
    try:
        policies = await _eviction_policies(client)
    except (NoPermissionError, ResponseError) as exc:
        raise ConfigurationError(
            f"cannot read INFO memory from Redis at {url} ({exc}) to check that it never "
            f"evicts keys; grant the Redis user +info, {override}"
        ) from None
    evicting = sorted({p for p in policies if p != SAFE_EVICTION_POLICY})
    if evicting:
        raise ConfigurationError(
            f"Redis at {url} has maxmemory-policy {', '.join(evicting)}: when memory is full "
            "it deletes keys, and records, committed offsets and group state would vanish "
            f"without an error; set maxmemory-policy {SAFE_EVICTION_POLICY} (CONFIG SET "
            f"maxmemory-policy {SAFE_EVICTION_POLICY}, and in redis.conf), so a full Redis "
            f"refuses writes and the adapter answers UNAVAILABLE, {override}"
        )


async def _check_aof(client: Redis, url: str) -> None:
    try:
        persistence = await client.info("persistence")
    except (NoPermissionError, ResponseError) as exc:
        raise ConfigurationError(
            f"--require-aof: cannot read INFO persistence from Redis at {url} ({exc}); "
            "grant the Redis user +info"
        ) from None
    if str(persistence.get("aof_enabled", "0")) != "1":
        raise ConfigurationError(
            f"--require-aof: Redis at {url} has AOF off, so acknowledged records would be lost "
            "on a Redis restart; turn it on (CONFIG SET appendonly yes, and appendonly yes in "
            "redis.conf) or start the pod without --require-aof"
        )


async def failover_loss(client: Redis | RedisCluster, url: str, wait_replicas: int) -> str | None:
    """Why a failover of this Redis can take back what the pods acknowledged (a warning's
    text), or None: with ``--redis-wait-replicas`` 0, a Redis reached through Sentinel, or
    a primary (every primary of a cluster included) with replicas, promotes a replica that
    may lack the last writes (docs/durability.md). A Redis user without INFO: only the
    Sentinel URL tells."""
    if wait_replicas > 0:
        return None
    if is_sentinel_url(url):
        reason = "is reached through Sentinel, which promotes a replica when it fails"
    else:
        try:
            replicas = await _replica_counts(client)
        except (NoPermissionError, ResponseError):
            return None
        if not any(replicas):
            return None
        counts = ", ".join(map(str, replicas))
        reason = f"has replicas ({counts} per primary), which a failover promotes"
    return (
        f"Redis at {url} {reason}, and --redis-wait-replicas is 0: a failover loses the "
        "writes the promoted replica had not received, acknowledged ones included (acks=all "
        "records, committed offsets, group generations, idempotent producers' sequences); "
        "start the pods with --redis-wait-replicas 1 so that nothing is acknowledged or "
        "served before a replica has it (docs/durability.md)"
    )


async def _replica_counts(client: Redis | RedisCluster) -> list[int]:
    """connected_slaves of the Redis, or of every primary of a cluster."""
    if isinstance(client, RedisCluster):
        replies = await client.info("replication", target_nodes=RedisCluster.PRIMARIES)
        infos = list(replies.values()) if "connected_slaves" not in replies else [replies]
    else:
        infos = [await client.info("replication")]
    return [int(info.get("connected_slaves", 0)) for info in infos]
