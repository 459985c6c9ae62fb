"""Share groups (KIP-932) from the command line against a real pod: ``adapter group list /
describe / reset-offsets / delete`` and ``adapter inspect groups / group`` as
kafka-share-groups.sh shows them, and the ``kafka_sharegroup_*`` metrics, with groups made
by confluent-kafka's ShareConsumer; every reset is read back by a share consumer."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis
from click.testing import CliRunner, Result
from confluent_kafka import ShareConsumer

from adapter.cli import main
from mapping.core.keys import Keys
from tests.support.cli import CliTarget
from tests.support.kafka import produce_delivered
from tests.support.pods import RF1, Pod, scrape_metrics
from tests.support.share_groups import earliest, share_consumer
from tests.support.waiting import wait_until

PARTITIONS = 2
PER_PARTITION = 5


@pytest.fixture(scope="module")
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"scli{uuid.uuid4().hex[:8]}"), client)
    client.close()


@pytest.fixture(scope="module")
def pod(target: CliTarget) -> Iterator[Pod]:
    started = Pod(target.url, "--key-prefix", target.keys.prefix, *RF1, metrics=True)
    started.start()
    yield started
    started.stop()


def run(target: CliTarget, *args: str) -> Result:
    base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
    return CliRunner().invoke(main, [*args, *base])


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def make_topic(target: CliTarget, pod: Pod, name: str) -> list:
    """A topic of PARTITIONS partitions with PER_PARTITION records each; their delivery
    reports."""
    target.cli("topic", "create", name, "--partitions", str(PARTITIONS),
               "--replication-factor", "1", "--min-insync-replicas", "1")  # fmt: skip
    records = [(p, None, f"{p}-{i}".encode(), []) for p in range(PARTITIONS)
               for i in range(PER_PARTITION)]  # fmt: skip
    return produce_delivered(pod.bootstrap, name, records)


def first_records(consumer: ShareConsumer) -> list:
    """Polls until records come (they stay in flight: the next poll would accept them)."""
    deadline = time.monotonic() + 30
    while True:
        got = [m for m in consumer.poll(0.5) if m.error() is None]
        if got:
            return got
        assert time.monotonic() < deadline, "the share consumer got nothing"


def read_all(pod: Pod, group: str, topic: str, expected: int) -> list[bytes]:
    """Every record a new member of ``group`` gets (and accepts) until ``expected`` came,
    then a few polls more (nothing else must come)."""
    consumer = share_consumer(pod, group, [topic], **{"max.poll.records": 3})
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            got += [m.value() for m in consumer.poll(0.5) if m.error() is None]
        for _ in range(3):
            got += [m.value() for m in consumer.poll(0.3) if m.error() is None]
    finally:
        consumer.close()
    return sorted(got)


def describe(target: CliTarget, group: str) -> dict:
    return json.loads(target.cli("group", "describe", group, "--json"))


def test_a_live_share_group_is_listed_described_inspected_and_measured(
    target: CliTarget, pod: Pod, topic: str
) -> None:
    make_topic(target, pod, topic)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    earliest(pod, group)
    consumer = share_consumer(pod, group, [topic], **{"max.poll.records": 3})
    try:
        got = first_records(consumer)
        held = {m.partition() for m in got}

        listed = table(target.cli("group", "list"))
        assert [group, "share", "Stable", "1"] in listed
        as_json = json.loads(target.cli("group", "list", "--json"))
        assert {"group": group, "protocol": "share", "state": "Stable", "members": 1} in as_json

        described = describe(target, group)
        assert described["type"] == "share" and described["state"] == "Stable"
        assert described["group_epoch"] >= 1 and described["lag_unit"] == "records"
        [member] = described["members"]
        assert member["assignment"] == {topic: list(range(PARTITIONS))}
        rows = {p["partition"]: p for p in described["partitions"]}
        assert set(rows) == set(range(PARTITIONS))  # assigned: shown, initialised or not
        for p in held:  # nothing acknowledged yet: every record still counts
            assert rows[p]["lag"] == PER_PARTITION
            assert rows[p]["lag"] == rows[p]["in_flight"] + rows[p]["available"]
        assert sum(rows[p]["in_flight"] for p in held) >= len(got)

        text = target.cli("group", "describe", group)
        lines = table(text)
        assert ["GROUP", "TYPE", "STATE", "GROUP-EPOCH", "ASSIGNMENT-STRATEGY",
                "#MEMBERS"] in lines  # fmt: skip
        assert [group, "share", "Stable", str(described["group_epoch"]), "simple", "1"] in lines
        assert ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG", "IN-FLIGHT",
                "AVAILABLE"] in lines  # fmt: skip
        assert f"{topic}(0,1)" in text
        some = min(held)
        spso = str(rows[some]["start_offset"])
        assert [group, topic, str(some), spso, str(PER_PARTITION)] == [
            row[:5] for row in lines if row[:3] == [group, topic, str(some)]
        ][0]

        inspected = json.loads(target.cli("inspect", "groups", "--topic", topic, "--json"))
        [line] = [e for e in inspected if e.get("type") == "share" and e["group"] == group]
        assert line["members"] == 1 and line["lag"] == sum(
            rows[p]["lag"] for p in rows if rows[p]["start_offset"] >= 0
        )
        one = target.cli("inspect", "group", group, topic)
        assert f"group={group} type=share topic={topic} state=Stable" in one
        assert f"partition={some} start_offset={spso}" in one

        assert pod.metrics_port is not None
        samples = scrape_metrics(pod.metrics_port)
        assert samples[("kafka_sharegroup_members", (("sharegroup", group),))] == 1
        where = (("partition", str(some)), ("sharegroup", group), ("topic", topic))
        assert samples[("kafka_sharegroup_lag", where)] == PER_PARTITION
        assert samples[("kafka_sharegroup_start_offset", where)] == rows[some]["start_offset"]
        assert samples[("kafka_sharegroup_records_in_flight", where)] >= 1

        # live members: no reset (AlterShareGroupOffsets' NON_EMPTY_GROUP), no deletion
        refused = run(target, "group", "reset-offsets", group, "--topic", topic, "--to-latest")
        assert refused.exit_code == 1 and "NON_EMPTY_GROUP" in refused.output
        refused = run(target, "group", "delete", group)
        assert refused.exit_code == 1 and "NON_EMPTY_GROUP" in refused.output
        assert describe(target, group)["members"]  # still there
    finally:
        consumer.close()


def test_an_empty_share_group_is_reset_and_deleted(target: CliTarget, pod: Pod, topic: str) -> None:
    sent = make_topic(target, pod, topic)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    earliest(pod, group)
    assert len(read_all(pod, group, topic, PARTITIONS * PER_PARTITION)) == 10
    # every record accepted, the member gone: Empty, nothing left
    wait_until(lambda: describe(target, group)["state"] == "Empty", timeout=20)
    assert all(p["lag"] == 0 for p in describe(target, group)["partitions"])

    dry = run(target, "group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert dry.exit_code == 0, dry.output
    assert "dry run" in dry.output
    assert all(p["lag"] == 0 for p in describe(target, group)["partitions"])  # unwritten

    target.cli("group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    rows = {p["partition"]: p for p in describe(target, group)["partitions"]}
    firsts = {p: min(m.offset() for m in sent if m.partition() == p) for p in range(PARTITIONS)}
    assert {p: r["start_offset"] for p, r in rows.items()} == firsts
    assert {r["lag"] for r in rows.values()} == {PER_PARTITION}
    assert len(read_all(pod, group, topic, PARTITIONS * PER_PARTITION)) == 10

    # --to-offset on one partition: the third record of partition 0 comes next
    third = sorted(m.offset() for m in sent if m.partition() == 0)[2]
    target.cli("group", "reset-offsets", group, "--topic", topic, "--partitions", "0",
               "--to-offset", str(third), "--execute")  # fmt: skip
    assert read_all(pod, group, topic, 3) == [b"0-2", b"0-3", b"0-4"]

    # --to-datetime: the records appended at or after the moment
    time.sleep(0.01)
    moment = datetime.now(UTC)
    time.sleep(0.01)
    produce_delivered(pod.bootstrap, topic, [(1, None, b"late", [])])
    target.cli("group", "reset-offsets", group, "--topic", topic,
               "--to-datetime", moment.isoformat(), "--execute")  # fmt: skip
    rows = {p["partition"]: p for p in describe(target, group)["partitions"]}
    assert rows[0]["lag"] == 0 and rows[1]["lag"] == 1
    assert read_all(pod, group, topic, 1) == [b"late"]

    # --to-latest: nothing left; --shift-by is not for share groups
    target.cli("group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    target.cli("group", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    assert all(p["lag"] == 0 for p in describe(target, group)["partitions"])
    shifted = run(target, "group", "reset-offsets", group, "--topic", topic, "--shift-by", "1")
    assert shifted.exit_code == 1 and "--to-earliest" in shifted.output

    deleted = target.cli("group", "delete", group)
    assert f"deleted share group={group}" in deleted
    assert group not in [row[0] for row in table(target.cli("group", "list"))]
    assert run(target, "group", "describe", group).exit_code == 1
    assert not target.client.xinfo_groups(target.keys.partition(topic, 0).log)
