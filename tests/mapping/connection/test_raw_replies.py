"""Raw replies (mapping/connection/raw_replies.py): the RESP scanner, compiled and pure, finds
where any reply ends, whatever the reads it came in; the batcher hands a raw call's array
reply over as its bytes, in a pipeline with ordinary calls that behave as ever (error
replies, response callbacks), against a real Redis."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.exceptions import ResponseError

from mapping.connection import batcher as batcher_module
from mapping.connection import raw_replies
from mapping.connection.batcher import RedisBatcher
from mapping.connection.client import connect
from mapping.connection.raw_replies import START, RawReply, listed, scan_pure

compiled = pytest.importorskip(
    "mapping.connection._resp_scan",
    reason="the C extension is not built (setup.py builds it only where a C compiler is)",
)
SCANNERS = [scan_pure, compiled.scan]


def resp(value: Any) -> bytes:
    """``value`` as Redis writes it (RESP2, with RESP3's scalars a scanner must skip too)."""
    if value is None:
        return b"$-1\r\n"
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, str):  # a status ("+OK"), an error ("-ERR ..."), a RESP3 scalar
        return value.encode() + b"\r\n"
    return b"*%d\r\n" % len(value) + b"".join(map(resp, value))


replies = st.recursive(
    st.one_of(
        st.none(),
        st.binary(max_size=30),
        st.integers(-(1 << 62), 1 << 62),
        st.sampled_from(["+OK", "-ERR wrong", "_", ",1.5", "#t", "(12345678901234567890"]),
    ),
    lambda inner: st.lists(inner, max_size=6),
    max_leaves=30,
)


def scan_whole(scan: Callable, data: bytes, cuts: list[int]) -> list[tuple[int, int]]:
    """(end, last) of each reply in ``data``, as bytes arrive at the ``cuts``."""
    found, pos, pending, last, arrived = [], 0, START, -1, 0
    for cut in [*sorted(cuts), len(data)]:
        arrived = max(arrived, cut)
        while True:
            pos, pending, last = scan(data[:arrived], pos, pending, last)
            if pending:
                break
            found.append((pos, last))
            pending, last = START, -1
            if pos == len(data):
                return found
    return found


@settings(deadline=None, max_examples=300)
@given(st.lists(replies, min_size=1, max_size=4), st.lists(st.integers(0, 400), max_size=6))
def test_both_scanners_find_every_reply_end_whatever_the_reads(
    values: list[Any], cuts: list[int]
) -> None:
    data = b"".join(map(resp, values))
    ends, at = [], 0
    for value in values:
        at += len(resp(value))
        ends.append(at)
    for scan in SCANNERS:
        found = scan_whole(scan, data, [min(c, len(data)) for c in cuts])
        assert [end for end, _ in found] == ends
    assert scan_whole(scan_pure, data, cuts) == scan_whole(compiled.scan, data, cuts)


def test_the_last_element_of_a_reply_is_found_and_a_raw_reply_parses_back() -> None:
    value = [[b"1-0", [b"a", b"b"]], [b"2-0", [b"c", b"d"]]]
    data = resp(value)
    for scan in SCANNERS:
        end, pending, last = scan(data, 0, START, -1)
        assert (end, pending) == (len(data), ())
        assert data[last:] == resp(value[1])
        reply = raw_replies.raw_reply(bytearray(data), 0, end, last)
        assert reply is not None and (reply.count, reply.parsed()) == (2, value)
    assert raw_replies.raw_reply(b"-ERR no\r\n", 0, 9, -1) is None


@pytest.mark.parametrize("scan", SCANNERS)
@pytest.mark.parametrize("data", [b"?x\r\n", b"$3\r\nabcd\r\n", b"*x\r\n", b"$1\nx\r\n"])
def test_what_is_not_resp_is_a_protocol_error(scan: Callable, data: bytes) -> None:
    with pytest.raises(ValueError, match="RESP protocol error"):
        scan(data, 0, START, -1)


@pytest.fixture(params=["compiled", "pure"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The batcher's raw path with each scanner."""
    monkeypatch.setattr(
        raw_replies, "scan", compiled.scan if request.param == "compiled" else scan_pure
    )
    return request.param


async def _with_batcher(redis_url: str, work: Any) -> Any:
    client = connect(redis_url, 2.0)
    batcher = RedisBatcher(client)
    runner = asyncio.create_task(batcher.run())
    try:
        return await work(batcher, client)
    finally:
        runner.cancel()
        await client.aclose()


def _stream(prefix: str, entries: int, size: int) -> tuple[str, list[list[Any]]]:
    return f"{prefix}-{uuid.uuid4().hex[:8]}", [
        [b"value", b"v%d" % i * size, b"n", b"%d" % i] for i in range(entries)
    ]


def test_raw_replies_come_as_bytes_among_ordinary_ones(redis_url: str, scanner: str) -> None:
    key, fields = _stream("raw", 50, 3)
    text = f"{key}-text"

    async def work(batcher: RedisBatcher, client: Any) -> None:
        for values in fields:
            await client.xadd(key, dict(zip(values[::2], values[1::2], strict=True)))
        await client.set(text, "x")
        calls = [
            batcher.submit("SADD", f"{key}-set", "a", "b"),
            batcher.submit_raw("XRANGE", key, "-", "+", "COUNT", 20),
            batcher.submit("SMEMBERS", f"{key}-set"),  # redis-py's callback: a set
            batcher.submit_raw("XRANGE", text, "-", "+"),  # WRONGTYPE: an error, raised
            batcher.submit("HGET", text, "f"),  # WRONGTYPE too
            batcher.submit_raw("XRANGE", key, "-", "+"),
            batcher.submit_raw("XRANGE", f"{key}-none", "-", "+"),  # an empty array
            batcher.submit("GET", text),
        ]
        got = await asyncio.gather(*calls, return_exceptions=True)
        plain = await batcher.submit("XRANGE", key, "-", "+")
        assert got[0] == 2 and got[2] == {b"a", b"b"} and got[7] == b"x"
        assert isinstance(got[3], ResponseError) and "WRONGTYPE" in str(got[3])
        assert isinstance(got[4], ResponseError)
        first, whole, empty = got[1], got[5], got[6]
        assert isinstance(first, RawReply) and isinstance(whole, RawReply)
        assert (len(first), len(whole), len(empty)) == (20, 50, 0)
        assert whole.parsed() == plain and first.parsed() == plain[:20]
        assert [f for _, f in plain] == fields and listed(empty) == []

    asyncio.run(_with_batcher(redis_url, work))


def test_a_reply_split_across_many_reads_comes_whole(
    redis_url: str, scanner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replies cut at every few bytes (a tiny read size), and one larger than a read."""
    key, fields = _stream("split", 300, 40)

    async def work(batcher: RedisBatcher, client: Any) -> None:
        for values in fields:
            await client.xadd(key, dict(zip(values[::2], values[1::2], strict=True)))
        plain = await batcher.submit("XRANGE", key, "-", "+")
        monkeypatch.setattr(batcher_module, "READ_BYTES", 7)
        got = await asyncio.gather(
            batcher.submit_raw("XRANGE", key, "-", "+"),
            batcher.submit("PING"),
            batcher.submit_raw("XRANGE", key, "-", "+", "COUNT", 3),
        )
        assert got[0].parsed() == plain and got[1] is True and got[2].parsed() == plain[:3]
        monkeypatch.setattr(batcher_module, "READ_BYTES", 1 << 20)
        big = await asyncio.gather(*(batcher.submit_raw("XRANGE", key, "-", "+") for _ in range(4)))
        assert all(reply.parsed() == plain for reply in big)

    asyncio.run(_with_batcher(redis_url, work))


def test_without_a_scanner_raw_calls_come_parsed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(raw_replies, "scan", None)
    key, fields = _stream("parsed", 3, 1)

    async def work(batcher: RedisBatcher, client: Any) -> None:
        for values in fields:
            await client.xadd(key, dict(zip(values[::2], values[1::2], strict=True)))
        got = await batcher.submit_raw("XRANGE", key, "-", "+")
        assert isinstance(got, list) and [f for _, f in got] == fields

    asyncio.run(_with_batcher(redis_url, work))
