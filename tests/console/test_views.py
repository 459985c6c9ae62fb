"""The console against real pods: what it writes a Kafka client sees (a produced record, a
config change in DescribeConfigs, an offset reset in a consumer's committed offsets), and
what Kafka clients did it shows (their records decoded, a group's lag in records, a share
group's members and records in flight, an open transaction), and its live tail over HTTP
(``adapter console`` as a child process: Server-Sent Events)."""

from __future__ import annotations

import http.client
import json
import re
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from starlette.testclient import TestClient

from tests.console.test_app import cells, csrf, error_of, make_client, produce
from tests.support.console import Console
from tests.support.kafka import produce_delivered
from tests.support.pods import RF1, Pod
from tests.support.share_groups import earliest, share_consumer

PREFIX = f"consoleviews-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def kafka_pod(redis_url: str) -> Iterator[Pod]:
    pod = Pod(redis_url, *RF1, "--key-prefix", PREFIX)
    pod.start()
    yield pod
    pod.stop()


@pytest.fixture
def client(redis_url: str, kafka_pod: Pod) -> Iterator[TestClient]:
    with make_client(redis_url, PREFIX) as http:
        yield http


def bootstrap(pod: Pod) -> str:
    return f"127.0.0.1:{pod.kafka_port}"


def new_topic(pod: Pod, partitions: int = 1) -> str:
    name = f"v-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(pod)})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def consumer(pod: Pod, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap(pod), "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })  # fmt: skip


def test_console_record_read_by_kafka_consumer(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod, 2)
    offset = produce(client, topic, 1, "k-1", '{"n": 1}', "origin: console\ntrace: 7")
    reader = consumer(kafka_pod, f"g-{uuid.uuid4().hex[:6]}")
    try:
        reader.assign([TopicPartition(topic, 1, offset)])
        message = None
        for _ in range(60):
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.error() is None
        assert message.offset() == offset
        assert message.key() == b"k-1" and message.value() == b'{"n": 1}'
        assert message.headers() == [("origin", b"console"), ("trace", b"7")]
    finally:
        reader.close()


def test_kafka_records_decoded(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod)
    producer = Producer({"bootstrap.servers": bootstrap(kafka_pod)})
    offsets: list[int] = []

    def delivered(err: object, message: object) -> None:
        assert err is None
        offsets.append(message.offset())  # type: ignore[attr-defined]

    producer.produce(topic, key=b"\xff\x01", value=json.dumps({"a": 1}).encode(),
                     headers=[("h", b"v")], on_delivery=delivered)  # fmt: skip
    producer.produce(topic, key=b"text-key", value=b"\x00\x9f", on_delivery=delivered)
    assert producer.flush(30) == 0
    page = client.get(f"/topics/{topic}/messages", params={"from": "start"})
    assert cells(page.text, "offset") == [str(o) for o in offsets]
    assert cells(page.text, "key") == ["ff 01", "text-key"]
    assert cells(page.text, "value") == ['{\n  "a": 1\n}', "00 9f"]
    assert cells(page.text, "headers") == ["h: v", ""]


def test_config_change_seen_by_describe_configs(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod)
    token = csrf(client, f"/topics/{topic}")
    wanted = {"csrf": token, "name": "retention.ms", "value": "7200000"}
    changed = client.post(f"/topics/{topic}/configs", data=wanted)
    assert changed.status_code == 303
    admin = AdminClient({"bootstrap.servers": bootstrap(kafka_pod)})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["retention.ms"].value == "7200000"


def test_group_lag_and_reset(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod)
    group = f"g-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap(kafka_pod)})
    for i in range(10):
        producer.produce(topic, value=f"r{i}".encode())
    assert producer.flush(30) == 0
    reader = consumer(kafka_pod, group)
    try:
        reader.subscribe([topic])
        read = []
        while len(read) < 4:
            message = reader.poll(1.0)
            if message is not None and message.error() is None:
                read.append(message)
        reader.commit(offsets=[TopicPartition(topic, 0, read[3].offset() + 1)], asynchronous=False)
        # refused while the group has a live member
        token = csrf(client, f"/groups/{group}")
        to_earliest = {"topic": topic, "target": "earliest", "execute": "yes"}
        live = client.post(f"/groups/{group}/reset", data={"csrf": token, **to_earliest})
        assert live.status_code == 409
        assert "can only be reset if the group" in error_of(live.text)
    finally:
        reader.close()
    page = client.get(f"/groups/{group}")
    assert page.status_code == 200
    assert cells(page.text, "lag") == ["6"]  # 10 records, 4 consumed: in records
    token = csrf(client, f"/groups/{group}")
    reset = client.post(f"/groups/{group}/reset", data={"csrf": token, **to_earliest})
    assert reset.status_code == 200, error_of(reset.text)
    again = consumer(kafka_pod, group)
    try:
        committed = again.committed([TopicPartition(topic, 0)], timeout=30)
        first = client.get(f"/topics/{topic}")
        assert committed[0].offset == int(cells(first.text, "log-start")[0])
    finally:
        again.close()
    assert cells(client.get(f"/groups/{group}").text, "lag") == ["10"]


def sse_events(response: http.client.HTTPResponse) -> Iterator[str]:
    """The lines of a Server-Sent Events stream, as they come (comments included)."""
    while True:
        line = response.readline()
        assert line, "the stream ended"
        text = line.decode().rstrip("\r\n")
        if text:
            yield text


def test_live_tail_streams_a_new_record(redis_url: str, kafka_pod: Pod, tmp_path: Path) -> None:
    topic = new_topic(kafka_pod)
    produce_delivered(bootstrap(kafka_pod), topic, [(0, b"before", b"old", [])])
    console = Console(redis_url, "--key-prefix", PREFIX, log_dir=tmp_path).start()
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    try:
        connection.request("GET", f"/topics/{topic}/tail?partition=0")
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        lines = sse_events(response)
        assert next(lines) == ": tailing"  # subscribed: from here on, nothing is missed
        [written] = produce_delivered(
            bootstrap(kafka_pod), topic, [(0, b"live", b'{"n": 1}', [("trace", b"t-9")])]
        )
        data = next(line for line in lines if line.startswith("data: "))
        event = json.loads(data.removeprefix("data: "))
        assert event["offset"] == written.offset()  # only what came after the start
        assert (event["key"], event["headers"]) == ("live", [["trace", "t-9"]])
        assert json.loads(event["value"]) == {"n": 1}
        assert event["timestamp"] == written.timestamp()[1]
    finally:
        connection.close()
        console.stop()


def test_share_group_on_the_groups_pages(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod, 2)
    records = [(p, None, b"%d-%d" % (p, i), []) for p in (0, 1) for i in range(3)]
    produce_delivered(bootstrap(kafka_pod), topic, records)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    earliest(kafka_pod, group)
    member = share_consumer(kafka_pod, group, [topic], **{"max.poll.records": 2})
    try:
        deadline = time.monotonic() + 30
        got: list = []
        while not got:  # held, not acknowledged: every record still counts as lag
            got = [m for m in member.poll(0.5) if m.error() is None]
            assert time.monotonic() < deadline, "the share consumer got nothing"
        listed = client.get("/groups").text
        shown = rf'>{group}</a></td><td class="protocol">(\w+)</td><td class="state">(\w+)</td>'
        row = re.search(shown + r'<td class="members">(\d+)<', listed)
        assert row is not None and row.groups() == ("share", "Stable", "1"), listed
        page = client.get(f"/groups/{group}")
        assert page.status_code == 200
        assert cells(page.text, "protocol") == ["share"]
        assert cells(page.text, "topics") == [topic]
        assert f"{topic}(0,1)" in cells(page.text, "assignment")[0]
        held = {m.partition() for m in got}
        lags = dict(zip(map(int, cells(page.text, "partition")), cells(page.text, "lag"),
                        strict=True))  # fmt: skip
        for partition in held:
            assert lags[partition] == "3"
        in_flight = sum(int(n) for n in cells(page.text, "in-flight"))
        assert in_flight >= len(got)
    finally:
        member.close()


def test_transactions_page_shows_an_open_transaction(client: TestClient, kafka_pod: Pod) -> None:
    topic = new_topic(kafka_pod)
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap(kafka_pod),
                         "transactional.id": transactional_id})  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    started_ms = int(time.time() * 1000)
    producer.produce(topic, key=b"k", value=b"in a transaction")
    assert producer.flush(30) == 0
    try:
        page = client.get("/transactions")
        assert page.status_code == 200
        ids = cells(page.text, "transactional-id")
        assert transactional_id in ids
        index = ids.index(transactional_id)
        assert cells(page.text, "state")[index] == "Ongoing"
        started = cells(page.text, "started")[index]
        assert abs(started_ms - datetime.fromisoformat(started).timestamp() * 1000) < 60_000
        assert cells(page.text, "partitions")[index] == f"{topic}/0"
        per_topic = client.get("/transactions", params={"topic": topic})
        lso, high = cells(per_topic.text, "lso")[0], cells(per_topic.text, "high-watermark")[0]
        assert int(lso) < int(high)  # the open transaction holds the last stable offset back
    finally:
        producer.abort_transaction(30)
