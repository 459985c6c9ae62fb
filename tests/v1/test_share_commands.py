"""SHARE_ACQUIRE, SHARE_ACK and SHARE_LEAVE: V1 members of share groups (KIP-932), beside
Kafka's ShareConsumers on the same groups. The parsing and formatting alone, then over real
TCP on the shared pod (one-partition topics made by Kafka's admin client, the groups set to
``share.auto.offset.reset=earliest`` as Kafka's clients set it), then under ``--authorizer``.
Redis (the share group's consumer group on the partition's log) says what is in flight."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from adapter.client import AcquiredRecord, AsyncClient, Client, RequestFailed
from adapter.client.wire import share_ack_args, share_acquire_reply
from adapter.v1 import protocol
from adapter.v1.handlers.share import (
    DEFAULT_MAX_RECORDS,
    ShareRecord,
    ack_args,
    acquire_args,
    leave_args,
    records_payload,
    refusal_message,
)
from mapping.core.codec import MAX_OFFSET, entry_offset
from mapping.core.errors import BadRequest
from mapping.security.acls import AclBinding, Operation, PatternType, Permission
from mapping.security.acls import ResourceType as AclResource
from mapping.share_group.share_groups import ACCEPT, REJECT, RELEASE
from tests.support.authorizing import authorizing_pod
from tests.support.pods import Pod
from tests.support.v1 import KEYS
from tests.support.waiting import wait_until

# --- parsing and formatting ------------------------------------------------------------


def test_acquire_args() -> None:
    assert acquire_args(["g", "t", "c"], 1000) == ("g", "t", "c", DEFAULT_MAX_RECORDS)
    assert acquire_args(["g", "t", "c"], 10) == ("g", "t", "c", 10)  # never past the page
    assert acquire_args(["g", "t", "c", "MAX=7"], 1000) == ("g", "t", "c", 7)
    assert acquire_args(["g", "t", "c", "max=1000"], 1000)[3] == 1000
    for bad in ("max=0", "max=-1", "max=1001", "max=x", "max=", "max", "count=3"):
        with pytest.raises(
            BadRequest, match=r"^BAD_REQUEST: invalid max: must be max=<n> with n in 1\.\.1000"
        ):
            acquire_args(["g", "t", "c", bad], 1000)
    for argv in (["g", "t"], ["g", "t", "c", "max=1", "x"]):
        with pytest.raises(
            BadRequest, match=r"^BAD_REQUEST: SHARE_ACQUIRE requires: <group> <topic>"
        ):
            acquire_args(argv, 1000)
    with pytest.raises(BadRequest, match="^BAD_REQUEST: invalid consumer_id"):
        acquire_args(["g", "t", "c/1"], 1000)
    with pytest.raises(BadRequest, match="^BAD_REQUEST: invalid group"):
        acquire_args(["g:1", "t", "c"], 1000)


def test_ack_args() -> None:
    assert ack_args(["g", "t", "c", "0", "9,3,9", "Accept"], 1000) == (
        "g", "t", "c", 0, [3, 9], ACCEPT,
    )  # fmt: skip
    assert ack_args(["g", "t", "c", "2", "5", "release"], 1000)[4:] == ([5], RELEASE)
    assert ack_args(["g", "t", "c", "2", "5", "REJECT"], 1000)[5] == REJECT
    with pytest.raises(
        BadRequest, match="^BAD_REQUEST: invalid type: must be accept, release or reject"
    ):
        ack_args(["g", "t", "c", "0", "1", "renew"], 1000)
    for offsets in ("1,,2", "1,", "-1", "x", str(MAX_OFFSET + 1)):
        with pytest.raises(BadRequest, match="^BAD_REQUEST: invalid offset$"):
            ack_args(["g", "t", "c", "0", offsets, "accept"], 1000)
    with pytest.raises(BadRequest, match="^BAD_REQUEST: invalid partition$"):
        ack_args(["g", "t", "c", "-1", "1", "accept"], 1000)
    with pytest.raises(
        BadRequest, match="^BAD_REQUEST: too many offsets: at most 2 per SHARE_ACK$"
    ):
        ack_args(["g", "t", "c", "0", "1,2,3", "accept"], 2)
    with pytest.raises(
        BadRequest, match=r"^BAD_REQUEST: SHARE_ACK requires: .* accept\|release\|reject$"
    ):
        ack_args(["g", "t", "c", "0", "1"], 1000)


def test_leave_args() -> None:
    assert leave_args(["g", "t", "c"]) == ("g", "t", "c")
    with pytest.raises(
        BadRequest, match="^BAD_REQUEST: SHARE_LEAVE requires: <group> <topic> <consumer_id>$"
    ):
        leave_args(["g", "t"])


def test_records_payload_round_trips_through_the_client() -> None:
    values = [b"plain", b"a b,c|d%e:f\n", b"", bytes(range(256))]
    records = [ShareRecord(p, 1000 + p, p + 1, v) for p, v in enumerate(values)]
    payload = records_payload(records, 30000)
    assert payload.startswith("records=0:1000:1:plain,1:1001:2:a%20b%2Cc%7Cd%25e:f%0A,2:1002:3:,")
    assert records_payload([], 15000) == "records= lock_ms=15000"
    reply = share_acquire_reply(protocol.Response("1", True, payload=payload))
    assert reply.lock_ms == 30000
    assert reply.records == [AcquiredRecord(p, 1000 + p, p + 1, v) for p, v in enumerate(values)]
    assert reply.offsets(1) == [1001]
    assert share_acquire_reply(protocol.Response("1", True, "records= lock_ms=1")).records == []


def test_client_ack_args_and_refusal_message() -> None:
    assert share_ack_args("g", "t", "c", 0, [1, 2], "reject") == "g t c 0 1,2 reject"
    with pytest.raises(ValueError):
        share_ack_args("g", "t", "c", 0, [1], "renew")
    with pytest.raises(ValueError):
        share_ack_args("g", "t", "c", 0, [], "accept")
    assert refusal_message("c", [5, 7], 3) == (
        "records not held by c: 5,7; the other 1 were acknowledged"
    )
    assert refusal_message("c", list(range(12)), 12).startswith(
        "records not held by c: 0,1,2,3,4,5,6,7,8,9,... (12 in all); the other 0"
    )


# --- over TCP ------------------------------------------------------------------------------


@pytest.fixture
def group() -> str:
    return f"sg-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def one_partition(pod: Pod, topic: str, group: str) -> str:
    """``topic`` with one partition; ``group`` starting at the earliest record."""
    admin = AdminClient({"bootstrap.servers": pod.bootstrap, "socket.timeout.ms": 5000})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(timeout=30)
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    return topic


def _produce(client: Client, topic: str, values: list[bytes]) -> list[int]:
    return [client.produce(topic, b"k", value).offset for value in values]


def _in_flight(redis_client: redis.Redis, topic: str, group: str) -> dict[int, int]:
    """Partition 0's records in flight for the share group: offset -> delivery count."""
    entries = redis_client.xpending_range(
        KEYS.partition(topic, 0).log, KEYS.share_consumer_group(group), "-", "+", 100_000
    )
    return {entry_offset(e["message_id"]): e["times_delivered"] for e in entries}


def test_acquire_then_accept(
    pod: Pod, one_partition: str, group: str, redis_client: redis.Redis
) -> None:
    topic = one_partition
    values = [b"first", b"a b,c|d%", b""]
    with pod.client() as client:
        offsets = _produce(client, topic, values)
        reply = client.share_acquire(group, topic, "c1")
        assert reply.lock_ms == 30000
        assert reply.records == [
            AcquiredRecord(0, o, 1, v) for o, v in zip(offsets, values, strict=True)
        ]
        assert client.share_acquire(group, topic, "c1").records == []  # all held by c1
        assert _in_flight(redis_client, topic, group) == dict.fromkeys(offsets, 1)
        assert client.share_ack(group, topic, "c1", 0, reply.offsets(0)) == 3
        assert _in_flight(redis_client, topic, group) == {}
        assert client.share_acquire(group, topic, "c1").records == []
        # raw lines: the payload as written on the wire
        more = _produce(client, topic, [b"x y"])[0]
        raw = client.request("SHARE_ACQUIRE", f"{group} {topic} c1 max=5")
        assert raw.payload == f"records=0:{more}:1:x%20y lock_ms=30000"
        acked = client.request("SHARE_ACK", f"{group} {topic} c1 0 {more} ACCEPT")
        assert acked.payload == "acked=1"


def test_max_bounds_one_acquisition(pod: Pod, one_partition: str, group: str) -> None:
    topic = one_partition
    with pod.client() as client:
        offsets = _produce(client, topic, [f"v{i}".encode() for i in range(5)])
        first = client.share_acquire(group, topic, "c1", max_records=2)
        second = client.share_acquire(group, topic, "c1", max_records=10)
        assert [r.offset for r in first.records + second.records] == offsets
        assert len(first.records) == 2


def test_async_client(pod: Pod, one_partition: str, group: str) -> None:
    topic = one_partition

    async def main() -> tuple[list[AcquiredRecord], int, bool, bool]:
        async with await AsyncClient.connect("127.0.0.1", pod.port) as client:
            await client.produce(topic, "k", "v")
            acquired = await client.share_acquire(group, topic, "c1", max_records=5)
            acked = await client.share_ack(group, topic, "c1", 0, acquired.offsets(0), "reject")
            left = await client.share_leave(group, topic, "c1")
            again = await client.share_leave(group, topic, "c1")
            return acquired.records, acked, left, again

    records, acked, left, again = asyncio.run(main())
    assert [(r.partition, r.delivery_count, r.value) for r in records] == [(0, 1, b"v")]
    assert (acked, left, again) == (1, True, False)


def test_release_comes_back_with_delivery_count_2_and_reject_never(
    pod: Pod, one_partition: str, group: str, redis_client: redis.Redis
) -> None:
    topic = one_partition
    with pod.client() as client:
        released, rejected = _produce(client, topic, [b"again", b"never"])
        assert len(client.share_acquire(group, topic, "c1").records) == 2
        assert client.share_ack(group, topic, "c1", 0, [released], "release") == 1
        assert client.share_ack(group, topic, "c1", 0, [rejected], "reject") == 1
        # another member takes the released record at once, its delivery count kept + 1
        back = client.share_acquire(group, topic, "c2")
        assert back.records == [AcquiredRecord(0, released, 2, b"again")]
        assert client.share_ack(group, topic, "c2", 0, [released]) == 1
        for member in ("c1", "c2"):
            assert client.share_acquire(group, topic, member).records == []
        assert _in_flight(redis_client, topic, group) == {}


def test_acknowledging_records_not_held(pod: Pod, one_partition: str, group: str) -> None:
    topic = one_partition
    with pod.client() as client:
        a, b = _produce(client, topic, [b"a", b"b"])
        client.share_acquire(group, topic, "c1")
        with pytest.raises(RequestFailed) as refused:  # c2 holds nothing
            client.share_ack(group, topic, "c2", 0, [a])
        assert refused.value.code == "INVALID_RECORD_STATE"
        assert refused.value.message == (
            f"records not held by c2: {a}; the other 0 were acknowledged"
        )
        assert client.share_ack(group, topic, "c1", 0, [a]) == 1
        with pytest.raises(RequestFailed) as partly:  # a is acknowledged already, b is held
            client.share_ack(group, topic, "c1", 0, [a, b])
        assert partly.value.code == "INVALID_RECORD_STATE"
        assert partly.value.message.endswith(f": {a}; the other 1 were acknowledged")
        assert client.share_acquire(group, topic, "c1").records == []  # b was accepted


def test_leave_releases_at_once(
    pod: Pod, one_partition: str, group: str, redis_client: redis.Redis
) -> None:
    topic = one_partition
    with pod.client() as client:
        offsets = _produce(client, topic, [b"a", b"b"])
        assert len(client.share_acquire(group, topic, "c1").records) == 2
        assert client.share_acquire(group, topic, "c2").records == []  # held by c1
        assert client.share_leave(group, topic, "c1") is True
        # long before the 30 s lock: c2 gets them now, delivered a second time
        back = client.share_acquire(group, topic, "c2")
        assert [(r.offset, r.delivery_count) for r in back.records] == [(o, 2) for o in offsets]
        assert client.share_leave(group, topic, "c1") is False  # not a member any more
        assert client.request("SHARE_LEAVE", f"{group} {topic} c2").payload == "left=true"
        assert _in_flight(redis_client, topic, group) == dict.fromkeys(offsets, 2)
        members = redis_client.hgetall(KEYS.share_group(group).members)
        assert members == {}


def test_bad_requests_keep_the_connection(pod: Pod, topic: str, group: str) -> None:
    cases = {
        f"SHARE_ACQUIRE|{group} {topic}": (
            "SHARE_ACQUIRE requires: <group> <topic> <consumer_id> [max=<n>]"
        ),
        f"SHARE_ACQUIRE|{group} {topic} c1 max=0": "invalid max: must be max=<n> with n in 1..1000",
        f"SHARE_ACQUIRE|{group} {topic} c1 max=1001": (
            "invalid max: must be max=<n> with n in 1..1000"
        ),
        f"SHARE_ACQUIRE|{group} bad/topic c1": (
            "invalid topic: must be 1-249 characters of [A-Za-z0-9._-]"
        ),
        f"SHARE_ACK|{group} {topic} c1 0 1": (
            "SHARE_ACK requires: <group> <topic> <consumer_id> <partition> "
            "<offset>[,<offset>...] accept|release|reject"
        ),
        f"SHARE_ACK|{group} {topic} c1 0 1 maybe": (
            "invalid type: must be accept, release or reject"
        ),
        f"SHARE_ACK|{group} {topic} c1 0 x accept": "invalid offset",
        f"SHARE_ACK|{group} {topic} c1 99 1 accept": "invalid partition",
        f"SHARE_ACK|{group} {topic} c%1 0 1 accept": (
            "invalid consumer_id: must be 1-249 characters of [A-Za-z0-9._-]"
        ),
        f"SHARE_LEAVE|{group}": "SHARE_LEAVE requires: <group> <topic> <consumer_id>",
    }
    with pod.client() as client:
        for index, (line, message) in enumerate(cases.items()):
            client.send_raw(f"V1|{index}|{line}\n".encode())
            reply = client.read_response()
            assert (reply.ok, reply.code, reply.message) == (False, "BAD_REQUEST", message), line
            assert reply.correlation_id == str(index)
        assert client.ping() == "pong"


# --- beside a Kafka ShareConsumer ----------------------------------------------------------


def test_a_v1_member_and_a_share_consumer_share_the_records(
    pod: Pod, one_partition: str, group: str, redis_client: redis.Redis
) -> None:
    """One partition, both members assigned it: rounds of records, the V1 member acquiring
    three first and holding them while the ShareConsumer polls, then accepting them; the
    ShareConsumer takes the rest. No record goes to both (not even one after the other:
    every record is delivered once), and together they get every record."""
    topic = one_partition
    consumer = ShareConsumer(
        {"bootstrap.servers": pod.bootstrap, "group.id": group, "socket.timeout.ms": 5000}
    )
    consumer.subscribe([topic])
    deliveries: dict[int, list[tuple[str, int]]] = {}  # offset -> (who, delivery count)
    produced: list[int] = []

    def poll_kafka() -> None:
        for m in consumer.poll(0.5):
            if m.error() is None:  # accepted by the next poll (implicit acknowledgement)
                deliveries.setdefault(m.offset(), []).append(("kafka", m.delivery_count()))

    try:
        with pod.client() as client:
            for round_ in range(4):
                produced += _produce(client, topic, [f"r{round_}-{i}".encode() for i in range(8)])
                held = client.share_acquire(group, topic, "v1-member", max_records=3)
                mine = {r.offset for r in held.records}
                for r in held.records:
                    deliveries.setdefault(r.offset, []).append(("v1", r.delivery_count))
                assert mine <= set(_in_flight(redis_client, topic, group))
                poll_kafka()  # while the V1 member holds its records: none of them comes
                assert not any(who == "kafka" for o in mine for who, _ in deliveries[o])
                if held.records:
                    client.share_ack(group, topic, "v1-member", 0, held.offsets(0))
            # the rest goes to the ShareConsumer (the V1 member took 3 a round at most)
            deadline = time.monotonic() + 90
            while set(deliveries) != set(produced):
                assert time.monotonic() < deadline, (len(deliveries), len(produced))
                poll_kafka()
            poll_kafka()  # the last acknowledgements go out
            assert client.share_leave(group, topic, "v1-member") is True
    finally:
        consumer.close()
    assert set(deliveries) == set(produced)
    assert all(len(seen) == 1 for seen in deliveries.values()), deliveries
    receivers = {who for seen in deliveries.values() for who, _ in seen}
    assert receivers == {"v1", "kafka"}
    wait_until(lambda: _in_flight(redis_client, topic, group) == {}, timeout=30)


# --- under --authorizer --------------------------------------------------------------------

USER, ADMIN, PASSWORD = "bob", "admin", "share pass"


@pytest.fixture(scope="module")
def authorizing(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    def allow(rtype: AclResource, name: str) -> AclBinding:
        return AclBinding(
            rtype, name, PatternType.LITERAL, f"User:{USER}", "*", Operation.READ,
            Permission.ALLOW,
        )  # fmt: skip

    bindings = [allow(AclResource.GROUP, "sg-ok"), allow(AclResource.TOPIC, "readable")]
    folder: Path = tmp_path_factory.mktemp("v1shareauthz")
    with authorizing_pod(
        redis_url, folder, user=USER, admin=ADMIN, password=PASSWORD, bindings=bindings,
        topics=("readable", "other"),
    ) as started:  # fmt: skip
        yield started


def test_share_commands_need_read_on_the_group_and_the_topic(authorizing: Pod) -> None:
    with Client("127.0.0.1", authorizing.port, timeout=10) as client:
        client.auth(USER, PASSWORD)
        wait_until(lambda: client.request("SHARE_ACQUIRE", "sg-ok readable c1").ok)
        denied = {
            "SHARE_ACQUIRE": ["sg-no readable c1", "sg-ok other c1"],
            "SHARE_ACK": ["sg-no readable c1 0 1 accept", "sg-ok other c1 0 1 accept"],
            "SHARE_LEAVE": ["sg-no readable c1"],
        }
        for command, lines in denied.items():
            for args in lines:
                reply = client.request(command, args)
                assert (reply.ok, reply.code) == (False, "NOT_AUTHORIZED"), (command, args)
                assert "READ" in reply.message
        assert client.request("SHARE_LEAVE", "sg-ok readable c1").payload == "left=true"
