"""Fuzzing a live pod over TCP: valid requests mixed with random bytes, invalid UTF-8, NUL
bytes and huge tokens, split at random points into separate writes. The pod answers every
complete line, in order, keeps the connection usable, and never crashes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.client import produce_args
from adapter.v1.protocol import parse_response
from tests.support.pods import RF1, Pod
from tests.support.v1 import closed_by_peer, raw_connection, read_lines

LIMIT = 4096
TOPIC = f"fuzz-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def fuzz_pod(redis_url: str) -> Iterator[Pod]:
    pod = Pod(redis_url, *RF1, "--max-line-bytes", str(LIMIT))
    pod.start()
    yield pod
    pod.stop()


valid = st.one_of(
    st.just(("PING", "")),
    st.builds(lambda k, v: ("PRODUCE", produce_args(TOPIC, k, v)), st.binary(max_size=20),
              st.binary(max_size=200)),
    st.builds(lambda p, o: ("CONSUME", f"{TOPIC} {p} {o}"), st.integers(-1, 4),
              st.integers(0, 1 << 64)),
    st.sampled_from([("OFFSET", f"g {TOPIC} 0"), ("NOPE", "x"), ("PRODUCE", ""),
                     ("JOIN", f"g {TOPIC} c1"), ("CONSUME", "bad|topic 0 0")]),
)  # fmt: skip
garbage = st.one_of(
    st.binary(max_size=300),  # random bytes, invalid UTF-8, NUL bytes
    st.binary(max_size=40).map(lambda b: b"V1|7|PRODUCE|" + b),
    st.binary(max_size=40).map(lambda b: b"V1|" + b + b"|PING|"),
    st.integers(LIMIT - 200, LIMIT).map(lambda n: b"V1|8|PRODUCE|t k:" + b"\x00" * (n - 17)),
    st.just(b""),
    st.just(b"\r"),
).map(lambda b: b.replace(b"\n", b" "))


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(st.one_of(valid.map(lambda r: ("valid", r)), garbage.map(lambda g: ("raw", g))),
             min_size=1, max_size=30),
    st.lists(st.integers(min_value=0), max_size=25),
)  # fmt: skip
def test_pod_answers_every_line(fuzz_pod: Pod, items: list, cuts: list[int]) -> None:
    lines, expected_cids = [], []
    for i, (kind, item) in enumerate(items):
        if kind == "valid":
            command, args = item
            lines.append(f"V1|c{i}|{command}|{args}".encode())
            expected_cids.append(f"c{i}")
        else:
            lines.append(item)
            expected_cids.append(None)
    data = b"\n".join(lines) + b"\n"
    points = sorted({c % len(data) for c in cuts})
    sock = raw_connection(fuzz_pod.port, timeout=30)
    try:
        for start, end in zip([0, *points], [*points, len(data)], strict=True):
            sock.sendall(data[start:end])
        replies = read_lines(sock, len(lines))
        assert len(replies) == len(lines)
        for reply, cid in zip(replies, expected_cids, strict=True):
            response = parse_response(reply)  # every reply is a V1 line
            if cid is not None:
                assert response.correlation_id == cid
        sock.sendall(b"V1|last|PING|\n")
        assert read_lines(sock, 1) == [b"V1|last|OK|pong"]
    finally:
        sock.close()
    assert fuzz_pod.process is not None and fuzz_pod.process.poll() is None


def test_enormous_token_below_and_above_the_limit(fuzz_pod: Pod) -> None:
    sock = raw_connection(fuzz_pod.port)
    fits = b"V1|1|PRODUCE|" + TOPIC.encode() + b" k:" + b"\xff" * (LIMIT - 20 - len(TOPIC))
    too_long = b"V1|2|PRODUCE|" + TOPIC.encode() + b" k:" + b"x" * (LIMIT * 50)
    sock.sendall(fits + b"\nV1|3|PING|\n" + too_long[:1000])
    sock.sendall(too_long[1000:] + b"\nV1|4|PING|\n")
    replies = read_lines(sock, 4)
    assert replies[0].startswith(b"V1|1|OK|partition=")
    assert replies[1:] == [b"V1|3|OK|pong", b"V1|0|ERR|BAD_REQUEST|line too long"]
    assert closed_by_peer(sock)
    sock.close()
    with fuzz_pod.client() as client:
        assert client.ping() == "pong"
    assert "Traceback" not in fuzz_pod.log()
