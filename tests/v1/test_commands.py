"""Every V1 command form over real TCP against a real redis-server (the shared pod:
single-replica topics, so hw = log end at once)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.client import AsyncClient, Client, RequestFailed
from adapter.v1.escaping import escape
from mapping.topic.partitioner import partition_for
from tests.support.pods import Pod
from tests.support.v1 import KEYS, exchange

# --- PING ----------------------------------------------------------------------------------


def test_ping(pod: Pod) -> None:
    with pod.client() as client:
        assert exchange(client, b"V1|99|PING|") == exchange(client, b"V1|99|PING|")
        reply = exchange(client, b"V1|99|PING|")
        assert (reply.correlation_id, reply.ok, reply.payload) == ("99", True, "pong")
        reply = exchange(client, b"V1|5|ping|\r")
        assert reply.ok and reply.payload == "pong"


def test_ping_takes_no_args(pod: Pod) -> None:
    with pod.client() as client:
        reply = exchange(client, b"V1|7|PING|now")
        assert (reply.correlation_id, reply.code, reply.message) == (
            "7",
            "BAD_REQUEST",
            "PING takes no args",
        )
        assert client.ping() == "pong"


# --- errors keep the connection ----------------------------------------------------------

PARSE_ERRORS = [
    b"",
    b"   ",
    b"V1|1|PING",
    b"V2|1|PING|",
    b"V1||PING|",
    b"V1|1||",
    b"hello",
    b"|||",
]


@pytest.mark.parametrize("line", PARSE_ERRORS)
def test_parse_errors_answered_with_cid_0(pod: Pod, line: bytes) -> None:
    with pod.client() as client:
        reply = exchange(client, line)
        assert (reply.correlation_id, reply.ok, reply.code) == ("0", False, "BAD_REQUEST")
        assert client.ping() == "pong"


def test_connection_usable_after_every_error(pod: Pod, topic: str) -> None:
    bad = [
        *PARSE_ERRORS,
        b"V1|10|NOPE|",
        b"V1|11|PING|x",
        b"V1|12|PRODUCE|",
        b"V1|13|PRODUCE|" + topic.encode() + b" nocolon",
        b"V1|14|PRODUCE|" + topic.encode() + b" k:v acks=2",
        b"V1|15|PRODUCE|a:b k:v",
        b"V1|16|CONSUME|" + topic.encode() + b" 9 0",
        b"V1|17|CONSUME|" + topic.encode() + b" 0 -1",
        b"V1|18|CONSUME|" + topic.encode() + b" x 0",
        b"V1|19|SET_PARTITION_ROLE|" + topic.encode() + b" 0 boss",
    ]
    with pod.client() as client:
        # one at a time, then all pipelined in one write
        for line in bad:
            assert not exchange(client, line).ok
            assert client.ping() == "pong"
        client.send_raw(b"".join(line + b"\nV1|p|PING|\n" for line in bad))
        for line in bad:
            error, pong = client.read_response(), client.read_response()
            assert not error.ok, line
            assert (pong.correlation_id, pong.payload) == ("p", "pong")


def test_unknown_command(pod: Pod) -> None:
    with pod.client() as client:
        reply = exchange(client, b"V1|3|FROBNICATE|a b")
        assert (reply.correlation_id, reply.code) == ("3", "UNKNOWN_COMMAND")
        assert "FROBNICATE" in reply.message


# --- PRODUCE -------------------------------------------------------------------------------


def test_produce_seed_example_and_topic_auto_creation(
    pod: Pod, topic: str, redis_client: redis.Redis
) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|42|PRODUCE|{topic} user1:created".encode())
        assert reply.correlation_id == "42" and reply.ok
        fields = reply.fields()
        assert fields["partition"] == "2"  # FNV-1a of "user1" mod 3
        assert int(fields["hw"]) == int(fields["offset"]) >= 0
    stored = redis_client.hgetall(KEYS.topic(topic))
    assert int(stored[b"partitions"]) == 3
    assert redis_client.sismember(KEYS.topics, topic)
    entries = redis_client.xrange(KEYS.partition(topic, 2).log)
    assert len(entries) == 1 and entries[0][1][b"key"] == b"user1"
    assert entries[0][1][b"value"] == b"created"


@pytest.mark.parametrize("acks", ["acks=0", "acks=1", "ACKS=1", "Acks=0", ""])
def test_produce_acks_forms(pod: Pod, topic: str, acks: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|1|PRODUCE|{topic} k:v {acks}".encode())
        assert reply.ok, reply
        assert set(reply.fields()) == {"partition", "offset", "hw"}


@pytest.mark.parametrize("acks", ["acks=all", "ACKS=ALL", "acks=All"])
def test_produce_acks_all_answers(pod: Pod, topic: str, acks: str) -> None:
    """acks=all belongs to the replication work: here only OK or REPLICATION_TIMEOUT."""
    with pod.client(timeout=30) as client:
        reply = exchange(client, f"V1|1|PRODUCE|{topic} k:v {acks}".encode())
        assert reply.ok or reply.code == "REPLICATION_TIMEOUT", reply
        assert client.ping() == "pong"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("", "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]"),
        ("{t}", "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]"),
        ("{t} novalue", "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]"),
        ("{t} k:v acks=1 extra", "PRODUCE requires: <topic> <key>:<value> [acks=0|1|all]"),
        ("{t} k:v acks=2", "invalid acks"),
        ("{t} k:v acks=", "invalid acks"),
        ("{t} k:v ack=1", "invalid acks"),
        ("{t} k:v acks:1", "invalid acks"),
        ("{t} k:v 1", "invalid acks"),
        (
            "{t} k:hello world",
            "invalid acks: must be acks=0, acks=1 or acks=all (a key or value "
            "holding whitespace escapes it: k:hello%20world)",
        ),
        ("a:b k:v", "invalid topic"),
        ("a{b} k:v", "invalid topic"),
        ("a{b}} k:v", "invalid topic"),
        ("a/b k:v", "invalid topic"),
        ("x" * 250 + " k:v", "invalid topic"),
    ],
)
def test_produce_validation(pod: Pod, topic: str, args: str, message: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|8|PRODUCE|{args.replace('{t}', topic)}".encode())
        assert (reply.correlation_id, reply.code) == ("8", "BAD_REQUEST")
        assert reply.message.startswith(message), reply.message


def test_invalid_topic_never_becomes_a_key(pod: Pod, redis_client: redis.Redis) -> None:
    with pod.client() as client:
        assert exchange(client, b"V1|1|PRODUCE|bad{x}:y k:v").code == "BAD_REQUEST"
    assert not redis_client.keys("*bad{x}*")


def test_topic_name_of_249_characters(pod: Pod) -> None:
    name = "n" + "x" * 248
    with pod.client() as client:
        reply = client.produce(name, "k", "v")
        assert client.consume(name, reply.partition, 0).records == [(reply.offset, b"v")]


def test_value_split_on_first_colon(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f'V1|1|PRODUCE|{topic} user1:{{"a":1}}'.encode())
        p, o = int(reply.fields()["partition"]), int(reply.fields()["offset"])
        assert p == 2
        assert client.consume(topic, p, o).records[0] == (o, b'{"a":1}')


def test_escaped_key_with_colon(pod: Pod, topic: str, redis_client: redis.Redis) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|1|PRODUCE|{topic} a%3Ab:c%2Cd".encode())
        fields = reply.fields()
        assert int(fields["partition"]) == partition_for(b"a:b", 3)
        records = client.consume(topic, int(fields["partition"]), 0).records
        assert records == [(int(fields["offset"]), b"c,d")]
    entry = redis_client.xrange(KEYS.partition(topic, int(fields["partition"])).log)[0]
    assert entry[1][b"key"] == b"a:b" and entry[1][b"value"] == b"c,d"


@pytest.mark.parametrize("key", ["user1", "user2", "user3", "a", "", "%FF"])
def test_fnv_partitioning_over_the_wire(pod: Pod, topic: str, key: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|1|PRODUCE|{topic} {key}:v".encode())
        assert reply.ok, reply
        raw = b"\xff" if key == "%FF" else key.encode()
        assert int(reply.fields()["partition"]) == partition_for(raw, 3)


# --- CONSUME -------------------------------------------------------------------------------


def test_consume_empty_topic(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        for partition in range(3):
            reply = exchange(client, f"V1|2|CONSUME|{topic} {partition} 0".encode())
            assert reply.payload == "messages= hw=-1"


def test_consume_returns_records_in_order(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        produced = client.produce_many(topic, [("user1", v) for v in ("created", "paid", "sent")])
        offsets = [r.offset for r in produced]
        assert offsets == sorted(set(offsets))
        reply = exchange(client, f"V1|9|CONSUME|{topic} 2 0".encode())
        assert reply.payload == (
            f"messages={offsets[0]}:created,{offsets[1]}:paid,{offsets[2]}:sent hw={offsets[2]}"
        )
        # from the middle, and past the end
        assert client.consume(topic, 2, offsets[1]).records == [
            (offsets[1], b"paid"),
            (offsets[2], b"sent"),
        ]
        after = client.consume(topic, 2, offsets[2] + 1)
        assert after.records == [] and after.high_watermark == offsets[2]
        # the other partitions stay empty
        assert client.consume(topic, 0, 0).records == []


def test_offset_between_entries_is_first_record_at_or_after(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        first = client.produce(topic, "user1", "one")
        second = client.produce(topic, "user1", "two")
        assert second.offset > first.offset
        assert client.consume(topic, 2, first.offset + 1).records[0] == (second.offset, b"two")
        assert client.consume(topic, 2, second.offset - 1).records[0][0] in (
            first.offset,
            second.offset,
        )
        assert client.consume(topic, 2, 1).records[0] == (first.offset, b"one")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("{t} 3 0", "invalid partition"),
        ("{t} 99 0", "invalid partition"),
        ("{t} -1 0", "invalid partition"),
        ("{t} x 0", "invalid partition"),
        ("{t} 0 -1", "invalid offset"),
        ("{t} 0 abc", "invalid offset"),
        ("{t} 0 1.5", "invalid offset"),
        ("{t} 0 " + "9" * 30, "invalid offset"),
        ("{t} 0 " + str(1 << 63), "invalid offset"),
        ("{t} 0", "CONSUME requires: <topic> <partition> <offset>"),
        ("{t} 0 0 0", "CONSUME requires: <topic> <partition> <offset>"),
        ("", "CONSUME requires: <topic> <partition> <offset>"),
        ("a:b 0 0", "invalid topic"),
    ],
)
def test_consume_validation(pod: Pod, topic: str, args: str, message: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|4|CONSUME|{args.replace('{t}', topic)}".encode())
        assert (reply.correlation_id, reply.code) == ("4", "BAD_REQUEST")
        assert reply.message.startswith(message), reply.message
        assert client.ping() == "pong"


def test_consume_largest_offset(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        client.produce(topic, "user1", "x")
        reply = client.consume(topic, 2, (1 << 63) - 1)
        assert reply.records == [] and reply.high_watermark >= 0


def test_consume_default_limit_is_1000(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        client.produce_many(topic, [("user1", str(i)) for i in range(1200)])
        first = client.consume(topic, 2, 0)
        assert len(first.records) == 1000
        rest = client.consume(topic, 2, first.next_offset or 0)
        assert [v for _, v in first.records + rest.records] == [
            str(i).encode() for i in range(1200)
        ]


# --- SET_PARTITION_ROLE --------------------------------------------------------------------


def test_set_partition_role(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        produced = client.produce(topic, "user1", "a")
        reply = exchange(client, f"V1|5|SET_PARTITION_ROLE|{topic} 2 follower".encode())
        assert reply.payload == f"topic={topic} partition=2 role=follower hw={produced.offset}"
        refused = exchange(client, f"V1|6|PRODUCE|{topic} user1:b".encode())
        assert (refused.correlation_id, refused.code) == ("6", "NOT_LEADER")
        # other partitions still lead; consuming a follower partition still works
        other = next(k for k in ("user2", "user3", "user4") if partition_for(k.encode(), 3) != 2)
        assert client.produce(topic, other, "c").partition != 2
        assert client.consume(topic, 2, 0).records == [(produced.offset, b"a")]
        reply = exchange(client, f"V1|7|SET_PARTITION_ROLE|{topic} 2 leader".encode())
        assert reply.payload == f"topic={topic} partition=2 role=leader hw={produced.offset}"
        assert client.produce(topic, "user1", "d").offset > produced.offset


def test_set_partition_role_on_new_topic(pod: Pod, topic: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|1|SET_PARTITION_ROLE|{topic} 0 leader".encode())
        assert reply.payload == f"topic={topic} partition=0 role=leader hw=-1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("{t} 0 boss", "invalid role"),
        ("{t} 0 LEADER", "invalid role"),
        ("{t} 0 Follower", "invalid role"),
        ("{t} 3 leader", "invalid partition"),
        ("{t} x leader", "invalid partition"),
        ("{t} 0", "SET_PARTITION_ROLE requires"),
        ("{t} 0 leader x", "SET_PARTITION_ROLE requires"),
        ("a{b} 0 leader", "invalid topic"),
    ],
)
def test_set_partition_role_validation(pod: Pod, topic: str, args: str, message: str) -> None:
    with pod.client() as client:
        reply = exchange(client, f"V1|2|SET_PARTITION_ROLE|{args.replace('{t}', topic)}".encode())
        assert (reply.correlation_id, reply.code) == ("2", "BAD_REQUEST")
        assert reply.message.startswith(message), reply.message


# --- any bytes survive -----------------------------------------------------------------------


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(key=st.binary(max_size=40), value=st.binary(max_size=200))
def test_any_bytes_survive_produce_consume(pod: Pod, topic: str, key: bytes, value: bytes) -> None:
    with pod.client() as client:
        produced = client.produce(topic, key, value)
        assert produced.partition == partition_for(key, 3)
        consumed = client.consume(topic, produced.partition, produced.offset)
        assert consumed.records[0] == (produced.offset, value)


def test_awkward_values_on_the_wire(pod: Pod, topic: str) -> None:
    values = [b"", b" ", b"a,b", b"x|y", b"%", b"%41", b"\r\n", b"\x00\xff", "é ü".encode()]
    with pod.client() as client:
        produced = client.produce_many(topic, [("user1", v) for v in values])
        reply = client.request("CONSUME", f"{topic} 2 0")
        assert reply.payload.count(",") == len(values) - 1
        assert reply.payload.count(" ") == 1
        assert [v for _, v in client.consume(topic, 2, 0).records] == values
        assert [o for o, _ in client.consume(topic, 2, 0).records] == [p.offset for p in produced]
        assert escape(b"%41") == "%2541"


# --- pipelining, framing, concurrency ----------------------------------------------------------


def test_pipelining_10000_requests_in_order(pod: Pod, topic: str) -> None:
    requests = []
    for i in range(10_000):
        if i % 3 == 0:
            requests.append(("PRODUCE", f"{topic} k{i % 7}:{i}"))
        elif i % 3 == 1:
            requests.append(("CONSUME", f"{topic} {i % 3} 0"))
        else:
            requests.append(("PING", ""))
    with pod.client(timeout=60) as client:
        first_id = int(client.request("PING").correlation_id)
        replies = client.pipeline(requests)
    assert [int(r.correlation_id) for r in replies] == list(
        range(first_id + 1, first_id + 1 + 10_000)
    )
    assert all(r.ok for r in replies)
    for (command, _), reply in zip(requests, replies, strict=True):
        key = {"PRODUCE": "offset", "CONSUME": "messages", "PING": None}[command]
        assert reply.payload == "pong" if key is None else key in reply.fields()


def test_pipelined_raw_lines_with_own_correlation_ids(pod: Pod) -> None:
    with pod.client() as client:
        client.send_raw(b"".join(b"V1|cid-%d|PING|\n" % i for i in range(500)))
        assert [client.read_response().correlation_id for _ in range(500)] == [
            f"cid-{i}" for i in range(500)
        ]


def test_requests_split_across_tiny_writes(pod: Pod, topic: str) -> None:
    data = (
        b"V1|1|PING|\r\n"
        + f"V1|2|PRODUCE|{topic} user1:tiny\n".encode()
        + f"V1|3|CONSUME|{topic} 2 0\n".encode()
        + b"V1|4|PING|\n"
    )
    with pod.client() as client:
        for i in range(0, len(data), 3):
            client.send_raw(data[i : i + 3])
        replies = [client.read_response() for _ in range(4)]
    assert [r.correlation_id for r in replies] == ["1", "2", "3", "4"]
    assert replies[0].payload == replies[3].payload == "pong"
    offset = replies[1].fields()["offset"]
    assert replies[2].fields()["messages"] == f"{offset}:tiny"


def test_async_client_concurrency(pod: Pod, topic: str) -> None:
    async def main() -> None:
        async with await AsyncClient.connect("127.0.0.1", pod.port) as client:
            produced = await asyncio.gather(
                *(client.produce(topic, f"key{i % 5}", f"v{i}") for i in range(300))
            )
            offsets = {(p.partition, p.offset) for p in produced}
            assert len(offsets) == 300
            seen: dict[bytes, tuple[int, int]] = {}
            for partition in range(3):
                reply = await client.consume(topic, partition, 0)
                for offset, value in reply.records:
                    seen[value] = (partition, offset)
            assert seen == {
                f"v{i}".encode(): (p.partition, p.offset) for i, p in enumerate(produced)
            }
            # many concurrent connections too
            clients = [await AsyncClient.connect("127.0.0.1", pod.port) for _ in range(20)]
            try:
                pongs = await asyncio.gather(
                    *(c.request("PING") for c in clients for _ in range(10))
                )
                assert all(p.payload == "pong" for p in pongs)
            finally:
                for c in clients:
                    await c.close()

    asyncio.run(main())


def test_client_raises_request_failed(pod: Pod) -> None:
    with pod.client() as client, pytest.raises(RequestFailed) as info:
        client.consume("a:b", 0, 0)
    assert info.value.code == "BAD_REQUEST"


# --- many records inside one millisecond --------------------------------------------------------


def test_burst_to_one_key_has_strictly_increasing_offsets(pod: Pod, topic: str) -> None:
    with pod.client(timeout=60) as client:
        produced = client.produce_many(topic, [("same", str(i)) for i in range(2000)])
        assert {p.partition for p in produced} == {partition_for(b"same", 3)}
        offsets = [p.offset for p in produced]
        assert all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
        records = []
        position = 0
        while len(records) < 2000:
            reply = client.consume(topic, produced[0].partition, position)
            records += reply.records
            position = reply.next_offset or position
        assert records == [(o, str(i).encode()) for i, o in enumerate(offsets)]


def test_client_module_sync_and_raw_agree(pod: Pod, topic: str) -> None:
    with Client("127.0.0.1", pod.port) as client:
        assert client.ping() == "pong"
        reply = client.produce(topic, b"user1", b"created")
        assert reply.partition == 2
