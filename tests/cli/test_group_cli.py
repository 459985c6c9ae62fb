"""``adapter group list / describe / reset-offsets`` (adapter/cli/group.py, group_reset.py)
against a real pod: groups made by confluent-kafka consumers (classic and KIP-848) and by V1
JOIN/COMMIT; every reset is read back by a confluent-kafka consumer of the group."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from click.testing import CliRunner, Result
from confluent_kafka import Consumer

from adapter.cli import main
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.kafka import produce_delivered
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until

PARTITIONS = 2
CLASSIC = {
    "socket.timeout.ms": 5000,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 300,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 1000,
}
# a KIP-848 member (group.protocol=consumer): session and heartbeat are the pod's settings
KIP848 = {
    "group.protocol": "consumer",
    "socket.timeout.ms": 5000,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 1000,
}


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"gcli{uuid.uuid4().hex[:8]}"), client)
    client.close()


@pytest.fixture
def pod(target: CliTarget, start_pod) -> Pod:
    return start_pod(target.url, "--key-prefix", target.keys.prefix, *RF1,
                     "--kafka-group-initial-rebalance-delay-ms", "100")  # fmt: skip


def run(target: CliTarget, *args: str) -> Result:
    base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
    return CliRunner().invoke(main, [*args, *base])


def table(text: str) -> list[list[str]]:
    """A kafka-consumer-groups style table's rows (the header first), cells split on spaces."""
    return [line.split() for line in text.splitlines() if line.strip()]


def make_topic(target: CliTarget, name: str) -> None:
    target.cli("topic", "create", name, "--partitions", str(PARTITIONS),
               "--replication-factor", "1", "--min-insync-replicas", "1")  # fmt: skip


def member(
    pod: Pod, group: str, topic: str, settings: dict = CLASSIC, **config: object
) -> Consumer:
    """A confluent-kafka member of ``group``, polled until it owns every partition."""
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **settings,
                         **config})  # fmt: skip
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < PARTITIONS:
        assert time.monotonic() < deadline, "the consumer got no assignment"
        consumer.poll(0.2)
    return consumer


def resume(pod: Pod, group: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """Where a new member of ``group`` starts reading each partition: the offset of the
    first record it gets there (the committed offset, or the first record after it)."""
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **CLASSIC})
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    try:
        while len(first) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                first.setdefault(message.partition(), message.offset())
    finally:
        consumer.close()
    return first


def committed(target: CliTarget, group: str, topic: str) -> dict[int, int]:
    raw = target.client.hgetall(target.keys.group(group, topic).offsets)
    return {int(p): int(o) for p, o in raw.items()}


def test_describe_a_kafka_group_with_exact_lag(target: CliTarget, pod: Pod, topic: str) -> None:
    make_topic(target, topic)
    sent = []
    for i in range(5):  # one by one, milliseconds apart: offsets far apart, as they are
        sent += produce_delivered(pod.bootstrap, topic, [(0, b"k", f"a{i}".encode(), [])])
        time.sleep(0.002)
    sent += produce_delivered(pod.bootstrap, topic,
                              [(1, None, f"b{i}".encode(), []) for i in range(3)])  # fmt: skip
    p0 = [m.offset() for m in sent if m.partition() == 0]
    p1 = [m.offset() for m in sent if m.partition() == 1]
    assert p0[-1] + 1 - p0[2] > 1000  # offset units, not records: lag must not be this
    group = f"billing-{uuid.uuid4().hex[:6]}"
    consumer = member(pod, group, topic, **{"client.id": "describe-test"})
    try:
        # two records of partition 0 processed (next to read: the third), none of partition 1
        consumer.commit(offsets=[_tp(topic, 0, p0[2])], asynchronous=False)
        result = run(target, "group", "describe", group)
        assert result.exit_code == 0, result.output
        states, members, offsets = result.stdout.split("\n\n")
        assert table(states) == [
            ["GROUP", "PROTOCOL", "TOPIC", "STATE", "GENERATION", "ASSIGNMENT-STRATEGY",
             "#MEMBERS"],
            [group, "classic", "-", "Stable", "1", "range", "1"],
        ]  # fmt: skip
        member_id = consumer.memberid()
        header, row = table(members)
        assert header == ["GROUP", "CONSUMER-ID", "PROTOCOL", "HOST", "CLIENT-ID",
                          "#PARTITIONS", "ASSIGNMENT"]  # fmt: skip
        assert row[:3] == [group, member_id, "classic"]
        assert "127.0.0.1" in row[3] and row[4:] == ["describe-test", "2", f"{topic}(0,1)"]
        assert table(offsets) == [
            ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
             "CONSUMER-ID", "HOST", "CLIENT-ID"],
            [group, topic, "0", str(p0[2]), str(p0[-1] + 1), "3", member_id, row[3],
             "describe-test"],
            [group, topic, "1", "-", str(p1[-1] + 1), "-", member_id, row[3], "describe-test"],
        ]  # fmt: skip
        described = json.loads(run(target, "group", "describe", group, "--json").stdout)
        assert (described["state"], described["protocol"]) == ("Stable", "classic")
        assert described["lag_unit"] == "records"
        assert [(p["partition"], p["lag"]) for p in described["partitions"]] == [(0, 3), (1, None)]
        listed = table(run(target, "group", "list").stdout)
        assert [group, "classic", "Stable", "1"] in listed
    finally:
        consumer.close()
    after = json.loads(run(target, "group", "describe", group, "--json").stdout)
    assert (after["state"], after["members"]) == ("Empty", [])
    assert after["partitions"][0]["current_offset"] == p0[2]


def test_log_end_offset_is_one_value_everywhere(target: CliTarget, pod: Pod, topic: str) -> None:
    """inspect topic's log_end_offset, group describe's LOG-END-OFFSET and Kafka's
    ListOffsets latest (the high watermark) are one value on each partition: the last
    record's offset (inspect's last_offset) plus one; 0 on an empty partition."""
    target.cli("topic", "create", topic, "--partitions", str(PARTITIONS),
               "--replication-factor", "3", "--min-insync-replicas", "1")  # fmt: skip
    sent = []
    for i in range(3):
        sent += produce_delivered(pod.bootstrap, topic, [(0, b"k", f"a{i}".encode(), [])])
    last = sent[-1].offset()
    group = f"ends-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": pod.bootstrap, "group.id": group, **CLASSIC})
    try:
        consumer.commit(offsets=[_tp(topic, 0, sent[1].offset())], asynchronous=False)
        # the built-in replicator brings the followers up to the log end (hw = last)
        wait_until(
            lambda: consumer.get_watermark_offsets(_tp(topic, 0, -1001), 5, False)[1] == last + 1
        )
        listed = [consumer.get_watermark_offsets(_tp(topic, p, -1001), 5, False)[1] for p in (0, 1)]
    finally:
        consumer.close()
    assert listed == [last + 1, 0]
    described = target.cli("inspect", "topic", topic).splitlines()[1:]
    fields = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in described]
    assert [(f["last_offset"], f["log_end_offset"]) for f in fields] == [
        (str(last), str(last + 1)),
        ("-1", "0"),
    ]
    result = run(target, "group", "describe", group)
    assert result.exit_code == 0, result.output
    rows = table(result.stdout.split("\n\n")[-1])
    assert rows[0][4] == "LOG-END-OFFSET"
    assert [(r[2], r[4]) for r in rows[1:]] == [("0", str(last + 1)), ("1", "0")]


def test_describe_a_kip848_group(target: CliTarget, pod: Pod, topic: str) -> None:
    make_topic(target, topic)
    produce_delivered(pod.bootstrap, topic, [(0, b"k", b"v", [])])
    group = f"next-{uuid.uuid4().hex[:6]}"
    consumer = member(pod, group, topic, KIP848, **{"client.id": "kip848-test"})
    try:

        def stable() -> dict | None:
            found = json.loads(run(target, "group", "describe", group, "--json").stdout)
            return found if found["state"] == "Stable" else None

        described = wait_until(stable)
        assert described["protocol"] == "consumer"
        (m,) = described["members"]
        assert (m["protocol"], m["client_id"], m["host"], m["assignment"]) == (
            "consumer",
            "kip848-test",
            "/127.0.0.1",
            {topic: [0, 1]},
        )
        assert {p["member_id"] for p in described["partitions"]} == {m["member_id"]}
        refused = run(target, "group", "reset-offsets", group, "--topic", topic,
                      "--to-earliest", "--execute")  # fmt: skip
        assert refused.exit_code == 1
        assert "is inactive, but the current state is" in refused.output
        assert "(consumer, 1 live members)" in refused.output
    finally:
        consumer.close()


def test_describe_a_v1_group(target: CliTarget, pod: Pod, topic: str) -> None:
    group = f"v1g-{uuid.uuid4().hex[:6]}"
    with pod.client() as client:
        sent = []
        for i in range(4):  # milliseconds apart: offsets far apart
            sent.append(client.produce(topic, "user1", f"v{i}"))
            time.sleep(0.002)
        assert sent[3].offset - sent[1].offset > 1000
        joined = client.request("JOIN", f"{group} {topic} m1")
        assert joined.ok, joined
        generation = joined.fields()["generation"]
        p = sent[0].partition
        done = client.request("COMMIT", f"{group} {topic} m1 {generation} {p} {sent[1].offset}")
        assert done.ok, done
    described = json.loads(run(target, "group", "describe", group, "--json").stdout)
    assert (described["state"], described["protocol"]) == ("Stable", "v1")
    assert described["states"] == [
        {"protocol": "v1", "topic": topic, "state": "Stable", "generation": int(generation),
         "assignment_strategy": "round_robin", "members": 1}
    ]  # fmt: skip
    assert [(m["member_id"], m["assignment"]) for m in described["members"]] == [
        ("m1", {topic: [0, 1, 2]})
    ]
    rows = {r["partition"]: r for r in described["partitions"]}
    # records 1, 2 and 3 are after the committed position
    assert (rows[p]["current_offset"], rows[p]["lag"], rows[p]["lag_exact"]) == (
        sent[1].offset,
        3,
        True,
    )
    assert rows[p]["log_end_offset"] == sent[3].offset + 1
    text = run(target, "group", "describe", group).stdout
    assert [group, "m1", "v1", "-", "-", "3", f"{topic}(0,1,2)"] in table(text)
    # a live V1 member: no reset, and nothing written
    before = committed(target, group, topic)
    refused = run(target, "group", "reset-offsets", group, "--topic", topic, "--to-earliest",
                  "--execute")  # fmt: skip
    assert refused.exit_code == 1
    assert refused.output.strip() == (
        f"Error: Assignments can only be reset if the group '{group}' is inactive, but the "
        "current state is Stable (v1, 1 live members)."
    )
    assert committed(target, group, topic) == before


def test_unknown_group_and_redis_down_fail_in_one_line(target: CliTarget, pod: Pod) -> None:
    unknown = run(target, "group", "describe", "nobody")
    assert (unknown.exit_code, unknown.output) == (
        1,
        "Error: Consumer group 'nobody' does not exist.\n",
    )
    no_topic = run(target, "group", "reset-offsets", "g", "--topic", "nothing", "--to-latest")
    assert (no_topic.exit_code, no_topic.output) == (1, "Error: no topic nothing\n")
    from mapping.connection.embedded import free_port

    down = f"redis://127.0.0.1:{free_port()}/0"
    for args in (["group", "describe", "g"], ["group", "list"],
                 ["group", "reset-offsets", "g", "--topic", "t", "--to-latest"]):  # fmt: skip
        result = CliRunner().invoke(main, [*args, "--redis-url", down])
        assert result.exit_code == 1, result.output
        (line,) = result.output.splitlines()
        assert line.startswith(f"Error: cannot reach Redis at {down} (--redis-url, "), line


def test_reset_offsets_then_a_kafka_consumer_resumes_there(
    target: CliTarget, pod: Pod, topic: str
) -> None:
    make_topic(target, topic)
    first = produce_delivered(pod.bootstrap, topic,
                              [(p, b"k", f"first-{p}-{i}".encode(), [])
                               for p in range(PARTITIONS) for i in range(4)])  # fmt: skip
    time.sleep(0.01)  # the second batch is appended in a later millisecond
    second = produce_delivered(pod.bootstrap, topic,
                               [(p, b"k", f"second-{p}-{i}".encode(), [])
                                for p in range(PARTITIONS) for i in range(2)])  # fmt: skip
    offsets = {p: [m.offset() for m in first + second if m.partition() == p]
               for p in range(PARTITIONS)}  # fmt: skip
    group = f"reset-{uuid.uuid4().hex[:6]}"
    reader = member(pod, group, topic)  # reads everything, commits the end, leaves
    reader.commit(offsets=[_tp(topic, p, offsets[p][-1] + 1) for p in range(PARTITIONS)],
                  asynchronous=False)  # fmt: skip
    live = run(target, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert live.exit_code == 1  # refused while the member is in the group, dry run too
    assert f"group '{group}' is inactive, but the current state is Stable" in live.output
    reader.close()
    end = {p: offsets[p][-1] + 1 for p in range(PARTITIONS)}
    assert committed(target, group, topic) == end

    def reset(*how: str) -> list[list[str]]:
        result = run(target, "group", "reset-offsets", group, "--topic", topic, *how)
        assert result.exit_code == 0, result.output
        return table(result.stdout)

    # a dry run (the default) prints the plan and writes nothing
    plan = reset("--to-earliest")
    assert plan == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "NEW-LAG"],
        *([group, topic, str(p), str(end[p]), str(offsets[p][0]), "6"] for p in range(2)),
    ]
    assert committed(target, group, topic) == end
    assert reset("--to-earliest", "--dry-run") == plan
    assert reset("--to-earliest", "--execute") == plan
    assert committed(target, group, topic) == {p: offsets[p][0] for p in range(PARTITIONS)}
    assert resume(pod, group, topic) == {p: offsets[p][0] for p in range(PARTITIONS)}

    # by the append time of the second batch's first record (Kafka's ListOffsets by time)
    appended = {p: offsets[p][4] >> 10 for p in range(PARTITIONS)}  # offset = (ms << 10) | seq
    reset("--to-timestamp", str(appended[0]), "--partitions", "0", "--execute")
    moment = datetime.fromtimestamp(appended[1] / 1000, UTC).isoformat(timespec="milliseconds")
    reset("--to-datetime", moment, "--partitions", "1", "--execute")
    assert resume(pod, group, topic) == {p: offsets[p][4] for p in range(PARTITIONS)}

    # by records, not offset units: two back from the second batch, one on
    assert reset("--shift-by", "-2", "--execute")[1][4] == str(offsets[0][2])
    assert reset("--shift-by", "1", "--execute")[1][4] == str(offsets[0][3])
    assert resume(pod, group, topic) == {p: offsets[p][3] for p in range(PARTITIONS)}

    # an offset in the log; one past its end is clamped to the end, with a warning
    plan = reset("--to-offset", str(offsets[0][1]), "--partitions", "0", "--execute")
    assert plan[1][3:] == [str(offsets[0][3]), str(offsets[0][1]), "5"]
    far = run(target, "group", "reset-offsets", group, "--topic", topic, "--partitions", "1",
              "--to-offset", str(end[1] + 10**6), "--execute")  # fmt: skip
    assert far.exit_code == 0, far.output
    assert table(far.stdout)[1][4] == str(end[1])
    assert f"of {topic}-1 is outside the log: set to its latest offset {end[1]}" in far.stderr
    assert committed(target, group, topic) == {0: offsets[0][1], 1: end[1]}
    newer = produce_delivered(pod.bootstrap, topic, [(1, b"k", b"newer", [])])
    assert resume(pod, group, topic) == {0: offsets[0][1], 1: newer[0].offset()}

    # to the end: a consumer reads only what comes after
    reset("--to-latest", "--execute")
    latest = produce_delivered(pod.bootstrap, topic,
                               [(p, b"k", b"latest", []) for p in range(PARTITIONS)])  # fmt: skip
    assert resume(pod, group, topic) == {m.partition(): m.offset() for m in latest}


def test_reset_usage_errors(target: CliTarget, pod: Pod, topic: str) -> None:
    make_topic(target, topic)
    for args, message in (
        ([], "give one of --to-earliest"),
        (["--to-earliest", "--to-latest"], "give one of --to-earliest"),
        (["--to-latest", "--dry-run", "--execute"], "not both"),
        (["--to-latest", "--partitions", "x"], "comma-separated list of partitions"),
        (["--to-datetime", "yesterday"], "ISO 8601"),
    ):
        result = run(target, "group", "reset-offsets", "g", "--topic", topic, *args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
    outside = run(target, "group", "reset-offsets", "g", "--topic", topic, "--partitions", "5",
                  "--to-latest")  # fmt: skip
    assert outside.output == f"Error: topic {topic} has 2 partitions: no partition 5\n"
    shift = run(target, "group", "reset-offsets", "g", "--topic", topic, "--shift-by", "1")
    assert shift.exit_code == 1
    assert (
        "cannot shift partitions [0, 1]" in shift.output and "no committed offset" in shift.output
    )


def _tp(topic: str, partition: int, offset: int):  # noqa: ANN202
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, partition, offset)
