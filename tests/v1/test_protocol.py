"""The sans-I/O V1 protocol: request parsing, reply formatting, line framing, client side,
and telling a Kafka client on the V1 port by its first bytes."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.kafka import protocol as kafka_protocol
from adapter.kafka.versions import API_VERSIONS, METADATA, Api
from adapter.v1 import protocol
from adapter.v1.protocol import (
    KAFKA_HEADER_BYTES,
    FirstBytes,
    LineFramer,
    ParseError,
    Request,
    classify_first_bytes,
    kafka_request_name,
    parse_request,
)

# --- requests ----------------------------------------------------------------------------


def test_parse_plain_request() -> None:
    assert parse_request(b"V1|42|PRODUCE|orders user1:created") == Request(
        "42", "PRODUCE", ["orders", "user1:created"]
    )


def test_no_args_needs_trailing_pipe() -> None:
    assert parse_request(b"V1|99|PING|") == Request("99", "PING", [])
    with pytest.raises(ParseError):
        parse_request(b"V1|99|PING")


@pytest.mark.parametrize(
    "line",
    [
        b"",  # blank line
        b"   ",
        b"\r",
        b"V1",
        b"V1|1",
        b"V1|1|PING",  # three parts
        b"PING",
        b"V2|1|PING|",  # wrong version
        b"v1|1|PING|",  # the version is exact
        b"V1 |1|PING|",
        b"V10|1|PING|",
        b"V1||PING|",  # empty correlation id
        b"V1|  |PING|",
        b"V1|1||",  # empty command
        b"V1|1| |args",
        b"|1|PING|",
    ],
)
def test_malformed_envelopes(line: bytes) -> None:
    with pytest.raises(ParseError):
        parse_request(line)


def test_wrong_part_count_names_expected_format() -> None:
    with pytest.raises(ParseError, match="expected format"):
        parse_request(b"V1|1|PING")


def test_trailing_cr_and_surrounding_whitespace_dropped() -> None:
    assert parse_request(b"V1|7|PING|\r") == Request("7", "PING", [])
    assert parse_request(b"  V1|7|PING|  \r") == Request("7", "PING", [])


@pytest.mark.parametrize("command", [b"ping", b"Ping", b"pInG", b"PING"])
def test_command_case_insensitive(command: bytes) -> None:
    assert parse_request(b"V1|1|" + command + b"|").command == "PING"


def test_args_split_on_any_whitespace() -> None:
    request = parse_request(b"V1|1|CONSUME|  orders \t 2    0  ")
    assert request.args == ["orders", "2", "0"]


def test_pipe_inside_args_is_kept() -> None:
    request = parse_request(b"V1|1|PRODUCE|orders k:a|b|c")
    assert request.args == ["orders", "k:a|b|c"]


def test_correlation_id_is_opaque_text() -> None:
    assert parse_request(b"V1|abc-123|PING|").correlation_id == "abc-123"


def test_raw_non_utf8_bytes_reach_the_args() -> None:
    request = parse_request(b"V1|1|PRODUCE|t k:\xff\xfe")
    assert request.args[1].encode(protocol.ENCODING, protocol.ERRORS) == b"k:\xff\xfe"


# --- replies -----------------------------------------------------------------------------


def test_format_replies() -> None:
    assert protocol.format_ok("5") == b"V1|5|OK\n"
    assert protocol.format_ok("5", "pong") == b"V1|5|OK|pong\n"
    assert protocol.format_error("0", "BAD_REQUEST", "x") == b"V1|0|ERR|BAD_REQUEST|x\n"


def test_error_message_never_spans_lines() -> None:
    reply = protocol.format_error("1", "BAD_REQUEST", "a\nb\rc")
    assert reply.count(b"\n") == 1 and b"\r" not in reply


def test_lists_and_booleans() -> None:
    assert protocol.format_list([0, 1, 2]) == "[0 1 2]"
    assert protocol.format_list([]) == "[]"
    assert protocol.format_bool(True) == "true"
    assert protocol.format_bool(False) == "false"


# --- the client side ---------------------------------------------------------------------


def test_format_request() -> None:
    assert protocol.format_request(3, "PING") == b"V1|3|PING|\n"
    assert protocol.format_request("4", "CONSUME", "t 0 0") == b"V1|4|CONSUME|t 0 0\n"


def test_parse_response_forms() -> None:
    ok = protocol.parse_response(b"V1|5|OK\n")
    assert ok.ok and ok.correlation_id == "5" and ok.payload == ""
    ok = protocol.parse_response(b"V1|5|OK|partition=2 offset=0 hw=0\r\n")
    assert ok.fields() == {"partition": "2", "offset": "0", "hw": "0"}
    err = protocol.parse_response(b"V1|0|ERR|BAD_REQUEST|expected format V1|<cid>|<c>|<a>\n")
    assert not err.ok and err.code == "BAD_REQUEST"
    assert err.message == "expected format V1|<cid>|<c>|<a>"


@pytest.mark.parametrize("line", [b"", b"V1|1\n", b"V2|1|OK\n", b"V1|1|MAYBE\n", b"V1|1|ERR\n"])
def test_parse_response_rejects_garbage(line: bytes) -> None:
    with pytest.raises(ParseError):
        protocol.parse_response(line)


def test_parse_payload_keeps_lists_and_empty_values() -> None:
    fields = protocol.parse_payload(
        "replica=1 acked_offset=5 hw=3 isr=[0 1 2] under_replicated=false"
    )
    assert fields["isr"] == "[0 1 2]" and fields["under_replicated"] == "false"
    assert protocol.parse_payload("messages= hw=-1") == {"messages": "", "hw": "-1"}
    assert protocol.parse_payload("assigned=[]") == {"assigned": "[]"}
    assert protocol.parse_list("[0 1 2]") == [0, 1, 2]
    assert protocol.parse_list("[]") == []


# --- framing -----------------------------------------------------------------------------


def test_framer_joins_lines_split_across_feeds() -> None:
    framer = LineFramer()
    assert framer.feed(b"V1|1|PI") == []
    assert framer.feed(b"NG|") == []
    assert framer.feed(b"\nV1|2|PING|\nV1|3") == [b"V1|1|PING|", b"V1|2|PING|"]
    assert framer.feed(b"|PING|\r\n") == [b"V1|3|PING|"]
    assert not framer.overflowed


def test_framer_byte_by_byte() -> None:
    framer = LineFramer()
    data = b"V1|1|PING|\r\nV1|2|CONSUME|t 0 0\n\n"
    lines = [line for i in range(len(data)) for line in framer.feed(data[i : i + 1])]
    assert lines == [b"V1|1|PING|", b"V1|2|CONSUME|t 0 0", b""]


def test_framer_cr_split_from_lf() -> None:
    framer = LineFramer()
    assert framer.feed(b"V1|1|PING|\r") == []
    assert framer.feed(b"\n") == [b"V1|1|PING|"]


def test_framer_line_at_the_limit_is_fine() -> None:
    framer = LineFramer(max_line_bytes=10)
    assert framer.feed(b"a" * 10 + b"\n") == [b"a" * 10]
    assert framer.feed(b"b" * 10 + b"\r\n") == [b"b" * 10]
    assert framer.feed(b"c" * 10 + b"\r") == []
    assert framer.feed(b"\n") == [b"c" * 10]
    assert not framer.overflowed


def test_framer_complete_line_too_long() -> None:
    framer = LineFramer(max_line_bytes=10)
    lines = framer.feed(b"ok\n" + b"x" * 11 + b"\nV1|1|PING|\n")
    assert lines == [b"ok"]  # what came before is still answered
    assert framer.overflowed
    assert framer.feed(b"V1|2|PING|\n") == []  # nothing after the overflow


def test_framer_unterminated_buffer_too_long() -> None:
    framer = LineFramer(max_line_bytes=10)
    assert framer.feed(b"x" * 6) == []
    assert not framer.overflowed
    assert framer.feed(b"x" * 6) == []
    assert framer.overflowed


def test_framer_unterminated_buffer_too_long_after_lines() -> None:
    framer = LineFramer(max_line_bytes=10)
    assert framer.feed(b"a\nb\n" + b"y" * 50) == [b"a", b"b"]
    assert framer.overflowed


def test_framer_long_line_in_many_small_feeds_is_linear() -> None:
    framer = LineFramer(max_line_bytes=1 << 20)
    chunk = b"z" * 1000
    for _ in range(1000):
        assert framer.feed(chunk) == []
    assert framer.feed(b"\n") == [chunk * 1000]


# --- a Kafka client on the V1 port -------------------------------------------------------


def _kafka_frame(api: Api, version: int) -> bytes:
    """A request frame as a Kafka client opens with it (the Kafka door's own encoder)."""
    if api is API_VERSIONS:
        body = api.request[version](client_software_name="x", client_software_version="1")
    else:
        body = api.request[version](topics=[])
    return kafka_protocol.encode_request(api, version, body, 1, "rdkafka")


@pytest.mark.parametrize(
    ("api", "version", "name"),
    [
        (API_VERSIONS, 0, "ApiVersions v0"),  # kafka-python's first
        (API_VERSIONS, 3, "ApiVersions v3"),  # librdkafka's and the Java client's
        (API_VERSIONS, 4, "ApiVersions v4"),
        (METADATA, 0, "Metadata v0"),  # clients that skip ApiVersions
        (METADATA, 12, "Metadata v12"),
    ],
)
def test_a_kafka_request_frame_is_recognised(api: Api, version: int, name: str) -> None:
    frame = _kafka_frame(api, version)
    assert classify_first_bytes(frame) is FirstBytes.KAFKA
    assert classify_first_bytes(frame[:KAFKA_HEADER_BYTES]) is FirstBytes.KAFKA
    assert kafka_request_name(frame) == name


def test_a_frame_split_early_waits_for_its_header() -> None:
    frame = _kafka_frame(API_VERSIONS, 3)
    for cut in range(KAFKA_HEADER_BYTES):
        assert classify_first_bytes(frame[:cut]) is FirstBytes.UNDECIDED


@pytest.mark.parametrize(
    "first",
    [
        b"V1|1|PING|\n",
        b"V1",  # a line's start: text is never a frame's size
        b"  V1|1|PING|\n",
        b"\tV1|1|PING|\n",
        b"\r\nV1|1|PING|\n",
        b"\nV1|1|PING|\n",  # a blank line first
        b"\x00\n",  # short, with a line end: a (bad) line, answered as V1 answers it
        b"\x00" * 8,  # size 0: not a frame
        b"\x00\x00\x00\x09\x00\x12\x00\x03",  # shorter than any header
        b"\x06\x40\x00\x01\x00\x12\x00\x03",  # longer than the Kafka listener takes
        b"\x00\x00\x00\x20\x01\x00\x00\x03",  # API key 256
        b"\x00\x00\x00\x20\x00\x12\xff\xff",  # version -1
        b"\x16\x03\x01\x02\x00\x01\x00\x01",  # a TLS ClientHello: not Kafka
        b"GET / HTTP/1.1\r\n",
    ],
)
def test_anything_else_is_v1(first: bytes) -> None:
    assert classify_first_bytes(first) is FirstBytes.V1


@given(st.sampled_from(string.printable.encode()), st.binary(max_size=40))
@settings(max_examples=300)
def test_text_is_never_taken_for_kafka(first: int, rest: bytes) -> None:
    """A line of text (a V1 request, a blank line, whitespace first) starts with a byte that,
    as a frame's size, is longer than any Kafka request: whatever follows, it is V1."""
    assert classify_first_bytes(bytes([first]) + rest) is FirstBytes.V1
