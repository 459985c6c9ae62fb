"""Ready-made RESP arguments (mapping/core/resp.py, records.append_resp): the same bytes hiredis
packs from ``append_args`` for any records, and Redis, a single node or a cluster (in a
pipeline or a call of redis-py's), takes a command carrying them as it takes the plain one."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import hiredis
import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from mapping.connection.batcher import RedisBatcher
from mapping.connection.cluster import plain_url
from mapping.connection.cluster_batcher import ClusterBatcher
from mapping.core.errors import Unavailable
from mapping.core.records import append_args, append_resp
from mapping.core.resp import RespArgs, bulks, pack_command, plain

_bytes = st.binary(max_size=40)
_headers = st.lists(st.tuples(st.text(max_size=5), st.none() | _bytes), max_size=2)
_records = st.lists(
    st.tuples(
        st.none() | _bytes,
        st.none() | _bytes,
        # repeated create times are the common case: a small range makes them repeat
        st.integers(min_value=-1, max_value=3) | st.integers(min_value=-(2**63), max_value=2**63),
        st.just([]) | _headers,
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(records=_records, create_time=st.booleans(), short=st.booleans())
def test_append_resp_is_what_hiredis_packs_of_append_args(
    records: list[Any], create_time: bool, short: bool
) -> None:
    args = append_args(records, create_time, short)
    packed = append_resp(records, create_time, short)
    assert packed.count == len(args)
    assert packed.args() == args
    command = ("EVALSHA", "f" * 40, 1, "{t:0}", 7)
    assert pack_command((*command, packed)) == hiredis.pack_command((*command, *args))
    assert plain((*command, packed)) == (*command, *args)


def test_commands_without_ready_arguments_are_hiredis_own() -> None:
    command = ("SET", "k", b"v", 3)
    assert pack_command(command) == hiredis.pack_command(command)
    assert plain(command) is command
    empty = RespArgs(b"", 0, list)
    assert pack_command(("PING", empty)) == hiredis.pack_command(("PING",))


def _tail(values: list[bytes]) -> RespArgs:
    return RespArgs(bulks(values), len(values), lambda: list(values))


def test_redis_takes_a_command_with_ready_arguments(redis_url: str) -> None:
    key = f"resp-{uuid.uuid4().hex}"
    values = [b"a", b"", b"\r\n$3", bytes(range(256)) * 10]

    async def main() -> None:
        client = Redis.from_url(redis_url)
        batcher = RedisBatcher(client)
        assert batcher.packs_commands  # the Kafka produce hands it ready-made arguments
        flusher = asyncio.create_task(batcher.run())
        try:
            pushed = await batcher.call("RPUSH", key, _tail(values))
            assert pushed == len(values)
            assert await batcher.call("LRANGE", key, 0, -1) == values
        finally:
            flusher.cancel()
            await client.aclose()

    asyncio.run(main())
    redis.Redis.from_url(redis_url).delete(key)


@pytest.mark.slow  # the cluster fixture starts three Redis nodes
def test_the_cluster_batcher_takes_them_in_pipelines_and_in_redis_py_calls(
    cluster_url: str,
) -> None:
    key = f"{{resp-{uuid.uuid4().hex}}}:list"
    values = [b"x", b"yy", b""]
    # a CLUSTERDOWN reply: the next batch goes call by call through redis-py
    down = "return redis.error_reply('CLUSTERDOWN The cluster is down')"

    async def main() -> None:
        client = RedisCluster.from_url(plain_url(cluster_url))
        await client.initialize()
        batcher = ClusterBatcher(client)
        assert batcher.packs_commands  # the Kafka produce hands it ready-made arguments
        flusher = asyncio.create_task(batcher.run())
        try:
            assert await batcher.call("RPUSH", key, _tail(values)) == len(values)  # pipelined
            with pytest.raises(Unavailable):
                await batcher.call("EVAL", down, 1, key)
            assert await batcher.call("RPUSH", key, _tail(values)) == 2 * len(values)  # a call
            assert await batcher.call("LRANGE", key, 0, -1) == values * 2
            await batcher.call("DEL", key)
        finally:
            flusher.cancel()
            await client.aclose()

    asyncio.run(main())
