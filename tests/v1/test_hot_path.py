"""The fast path over TCP: combined PRODUCE calls keep each connection's request order."""

from __future__ import annotations

from collections.abc import Callable

from adapter.client import produce_args
from adapter.v1 import protocol
from tests.support.pods import RF1, Pod
from tests.support.v1 import raw_connection, read_lines

StartPod = Callable[..., Pod]


def _send(pod: Pod, requests: list[tuple[str, str]]) -> list[protocol.Response]:
    data = b"".join(protocol.format_request(i, c, a) for i, (c, a) in enumerate(requests))
    sock = raw_connection(pod.port)
    try:
        sock.sendall(data)
        return [protocol.parse_response(line) for line in read_lines(sock, len(requests))]
    finally:
        sock.close()


def test_pipelined_produce_keeps_request_order(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        client.produce(topic, "user1", "first")  # the topic is known: the fast path from now
    replies = _send(pod, [("PRODUCE", produce_args(topic, "user1", f"v{i}")) for i in range(500)])
    offsets = [int(r.fields()["offset"]) for r in replies]
    assert all(r.ok for r in replies)
    assert offsets == sorted(offsets) and len(set(offsets)) == 500
    with pod.client() as client:
        records = client.consume(topic, 2, offsets[0]).records
    assert [v for _, v in records] == [f"v{i}".encode() for i in range(500)]
    assert [o for o, _ in records] == offsets


def test_a_consume_between_produces_sees_only_what_came_before(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        start = client.produce(topic, "user1", "first").offset
    replies = _send(
        pod,
        [
            ("PRODUCE", produce_args(topic, "user1", "a")),
            ("CONSUME", f"{topic} 2 {start + 1}"),
            ("PRODUCE", produce_args(topic, "user1", "b")),
            ("PRODUCE", produce_args(topic, "user1", "c", acks="all")),
            ("PRODUCE", produce_args(topic, "user1", "d")),
        ],
    )
    assert all(r.ok for r in replies), replies
    consumed = [item.partition(":")[2] for item in replies[1].fields()["messages"].split(",")]
    assert consumed == ["a"]
    offsets = [int(replies[i].fields()["offset"]) for i in (0, 2, 3, 4)]
    assert offsets == sorted(offsets) and len(set(offsets)) == 4


def test_errors_on_the_fast_path_keep_the_connection(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        client.produce(topic, "user1", "first")
    replies = _send(
        pod,
        [
            ("PRODUCE", f"{topic} novalue"),
            ("CONSUME", f"{topic} 7 0"),
            ("CONSUME", f"{topic} 2 x"),
            ("PRODUCE", produce_args(topic, "user1", "ok")),
        ],
    )
    assert [r.code for r in replies[:3]] == ["BAD_REQUEST"] * 3
    assert replies[0].message.startswith("PRODUCE requires:")
    assert replies[1].message == "invalid partition"
    assert replies[2].message == "invalid offset"
    assert replies[3].ok


def test_produce_to_a_follower_partition_fails_every_combined_request(
    start_pod: StartPod, redis_url: str, topic: str
) -> None:
    pod = start_pod(redis_url, *RF1)
    with pod.client() as client:
        client.produce(topic, "user1", "first")
        assert client.request("SET_PARTITION_ROLE", f"{topic} 2 follower").ok
    replies = _send(pod, [("PRODUCE", produce_args(topic, "user1", f"v{i}")) for i in range(20)])
    assert [r.code for r in replies] == ["NOT_LEADER"] * 20


def test_a_long_pipeline_is_answered_in_order_across_slices(pod: Pod, topic: str) -> None:
    """Thousands of requests in one send are answered in slices (backpressure), in order."""
    with pod.client() as client:
        client.produce(topic, "user1", "first")
    requests = []
    for i in range(3000):
        if i % 3 == 0:
            requests.append(("PING", ""))
        elif i % 3 == 1:
            requests.append(("PRODUCE", produce_args(topic, f"k{i}", f"v{i}")))
        else:
            requests.append(("NOPE", ""))
    replies = _send(pod, requests)
    assert [r.correlation_id for r in replies] == [str(i) for i in range(3000)]
    assert all(r.payload == "pong" for r in replies[0::3])
    assert all(r.ok and "offset=" in r.payload for r in replies[1::3])
    assert all(r.code == "UNKNOWN_COMMAND" for r in replies[2::3])
