"""Graceful shutdown: on SIGTERM a pod stops accepting, answers every request it has read,
and exits 0; nothing it acknowledged is lost, nothing it applied goes unanswered."""

from __future__ import annotations

import asyncio
import signal
import socket
import uuid

import pytest
import redis

from adapter.client import Client
from adapter.pod import build_pod
from adapter.settings import Settings
from adapter.v1 import protocol
from mapping.connection import resilient
from mapping.connection.client import connect
from mapping.core.keys import Keys
from tests.support.v1 import raw_connection
from tests.support.waiting import port_open, wait_until, wait_until_async


def _replies_until_close(sock: socket.socket) -> list[protocol.Response]:
    data = b""
    while chunk := sock.recv(1 << 16):
        data += chunk
    return [protocol.parse_response(line) for line in data.splitlines()]


def test_in_flight_acks_all_is_answered_after_sigterm(
    redis_url: str, start_pod, topic: str
) -> None:
    """A request waiting for replication when SIGTERM arrives still gets its answer, from
    the stopping pod, once followers (driven through another pod) catch up."""
    prefix = f"s{uuid.uuid4().hex[:8]}"
    stopping = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator",
                         "--acks-timeout-ms", "60000")  # fmt: skip
    helper = start_pod(redis_url, "--key-prefix", prefix, "--no-replicator")
    keys = Keys(prefix)
    store = redis.Redis.from_url(redis_url)
    sock = raw_connection(stopping.port, timeout=60)
    try:
        sock.sendall(f"V1|7|PRODUCE|{topic} user1:in-flight acks=all\n".encode())
        # The pod has read the request: the record is in the log, the answer is pending.
        wait_until(lambda: store.xlen(keys.partition(topic, 2).log) == 1, timeout=30)
        stopping.signal(signal.SIGTERM)
        wait_until(lambda: not port_open(stopping.port), timeout=30)  # no longer accepting
        assert stopping.process.poll() is None  # still answering what it read
        with helper.client() as follower:
            for replica in (1, 2):
                fetched = follower.request("REPLICA_FETCH", f"{topic} 2 {replica} {(1 << 53) - 1}")
                assert fetched.ok, fetched
        replies = _replies_until_close(sock)
    finally:
        sock.close()
        store.close()
    assert len(replies) == 1
    assert replies[0].correlation_id == "7" and replies[0].ok, replies[0]
    assert replies[0].fields()["partition"] == "2"
    assert stopping.process.wait(timeout=30) == 0


@pytest.mark.parametrize("event_loop", ["--uvloop", "--no-uvloop"])
def test_pipelined_requests_read_before_sigterm_are_all_answered(
    redis_url: str, start_pod, topic: str, event_loop: str
) -> None:
    """Several connections pipeline produces, SIGTERM lands in the middle of them: every
    connection gets an in-order run of OK answers and then a clean close, and the log holds
    exactly the acknowledged records (none lost, none applied without an answer). On both
    event loops: the connection code uses only the transport API they share."""
    pod = start_pod(redis_url, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1", event_loop)  # fmt: skip
    per_connection = 400
    socks = [raw_connection(pod.port, timeout=60) for _ in range(3)]
    try:
        for c, sock in enumerate(socks):
            sock.sendall(b"".join(
                f"V1|{i}|PRODUCE|{topic} k{i % 7}:c{c}-{i}\n".encode()
                for i in range(1, per_connection + 1)
            ))  # fmt: skip
        pod.signal(signal.SIGTERM)
        answered = [_replies_until_close(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert pod.process.wait(timeout=30) == 0
    acknowledged: set[bytes] = set()
    for c, replies in enumerate(answered):
        assert [r.correlation_id for r in replies] == [str(i) for i in range(1, len(replies) + 1)]
        assert all(r.ok for r in replies), [r for r in replies if not r.ok][:3]
        acknowledged.update(f"c{c}-{i}".encode() for i in range(1, len(replies) + 1))
    stored: set[bytes] = set()
    store = redis.Redis.from_url(redis_url)
    try:
        for p in range(3):
            for _, fields in store.xrange(Keys().partition(topic, p).log):
                stored.add(fields[b"value"])
    finally:
        store.close()
    assert stored == acknowledged
    # The records survive in Redis and another pod serves them.
    assert acknowledged


def test_a_new_pod_serves_after_a_drained_one(redis_url: str, start_pod, topic: str) -> None:
    first = start_pod(redis_url, "--default-replication-factor", "1",
                      "--default-min-insync-replicas", "1")  # fmt: skip
    with first.client() as client:
        sent = client.produce(topic, "user1", "kept")
    first.signal(signal.SIGTERM)
    assert first.process.wait(timeout=30) == 0
    second = start_pod(redis_url)
    with Client("127.0.0.1", second.port) as client:
        records = client.consume(topic, sent.partition, sent.offset).records
    assert records == [(sent.offset, b"kept")]


# --- the pod's background tasks, in process -------------------------------------------------


async def _loses_its_first_cancellation() -> None:
    """A task as CPython 3.11's ``asyncio.wait_for`` can leave one (redis-py writes through
    it): the cancellation that came as its write completed is gone, and it goes on."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass
    await asyncio.Event().wait()


def test_tasks_run_together_stop_though_one_lost_its_cancellation() -> None:
    async def main() -> None:
        others_stopped = asyncio.Event()

        async def other() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                others_stopped.set()

        running = asyncio.create_task(resilient.together(_loses_its_first_cancellation, other))
        await asyncio.sleep(0.05)
        running.cancel()
        done, _ = await asyncio.wait([running], timeout=5)
        assert done, "a task that lost its cancellation kept the others' group from ending"
        assert others_stopped.is_set()

    asyncio.run(main())


def _lease_holders(admin: redis.Redis, keys: Keys) -> dict[str, bytes | None]:
    leases = [*keys.replicator_leases(16)[1:], keys.retention_lease[1], keys.txn_lease[1]]
    return {key: admin.get(key) for key in leases}


def test_a_stopping_pod_gives_its_leases_back_though_a_task_lost_its_cancellation(
    redis_url: str,
) -> None:
    """Cancelling ``Pod.run`` (what SIGTERM does, once connections are drained) ends every
    background task, one that lost its cancellation too, and the lease holders (replicator,
    retention, transaction completer) give their leases back on the way out, for another
    pod to take at once rather than after the lease expires."""
    prefix = f"s{uuid.uuid4().hex[:8]}"
    keys = Keys(prefix)
    settings = Settings(
        key_prefix=prefix,
        replicator=True,
        retention_interval_ms=100,
        transaction_check_interval_ms=100,
        replica_lag_max_ms=60_000,  # leases of 30 s: released, not expired, in this test
    )
    admin = redis.Redis.from_url(redis_url)

    async def main() -> None:
        client = connect(redis_url)
        pod = build_pod(settings, client, pod_id="stopping-pod")
        pod.load_configs = _loses_its_first_cancellation  # type: ignore[method-assign]
        running = asyncio.create_task(pod.run())
        try:
            await wait_until_async(
                lambda: all(
                    holder == b"stopping-pod" for holder in _lease_holders(admin, keys).values()
                ),
                timeout=15,
            )
            running.cancel()
            done, _ = await asyncio.wait([running], timeout=10)
            assert done, "the pod's tasks did not stop"
        finally:
            running.cancel()
            await client.aclose()

    try:
        asyncio.run(main())
        holders = _lease_holders(admin, keys)
        assert holders == dict.fromkeys(holders)  # None: every lease given back
        assert admin.zscore(keys.replicator_leases(16)[0], "stopping-pod") is None
    finally:
        admin.close()
