"""JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET over real TCP (the shared pod: topics of
3 partitions): payloads, every validation rule and error text, state readable in Redis."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from adapter.client import AsyncClient, Client, RequestFailed
from tests.support.pods import Pod
from tests.support.v1 import KEYS, exchange


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def ok(client: Client, line: str) -> str:
    reply = exchange(client, line.encode())
    assert reply.ok, (line, reply)
    return reply.payload


def err(client: Client, line: str) -> tuple[str, str]:
    reply = exchange(client, line.encode())
    assert not reply.ok, (line, reply)
    assert reply.correlation_id == line.split("|")[1]
    return reply.code, reply.message


def test_group_round_trip(pod: Pod, group: str, topic: str) -> None:
    with pod.client() as client:
        assert ok(client, f"V1|1|JOIN|{group} {topic} c1") == "generation=1 assigned=[0 1 2]"
        assert ok(client, f"V1|2|JOIN|{group} {topic} c2") == "generation=2 assigned=[1]"
        assert ok(client, f"V1|3|SYNC|{group} {topic} c1 2") == "generation=2 assigned=[0 2]"
        assert ok(client, f"V1|4|HEARTBEAT|{group} {topic} c1 2") == "heartbeat=ok"
        assert ok(client, f"V1|5|OFFSET|{group} {topic} 0") == "offset=0"
        assert ok(client, f"V1|6|COMMIT|{group} {topic} c1 2 0 42") == "committed=true"
        assert ok(client, f"V1|7|OFFSET|{group} {topic} 0") == "offset=42"
        assert ok(client, f"V1|8|LEAVE|{group} {topic} c2 2") == "left=true"
        assert ok(client, f"V1|9|SYNC|{group} {topic} c1 3") == "generation=3 assigned=[0 1 2]"
        assert ok(client, f"V1|10|JOIN|{group} {topic} c1 assignor=range") == (
            "generation=4 assigned=[0 1 2]"
        )
        assert ok(client, f"V1|11|JOIN|{group} {topic} c0") == "generation=5 assigned=[0 1]"
        assert ok(client, f"V1|12|OFFSET|{group} {topic} 0") == "offset=42"
        ok(client, f"V1|13|JOIN|{group} {topic} c2")
        # Four members over three partitions under range: the last one gets none.
        assert ok(client, f"V1|14|JOIN|{group} {topic} c3") == "generation=7 assigned=[]"
        assert ok(client, f"V1|15|SYNC|{group} {topic} c3 7") == "generation=7 assigned=[]"


def test_commands_are_case_insensitive_and_assignor_too(pod: Pod, group: str, topic: str) -> None:
    with pod.client() as client:
        assert ok(client, f"V1|1|join|{group} {topic} c1 ASSIGNOR=Range") == (
            "generation=1 assigned=[0 1 2]"
        )
        assert ok(client, f"V1|2|heartbeat|{group} {topic} c1 1") == "heartbeat=ok"


def test_client_methods(pod: Pod, group: str, topic: str) -> None:
    with pod.client() as client:
        a = client.join(group, topic, "a", assignor="range")
        assert (a.generation, a.assigned) == (1, [0, 1, 2])
        b = client.join(group, topic, "b")
        assert (b.generation, b.assigned) == (2, [2])
        assert client.sync(group, topic, "a", 2).assigned == [0, 1]
        client.heartbeat(group, topic, "a", 2)
        client.commit(group, topic, "a", 2, 1, 7)
        assert client.committed(group, topic, 1) == 7
        with pytest.raises(RequestFailed) as failure:
            client.heartbeat(group, topic, "a", 1)
        assert (failure.value.code, failure.value.message) == (
            "GENERATION_MISMATCH",
            "stale generation",
        )
        client.leave(group, topic, "b", 2)
        assert client.sync(group, topic, "a", 3).assigned == [0, 1, 2]


def test_async_client_methods(pod: Pod, group: str, topic: str) -> None:
    async def body() -> None:
        async with await AsyncClient.connect("127.0.0.1", pod.port) as client:
            # Concurrent JOINs on one connection: pipelined, each a generation of its own.
            a, b = await asyncio.gather(
                client.join(group, topic, "a"), client.join(group, topic, "b")
            )
            assert (a.generation, b.generation) == (1, 2)
            assert (await client.sync(group, topic, "a", 2)).assigned == [0, 2]
            await client.heartbeat(group, topic, "b", 2)
            await client.commit(group, topic, "b", 2, 1, 3)
            assert await client.committed(group, topic, 1) == 3
            await client.leave(group, topic, "b", 2)
            with pytest.raises(RequestFailed, match="unknown member"):
                await client.heartbeat(group, topic, "b", 3)

    asyncio.run(body())


GENERATION_ERRORS = [
    ("SYNC|{g} {t} c1 1", "stale generation"),
    ("HEARTBEAT|{g} {t} c1 3", "stale generation"),
    ("LEAVE|{g} {t} c1 0", "stale generation"),
    ("COMMIT|{g} {t} c1 1 0 5", "stale generation"),
    ("SYNC|{g} {t} nobody 2", "unknown member"),
    ("HEARTBEAT|{g} {t} nobody 2", "unknown member"),
    ("LEAVE|{g} {t} nobody 2", "unknown member"),
    ("COMMIT|{g} {t} nobody 2 0 5", "unknown member"),
    ("COMMIT|{g} {t} c1 2 1 5", "partition not assigned to member"),
    ("SYNC|{g}-other {t} c1 2", "group not found"),
    ("HEARTBEAT|{g}-other {t} c1 2", "group not found"),
    ("LEAVE|{g}-other {t} c1 2", "group not found"),
    ("COMMIT|{g}-other {t} c1 2 0 5", "group not found"),
]


def test_generation_mismatch_errors(pod: Pod, group: str, topic: str) -> None:
    with pod.client() as client:
        ok(client, f"V1|1|JOIN|{group} {topic} c1")
        ok(client, f"V1|2|JOIN|{group} {topic} c2")  # c1: [0 2], c2: [1]
        for i, (request, message) in enumerate(GENERATION_ERRORS):
            line = f"V1|{i + 10}|" + request.format(g=group, t=topic)
            assert err(client, line) == ("GENERATION_MISMATCH", message), line
        # Nothing changed, and the connection still works.
        assert ok(client, f"V1|99|SYNC|{group} {topic} c1 2") == "generation=2 assigned=[0 2]"
        assert ok(client, f"V1|99|OFFSET|{group} {topic} 0") == "offset=0"


JOIN_USAGE = "JOIN requires: <group> <topic> <consumer_id> [assignor=round_robin|range]"
COMMIT_USAGE = "COMMIT requires: <group> <topic> <consumer_id> <generation> <partition> <offset>"
NAME_RULE = "must be 1-249 characters of [A-Za-z0-9._-]"
BAD_REQUESTS = [
    ("JOIN|", JOIN_USAGE),
    ("JOIN|g {t}", JOIN_USAGE),
    ("JOIN|g {t} c assignor=range extra", JOIN_USAGE),
    (
        "JOIN|g {t} c assignor=sticky",
        "invalid assignor: must be assignor=round_robin or assignor=range",
    ),
    ("JOIN|g {t} c range", "invalid assignor: must be assignor=round_robin or assignor=range"),
    ("JOIN|g {t} c acks=range", "invalid assignor: must be assignor=round_robin or assignor=range"),
    ("JOIN|g {t} c assignor=", "invalid assignor: must be assignor=round_robin or assignor=range"),
    ("JOIN|g:x {t} c", f"invalid group: {NAME_RULE}"),
    ("JOIN|g t{{x}} c", f"invalid topic: {NAME_RULE}"),
    ("JOIN|g {t} c*", f"invalid consumer_id: {NAME_RULE}"),
    ("JOIN|g {t} " + "c" * 250, f"invalid consumer_id: {NAME_RULE}"),
    ("SYNC|g {t} c", "SYNC requires: <group> <topic> <consumer_id> <generation>"),
    ("SYNC|g {t} c 1 2", "SYNC requires: <group> <topic> <consumer_id> <generation>"),
    ("SYNC|g {t} c one", "invalid generation"),
    ("SYNC|g {t} c 1.5", "invalid generation"),
    ("HEARTBEAT|g {t} c", "HEARTBEAT requires: <group> <topic> <consumer_id> <generation>"),
    ("HEARTBEAT|g {t} c x", "invalid generation"),
    ("HEARTBEAT|g/ {t} c 1", f"invalid group: {NAME_RULE}"),
    ("LEAVE|g {t}", "LEAVE requires: <group> <topic> <consumer_id> <generation>"),
    ("LEAVE|g {t} c 0x1", "invalid generation"),
    ("COMMIT|g {t} c 1 0", COMMIT_USAGE),
    ("COMMIT|g {t} c 1 0 5 6", COMMIT_USAGE),
    ("COMMIT|g {t} c x 0 5", "invalid generation"),
    ("COMMIT|g {t} c 1 x 5", "invalid partition"),
    ("COMMIT|g {t} c 1 -1 5", "invalid partition"),
    ("COMMIT|g {t} c 1 3 5", "invalid partition"),  # outside the topic's 3 partitions
    ("COMMIT|g {t} c 1 0 x", "invalid offset"),
    ("COMMIT|g {t} c 1 0 -1", "invalid offset"),
    ("COMMIT|g {t} c 1 0 9223372036854775808", "invalid offset"),
    ("OFFSET|g {t}", "OFFSET requires: <group> <topic> <partition>"),
    ("OFFSET|g {t} 0 1", "OFFSET requires: <group> <topic> <partition>"),
    ("OFFSET|g {t} x", "invalid partition"),
    ("OFFSET|g {t} -1", "invalid partition"),
    ("OFFSET|g {t} 3", "invalid partition"),
    ("OFFSET|g {t} 99999999999999999999", "invalid partition"),
    ("OFFSET|g% {t} 0", f"invalid group: {NAME_RULE}"),
]


@pytest.mark.parametrize(("request_text", "message"), BAD_REQUESTS)
def test_bad_requests(pod: Pod, topic: str, request_text: str, message: str) -> None:
    with pod.client() as client:
        line = f"V1|31|{request_text.format(t=topic)}"
        assert err(client, line) == ("BAD_REQUEST", message)
        assert client.ping() == "pong"


def test_state_is_readable_in_redis(pod: Pod, redis_url: str, group: str, topic: str) -> None:
    with pod.client() as client:
        client.join(group, topic, "a")
        client.join(group, topic, "b")
        client.commit(group, topic, "a", 2, 2, 100)
    keys = KEYS.group(group, topic)
    with redis.Redis.from_url(redis_url, decode_responses=True) as r:
        assert r.hgetall(keys.meta) == {
            "generation": "2",
            "assignor": "round_robin",
            "partitions": "3",
        }
        members = r.hgetall(keys.members)
        assert sorted(members) == ["a", "b"]
        assert all(value.isdigit() for value in members.values())  # last heartbeat, ms
        assert r.hgetall(keys.assignment) == {"a": "0 2", "b": "1"}
        assert r.hgetall(keys.offsets) == {"2": "100"}
        assert f"{group} {topic}" in r.smembers(KEYS.groups)
