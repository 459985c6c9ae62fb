"""Property tests of the sans-I/O protocol core: any bytes, split anywhere, give either
requests or parse errors, never an exception, and framing does not depend on how the bytes
were split."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from adapter.v1 import protocol
from adapter.v1.protocol import LineFramer, ParseError, parse_request

MAX = 64
tokens = st.text(
    alphabet=st.characters(blacklist_characters="|\n\r", blacklist_categories=("Zs", "Cc", "Cs")),
    min_size=1,
    max_size=12,
)
lines_bytes = st.binary(max_size=3 * MAX).filter(lambda b: b"\n" not in b)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def reference_lines(data: bytes, limit: int) -> tuple[list[bytes], bool]:
    """What a framer must produce: the complete lines (``\\r`` dropped) up to the first
    one over the limit, and whether there was one."""
    *complete, rest = data.split(b"\n")
    lines = []
    for line in complete:
        body = line[:-1] if line.endswith(b"\r") else line
        if len(body) > limit:
            return lines, True
        lines.append(body)
    body = rest[:-1] if rest.endswith(b"\r") else rest
    return lines, len(body) > limit


@given(st.binary(max_size=500))
@example(b"V1|1|PING|\x00")
@example(b"V1|\xff\xfe|PING|")
@example(b"\x00" * 10)
def test_parse_any_bytes(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ParseError as exc:
        reply = protocol.format_error("0", "BAD_REQUEST", str(exc))
        assert reply.count(b"\n") == 1 and reply.endswith(b"\n")
        return
    assert request.correlation_id and "|" not in request.correlation_id
    assert request.command and request.command == request.command.upper()
    assert all(arg and not any(c.isspace() for c in arg) for arg in request.args)
    # the reply to it is one line whatever the request echoes
    reply = protocol.format_error(request.correlation_id, "X", " ".join(request.args))
    assert reply.count(b"\n") == 1


@given(tokens, tokens, st.lists(tokens, max_size=5))
def test_format_then_parse_round_trips(cid: str, command: str, args: list[str]) -> None:
    line = protocol.format_request(cid, command, " ".join(args))
    request = parse_request(line.rstrip(b"\n"))
    assert (request.correlation_id, request.command, request.args) == (
        cid.strip(),
        command.strip().upper(),
        " ".join(args).split(),
    )


@settings(max_examples=300)
@given(
    st.lists(st.one_of(lines_bytes, st.just(b"V1|1|PING|")), max_size=12),
    st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=12, max_size=12),
    st.binary(max_size=MAX + 4).filter(lambda b: b"\n" not in b),
    st.lists(st.integers(min_value=0), max_size=20),
)
def test_framing_is_independent_of_splits(
    lines: list[bytes], ends: list[bytes], tail: bytes, cuts: list[int]
) -> None:
    data = b"".join(line + end for line, end in zip(lines, ends, strict=False)) + tail
    whole = LineFramer(MAX)
    got_whole = whole.feed(data)
    pieces = LineFramer(MAX)
    got_pieces = [line for chunk in split(data, cuts) for line in pieces.feed(chunk)]
    expected, overflow = reference_lines(data, MAX)
    assert got_whole == got_pieces == expected
    assert whole.overflowed == pieces.overflowed == overflow
    assert all(b"\n" not in line and len(line) <= MAX for line in got_pieces)
