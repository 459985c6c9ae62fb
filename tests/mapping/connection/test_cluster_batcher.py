"""The cluster batcher on a real 3-node Redis Cluster: a batch touching more slots than the
client has connections per node is answered in full, each slot's calls in order; a call that
may have run is never sent again by redis-py, and each failure is answered by its kind (a
node of the real cluster made to fail)."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from typing import Any

import hiredis
import pytest
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from mapping.connection.cluster import connect_async, plain_url
from mapping.connection.cluster_batcher import ClusterBatcher
from mapping.core.errors import OutcomeUnknown, Unavailable

pytestmark = pytest.mark.slow  # the cluster fixture starts three Redis nodes

POOL = 4  # connections per node
SLOTS = 200  # ~67 slots per node in one batch


async def _one_batch(url: str, prefix: str) -> list[object]:
    client = RedisCluster.from_url(
        plain_url(url), max_connections=POOL, retry=Retry(NoBackoff(), 0), socket_timeout=10
    )
    await client.initialize()
    batcher = ClusterBatcher(client)
    flusher = asyncio.create_task(batcher.run())
    try:
        # Queued in one turn: one batch. Per slot, a SET then a GET of the same key.
        futures = []
        for i in range(SLOTS):
            key = f"{prefix}:{{{i}}}"
            futures += [batcher.submit("SET", key, i), batcher.submit("GET", key)]
        replies = await asyncio.gather(*futures, return_exceptions=True)
        assert batcher.pipelines_sent == 1
        return replies
    finally:
        flusher.cancel()
        await client.aclose()


def test_a_batch_of_more_slots_than_connections_is_answered(cluster_url: str) -> None:
    replies = asyncio.run(_one_batch(cluster_url, f"cb-{uuid.uuid4().hex[:8]}"))
    errors = [r for r in replies if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {len(replies)} failed, e.g. {errors[0]!r}"
    assert replies[1::2] == [str(i).encode() for i in range(SLOTS)]  # each GET after its SET


# A script that counts its runs: a call run twice leaves 2.
COUNT_RUNS = "return redis.call('INCR', KEYS[1])"


async def _one_call_with_a_failing_node(
    url: str, fail: Callable[[int], str | BaseException | None], *, after_running: bool = False
) -> tuple[object, int, bytes | None]:
    """One EVAL through the pod's own cluster client and batcher, the node that serves it
    failing the first sends with ``fail(n)`` (n: the send's number, in a pipeline or a
    call of redis-py's): an error reply instead of running it (a text), or, after really
    running it, an exception instead of its reply (``after_running``). Returns the
    batcher's answer, the sends and the count of runs."""
    key = f"cb-{uuid.uuid4().hex[:8]}:{{runs}}"
    script = hiredis.pack_command(("EVAL", COUNT_RUNS, 1, key))
    client = connect_async(url, 2.0)
    await client.initialize()
    batcher = ClusterBatcher(client)
    flusher = asyncio.create_task(batcher.run())
    send, read = AbstractConnection.send_packed_command, AbstractConnection.read_response
    sends = 0
    lost: dict[int, BaseException] = {}  # connection -> what its next reply is lost to

    async def sending(connection: Any, command: Any, check_health: bool = True) -> None:
        nonlocal sends
        data = command if isinstance(command, bytes) else b"".join(command)
        if script in data:
            sends += 1
            error = fail(sends)
            if isinstance(error, str):  # answered without running
                reply = f"return redis.error_reply('{error}')"
                data = data.replace(script, hiredis.pack_command(("EVAL", reply, 0)))
            elif error is not None:
                lost[id(connection)] = error
        await send(connection, data, check_health)

    async def reading(connection: Any, *args: Any, **kwargs: Any) -> Any:
        reply = await read(connection, *args, **kwargs)
        error = lost.pop(id(connection), None)
        if error is not None:  # it ran; the reply is lost
            raise error
        return reply

    AbstractConnection.send_packed_command = sending  # type: ignore[method-assign]
    AbstractConnection.read_response = reading  # type: ignore[method-assign]
    try:
        (answer,) = await asyncio.gather(batcher.submit("EVAL", COUNT_RUNS, 1, key),
                                         return_exceptions=True)  # fmt: skip
    finally:
        AbstractConnection.send_packed_command = send  # type: ignore[method-assign]
        AbstractConnection.read_response = read  # type: ignore[method-assign]
        flusher.cancel()
        runs = await client.get(key)
        await client.aclose()
    return answer, sends, runs


@pytest.mark.parametrize(
    "error",
    [
        RedisConnectionError("Connection closed by server."),
        RedisTimeoutError("Timeout reading from socket"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_call_that_may_have_run_is_never_sent_again(cluster_url: str, error: Exception) -> None:
    """The reply is lost after the script ran: redis-py must not send it again (a retried
    append appends twice); the batcher answers "outcome unknown"."""
    answer, sends, runs = asyncio.run(
        _one_call_with_a_failing_node(cluster_url, lambda n: error, after_running=True)
    )
    assert type(answer) is OutcomeUnknown
    assert (sends, runs) == (1, b"1")


def test_replies_that_say_not_run_are_sent_again_or_answered_not_run(cluster_url: str) -> None:
    """TRYAGAIN and MOVED say the command did not run: it is sent again (the pipeline's
    call through redis-py, which follows TRYAGAIN), and it runs once. CLUSTERDOWN is not
    retried by the pod's client (no retries): "not run"."""
    tryagain = "TRYAGAIN Multiple keys request during rehashing of slot"
    answer, sends, runs = asyncio.run(
        _one_call_with_a_failing_node(cluster_url, lambda n: tryagain if n < 3 else None)
    )
    assert (answer, sends, runs) == (1, 3, b"1")
    down = "CLUSTERDOWN The cluster is down"
    answer, sends, runs = asyncio.run(_one_call_with_a_failing_node(cluster_url, lambda n: down))
    assert type(answer) is Unavailable
    assert (sends, runs) == (1, None)


def test_a_refused_connect_is_answered_not_run(cluster_url: str) -> None:
    """The node of the call's slot refuses connections (its process died): nothing was sent,
    so the batcher answers "not run" (retriable), never "outcome unknown"."""

    async def main() -> tuple[object, bytes | None]:
        client = connect_async(cluster_url, 2.0)
        await client.initialize()
        # a key on a node the client has no connection to yet (not the one it started on)
        start_port = int(cluster_url.rsplit(":", 1)[1])
        key = next(
            key
            for key in (f"cb-{uuid.uuid4().hex[:8]}:{{refused-{i}}}" for i in range(100))
            if client.get_node_from_key(key).port != start_port
        )
        node = client.get_node_from_key(key)
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))  # bound, not listening: connecting is refused
            node.connection_kwargs["port"] = closed.getsockname()[1]  # as if it died
            batcher = ClusterBatcher(client)
            flusher = asyncio.create_task(batcher.run())
            try:
                (answer,) = await asyncio.gather(batcher.submit("EVAL", COUNT_RUNS, 1, key),
                                                 return_exceptions=True)  # fmt: skip
            finally:
                flusher.cancel()
                await client.aclose()
        check = connect_async(cluster_url, 2.0)
        try:
            return answer, await check.get(key)
        finally:
            await check.aclose()

    answer, runs = asyncio.run(main())
    assert type(answer) is Unavailable, answer
    assert runs is None


def test_batches_go_as_pipelines_and_through_redis_py_after_a_failure(cluster_url: str) -> None:
    """A batch goes to each primary as one pipeline, not one redis-py call per command;
    after a reply that says the cluster failed (CLUSTERDOWN here), the next batch goes call
    by call through redis-py (which re-reads the slot map), the one after it as pipelines
    again."""
    down = "return redis.error_reply('CLUSTERDOWN The cluster is down')"

    async def main() -> list[object]:
        client = RedisCluster.from_url(plain_url(cluster_url), max_connections=POOL)
        await client.initialize()
        batcher = ClusterBatcher(client)
        flusher = asyncio.create_task(batcher.run())
        calls = 0
        original = ClusterNode.execute_command

        async def counting(node: ClusterNode, *args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            return await original(node, *args, **kwargs)

        ClusterNode.execute_command = counting  # type: ignore[method-assign]
        prefix = f"cb-{uuid.uuid4().hex[:8]}"
        seen: list[object] = []
        try:
            futures = []
            for i in range(SLOTS):
                key = f"{prefix}:{{{i}}}"
                futures += [batcher.submit("SET", key, i), batcher.submit("GET", key)]
            replies = await asyncio.gather(*futures)
            seen.append((replies[1::2] == [str(i).encode() for i in range(SLOTS)], calls))
            (failed,) = await asyncio.gather(
                batcher.submit("EVAL", down, 1, f"{prefix}:{{0}}"), return_exceptions=True
            )
            seen.append((type(failed), calls))
            for _ in range(2):
                seen.append((await batcher.call("GET", f"{prefix}:{{1}}"), calls))
        finally:
            ClusterNode.execute_command = original  # type: ignore[method-assign]
            flusher.cancel()
            await client.aclose()
        return seen

    assert asyncio.run(main()) == [(True, 0), (Unavailable, 0), (b"1", 1), (b"1", 1)]
