"""The streamadapter Redis module (``append_module.c``): ``STREAMADAPTER.APPEND`` writes the
records of an append to a partition's log in one call from the produce scripts (Kafka, V1,
the Spark sink) instead of an XADD each, the same entries at about half of Redis' CPU
(docs/performance.md); ``STREAMADAPTER.PRODUCE`` is the whole of kafka/produce.lua for a
batch that is neither transactional nor on a compacted topic (``STREAMADAPTER.PRODUCEMANY``:
for several small batches of one partition at once), and ``STREAMADAPTER.V1PRODUCE``
partition/produce.lua's for packed records (``produce_commands.h``: no script call, which
costs Redis more than a small batch's records); ``STREAMADAPTER.COPY``
copies a log's entries into a follower's replica stream in one call from
partition/replica_fetch.lua.

It is built with the project (setup.py) beside this file (``streamadapter*.so``) and loaded
by ``redis-server --loadmodule <library()>``: the embedded Redis of ``adapter serve`` and the
test servers load it when it was built (``RedisProcess``). A pod (or a Spark task) uses each
command when its Redis runs it for its user (``has_command``) and ``--no-append-module`` is
not given; otherwise every append and copy is the scripts' own XADDs, as on any Redis.
docs/operations.md says what loading it asks of a deployment (every node that replicates or
reloads the AOF needs it too).
"""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import RedisClusterException, RedisError

APPEND_COMMAND = "streamadapter.append"
PRODUCE_COMMAND = "streamadapter.produce"
PRODUCE_MANY_COMMAND = "streamadapter.producemany"
V1_PRODUCE_COMMAND = "streamadapter.v1produce"
COPY_COMMAND = "streamadapter.copy"
# what PRODUCE takes in the place of the append time to read Redis' clock
CLOCK = "*"
_HERE = Path(__file__).parent
_NAME = "streamadapter"


def library() -> Path | None:
    """The module's shared library, as the install built it (None: not built)."""
    for suffix in EXTENSION_SUFFIXES:
        path = _HERE / f"{_NAME}{suffix}"
        if path.is_file():
            return path
    return None


def load_arguments(folder: Path) -> list[str]:
    """What ``redis-server`` takes to load the module (nothing when it was not built), from
    a copy in ``folder`` (the server's data directory): an install that rebuilds the library
    rewrites its file in place, which would pull the pages from under a running server."""
    path = library()
    if path is None:
        return []
    copy = folder / f"{_NAME}.so"
    data = path.read_bytes()
    if not copy.is_file() or copy.read_bytes() != data:
        partial = folder / f".{_NAME}.so.{os.getpid()}"
        partial.write_bytes(data)
        partial.chmod(0o755)  # Redis loads only an executable file
        os.replace(partial, copy)  # a new file: a server running the old one keeps it
    return ["--loadmodule", str(copy.resolve())]


def _lists_command(reply: Any) -> bool:
    # COMMAND INFO answers [nil] for a command the server lacks
    return isinstance(reply, list) and bool(reply) and reply[0] is not None


def _on_every_node(replies: Any, nodes: int) -> bool:
    """Whether COMMAND INFO sent to ``nodes`` nodes (the cluster client answers one node's
    reply as it is, several as {node: reply}) found the command on each. The nodes are
    named, not given as ALL_NODES: with a flag the client looks for a key in the command."""
    if nodes == 1:
        return _lists_command(replies)
    return (
        isinstance(replies, dict)
        and len(replies) == nodes
        and all(_lists_command(reply) for reply in replies.values())
    )


def append_probe(probe_key: str) -> tuple:
    """STREAMADAPTER.APPEND with no record: it writes nothing and answers only where the
    command exists and the user may run it (an ACL naming its commands may not list it)."""
    return (APPEND_COMMAND, probe_key, 1, 0, -1, 0, 0, "kafka")


def produce_probe(probe_key: str, command: str = PRODUCE_COMMAND) -> tuple:
    """STREAMADAPTER.PRODUCE (or PRODUCEMANY, V1PRODUCE) with its first key only: where the
    command exists and the user may run it, the module answers that it takes more arguments
    (``has_command`` takes that answer as a yes), and writes nothing."""
    return (command, probe_key)


def produce_command(script_call: tuple, command: str = PRODUCE_COMMAND) -> tuple:
    """The EVALSHA of kafka/produce.lua (``EVALSHA sha numkeys key... arg...``) as
    STREAMADAPTER.PRODUCE's call (or partition/produce.lua's as V1PRODUCE's): the same keys
    and arguments, the append time Redis' clock."""
    keys_end = 3 + int(script_call[2])
    return (command, *script_call[3:keys_end], CLOCK, *script_call[keys_end:])


def _wants_arguments(error: RedisError, probe: tuple) -> bool:
    """Whether ``error`` is the module asking ``produce_probe`` for the rest of its arguments."""
    return probe[0] in (PRODUCE_COMMAND, PRODUCE_MANY_COMMAND, V1_PRODUCE_COMMAND) and (
        "wrong number of arguments" in str(error)
    )


def copy_probe(probe_key: str, replica_key: str) -> tuple:
    """STREAMADAPTER.COPY from a log no partition has: it copies and writes nothing."""
    return (COPY_COMMAND, probe_key, replica_key, "-", "0-1", 1)


async def has_command(client: Any, probe: tuple) -> bool:
    """Whether the Redis ``client`` writes to runs the module's command ``probe`` calls
    (``append_probe``, ``produce_probe``, ``copy_probe``) for this user (on a cluster: every
    node has it)."""
    # "COMMAND INFO" as one name: redis-py then keeps the reply as it is (its parser for
    # COMMAND fails on the nil of an unknown command)
    try:
        if isinstance(client, RedisCluster):
            await client.initialize()  # (nothing when it is: the node list first)
            nodes = client.get_nodes()
            replies = await client.execute_command("COMMAND INFO", probe[0], target_nodes=nodes)
            if not _on_every_node(replies, len(nodes)):
                return False
            # (the cluster client finds no key in a module's command: sent to the key's node)
            node = client.get_node_from_key(probe[1])
            await client.execute_command(*probe, target_nodes=node)
            return True
        await client.execute_command(*probe)
        return True
    except RedisError as exc:
        return _wants_arguments(exc, probe)
    except RedisClusterException:
        return False


def has_command_sync(client: Any, probe: tuple) -> bool:
    """``has_command`` on a synchronous client (the Spark sink's tasks)."""
    try:
        if isinstance(client, SyncRedisCluster):
            nodes = client.get_nodes()
            replies = client.execute_command("COMMAND INFO", probe[0], target_nodes=nodes)
            if not _on_every_node(replies, len(nodes)):
                return False
            node = client.get_node_from_key(probe[1])
            client.execute_command(*probe, target_nodes=node)
            return True
        client.execute_command(*probe)
        return True
    except RedisError as exc:
        return _wants_arguments(exc, probe)
    except RedisClusterException:
        return False
