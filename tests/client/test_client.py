"""The client's request building and reply decoding (no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.client import (
    GroupConsumer,
    RequestFailed,
    consume_reply,
    produce_args,
    produce_reply,
)
from adapter.client.wire import consumed_records
from adapter.v1.escaping import unescape
from adapter.v1.protocol import parse_request, parse_response


@given(st.binary(max_size=50), st.binary(max_size=50))
def test_produce_args_round_trip_through_the_parser(key: bytes, value: bytes) -> None:
    line = f"V1|1|PRODUCE|{produce_args('orders', key, value, 'all')}".encode()
    request = parse_request(line)
    assert request.args[0] == "orders" and request.args[2] == "acks=all"
    key_text, sep, value_text = request.args[1].partition(":")
    assert sep and unescape(key_text) == key and unescape(value_text) == value


def test_produce_reply() -> None:
    reply = produce_reply(parse_response(b"V1|1|OK|partition=2 offset=17 hw=16\n"))
    assert (reply.partition, reply.offset, reply.high_watermark) == (2, 17, 16)


def test_consume_reply() -> None:
    reply = consume_reply(parse_response(b"V1|1|OK|messages=5:a,6:,9:x%2Cy%20z hw=9\n"))
    assert reply.records == [(5, b"a"), (6, b""), (9, b"x,y z")]
    assert reply.high_watermark == 9 and reply.next_offset == 10
    empty = consume_reply(parse_response(b"V1|1|OK|messages= hw=-1\n"))
    assert empty.records == [] and empty.next_offset is None and empty.high_watermark == -1


def test_error_reply_raises() -> None:
    with pytest.raises(RequestFailed) as info:
        produce_reply(parse_response(b"V1|3|ERR|NOT_LEADER|partition is a follower\n"))
    assert info.value.code == "NOT_LEADER" and info.value.message == "partition is a follower"


def test_consumed_records_carry_the_append_time_and_nothing_v1_lacks() -> None:
    ms = 1_700_000_000_123
    reply = consume_reply(parse_response(f"V1|1|OK|messages={ms << 10 | 3}:a hw=0\n".encode()))
    (record,) = consumed_records("orders", 2, reply)
    assert (record.topic, record.partition, record.value) == ("orders", 2, b"a")
    assert (record.timestamp, record.key, record.headers) == (ms, None, ())
    # a deployment with --sequence-bits 8: the consumer must be told
    reply = consume_reply(parse_response(f"V1|1|OK|messages={ms << 8 | 255}:b hw=0\n".encode()))
    assert consumed_records("orders", 0, reply, sequence_bits=8)[0].timestamp == ms
    with pytest.raises(ValueError, match="sequence bits"):
        GroupConsumer("g", "orders", sequence_bits=12)
