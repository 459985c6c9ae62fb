"""``python -m adapter inspect ...`` on a known state: topics and partitions made through a
pod (produce, REPLICA_FETCH, SET_PARTITION_ROLE), groups in the documented layout."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from mapping.core.keys import Keys
from mapping.topic.partitioner import partition_for
from tests.support.cli import CliTarget

State = CliTarget


@pytest.fixture
def state(redis_url: str) -> Iterator[State]:
    client = redis.Redis.from_url(redis_url)
    yield State(redis_url, Keys(f"ins{uuid.uuid4().hex[:8]}"), client)
    client.close()


def test_inspect_topics_and_partitions(state: State, start_pod) -> None:
    s = state
    s.cli("topic", "create", "orders", "--partitions", "2", "--replication-factor", "3",
          "--min-insync-replicas", "2", "--retention-ms", "86400000")  # fmt: skip
    s.cli("topic", "create", "audit", "--partitions", "1", "--replication-factor", "1",
          "--min-insync-replicas", "1")  # fmt: skip
    pod = start_pod(s.url, "--key-prefix", s.keys.prefix, "--no-replicator")
    with pod.client() as client:
        key = next(k for k in "abcdefgh" if partition_for(k.encode(), 2) == 1)
        first = client.produce("orders", key, "1")
        second = client.produce("orders", key, "2")
        assert first.partition == second.partition == 1
        # Follower 1 has both records, follower 2 only the first: hw = first, ISR 0 1 2.
        assert client.request("REPLICA_FETCH", f"orders 1 1 {second.offset}").ok
        assert client.request("REPLICA_FETCH", f"orders 1 2 {first.offset}").ok
        assert client.request("SET_PARTITION_ROLE", "orders 0 follower").ok
        audit = client.produce("audit", "k", "v")
    listing = s.cli("inspect", "topics")
    assert listing.splitlines() == [
        # the pod's mirror of the committed offsets (mapping/group/offsets_mirror.py)
        "topic=__consumer_offsets partitions=50 replication_factor=1 min_insync_replicas=1 "
        "records=0 under_replicated_partitions=0 retention_ms=-1 retention_bytes=-1 "
        "retention_ignore_groups=false",
        "topic=audit partitions=1 replication_factor=1 min_insync_replicas=1 records=1 "
        "under_replicated_partitions=0 retention_ms=-1 retention_bytes=-1 "
        "retention_ignore_groups=false",
        "topic=orders partitions=2 replication_factor=3 min_insync_replicas=2 records=2 "
        "under_replicated_partitions=0 retention_ms=86400000 retention_bytes=-1 "
        "retention_ignore_groups=false",
    ]
    described = s.cli("inspect", "topic", "orders")
    assert described.splitlines() == [
        "topic=orders partitions=2 replication_factor=3 min_insync_replicas=2 "
        "retention_ms=86400000 retention_bytes=-1 retention_ignore_groups=false",
        "partition=0 role=follower last_offset=-1 log_end_offset=0 hw=-1 isr=[0 1 2] "
        "acked=[1:-1 2:-1] records=0 first_offset=-1",
        # log_end_offset is Kafka's (exclusive, up to the hw): the first record's, plus one
        f"partition=1 role=leader last_offset={second.offset} log_end_offset={first.offset + 1} "
        f"hw={first.offset} isr=[0 1 2] acked=[1:{second.offset} 2:{first.offset}] records=2 "
        f"first_offset={first.offset}",
    ]
    # topic describe adds the Kafka configs set on the topic
    assert s.cli("topic", "describe", "orders") == described + "configs=[retention.ms=86400000]\n"
    as_json = json.loads(s.cli("inspect", "topic", "audit", "--json"))
    assert as_json["partition_views"][0]["high_watermark"] == audit.offset
    assert as_json["retention"] == {"ms": -1, "bytes": -1, "ignore_groups": False}


def test_inspect_groups(state: State, start_pod) -> None:
    """Group state written in the layout the group scripts use (mapping/lua/lib/group.lua):
    meta (generation, assignor), members (id -> last heartbeat ms), assignment (id ->
    "0 2"), offsets (partition -> next offset to read)."""
    s = state
    s.cli("topic", "create", "clicks", "--partitions", "3", "--replication-factor", "1",
          "--min-insync-replicas", "1")  # fmt: skip
    pod = start_pod(s.url, "--key-prefix", s.keys.prefix)
    with pod.client() as client:
        sent = client.produce_many("clicks", [("user1", f"v{i}") for i in range(5)])
    assert {r.partition for r in sent} == {2}
    gk = s.keys.group("dashboard", "clicks")
    s.client.sadd(s.keys.groups, "dashboard clicks")
    s.client.hset(gk.meta, mapping={"generation": 4, "assignor": "range", "partitions": 3})
    s.client.hset(gk.members, mapping={"c1": 1700000000000, "c2": 1700000000500})
    s.client.hset(gk.assignment, mapping={"c1": "0 1", "c2": "2"})
    s.client.hset(gk.offsets, mapping={"2": sent[2].offset})  # c2 processed records 0 and 1
    out = s.cli("inspect", "group", "dashboard", "clicks")
    assert out.splitlines() == [
        "group=dashboard topic=clicks generation=4 assignor=range members=2",
        "member=c1 partitions=[0 1] last_heartbeat_ms=1700000000000",
        "member=c2 partitions=[2] last_heartbeat_ms=1700000000500",
        "partition=0 owner=c1 committed=- hw=-1 lag=0",
        "partition=1 owner=c1 committed=- hw=-1 lag=0",
        f"partition=2 owner=c2 committed={sent[2].offset} hw={sent[4].offset} lag=3",
    ]
    assert s.cli("inspect", "groups").splitlines() == [
        "group=dashboard topic=clicks generation=4 assignor=range members=2 lag=3"
    ]
    assert s.cli("inspect", "groups", "--topic", "other") == ""
    parsed = json.loads(s.cli("inspect", "group", "dashboard", "clicks", "--json"))
    assert parsed["partitions"][2]["lag"] == 3


def test_inspect_groups_made_by_group_commands(state: State, start_pod) -> None:
    """The same view of a group made through JOIN/COMMIT."""
    s = state
    pod = start_pod(s.url, "--key-prefix", s.keys.prefix, "--default-replication-factor", "1",
                    "--default-min-insync-replicas", "1")  # fmt: skip
    with pod.client() as client:
        joined = client.request("JOIN", "g1 events m1")
        assert joined.ok, joined
        generation = joined.fields()["generation"]
        reply = client.produce("events", "user1", "v")
        client.produce("events", "user1", "w")
        committed = client.request(
            "COMMIT", f"g1 events m1 {generation} {reply.partition} {reply.offset + 1}"
        )
        assert committed.ok, committed
    out = s.cli("inspect", "group", "g1", "events").splitlines()
    assert out[0] == f"group=g1 topic=events generation={generation} assignor=round_robin members=1"
    assert out[1].startswith("member=m1 partitions=[0 1 2] last_heartbeat_ms=")
    line = out[2 + reply.partition]
    assert line.startswith(f"partition={reply.partition} owner=m1 committed={reply.offset + 1} ")
    assert line.endswith(" lag=1")


def test_lag_commands_say_what_kafka_tools_lag_counts() -> None:
    """Where users look: the --help of the commands that show lag."""
    from click.testing import CliRunner

    from adapter.cli import main

    for command in ("groups", "group"):
        result = CliRunner().invoke(main, ["inspect", command, "--help"])
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "offset units" in text and "docs/operations.md" in text, text
