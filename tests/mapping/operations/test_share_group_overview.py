"""The pure parts of mapping/operations/share_group_overview.py: a share-partition's row from
its described state, the tables ``group describe`` prints, the per-topic totals of
``inspect groups`` and the metrics, and live members counted from the members hash."""

from __future__ import annotations

import json

from mapping.core.codec import entry_offset
from mapping.operations.share_group_overview import (
    MEMBER_HEADER,
    OFFSETS_HEADER,
    STATE_HEADER,
    ShareGroupOverview,
    ShareMemberRow,
    SharePartitionRow,
    assignment_text,
    cell,
    member_rows,
    membership_counts,
    offset_rows,
    overview_json,
    partition_row,
    state_rows,
    summary_json,
    topic_totals,
)
from mapping.share_group.state import PartitionState

BITS = 10


def test_a_partition_row_from_its_state() -> None:
    held = PartitionState(b"1700000000000-5", 2, b"1700000000000-3", 4)
    row = partition_row("orders", 1, held, BITS)
    assert row == SharePartitionRow("orders", 1, entry_offset(b"1700000000000-3", BITS), 6, 2, 4)
    assert row.initialised
    caught_up = PartitionState(b"1700000000000-5", 0, None, 0)
    after = partition_row("orders", 0, caught_up, BITS)
    assert after.start_offset == entry_offset(b"1700000000000-5", BITS) + 1
    assert (after.lag, after.in_flight, after.available) == (0, 0, 0)


def test_a_partition_without_state_is_not_initialised() -> None:
    row = partition_row("orders", 2, None, BITS)
    assert not row.initialised
    assert (row.start_offset, row.lag, row.available) == (-1, -1, -1)
    assert cell(row.start_offset) == "-" and cell(None) == "-" and cell("") == "-"
    assert cell(0) == "0"


def overview() -> ShareGroupOverview:
    return ShareGroupOverview(
        group="jobs",
        state="Stable",
        group_epoch=4,
        assignor="simple",
        members=[
            ShareMemberRow(
                "m-1",
                "rdkafka",
                "/127.0.0.1",
                4,
                ["audit", "orders"],
                {"orders": [0, 1], "audit": [2]},
            ),
            ShareMemberRow("m-2", "", "", None, ["orders"], {}),
        ],  # fmt: skip
        partitions=[
            SharePartitionRow("orders", 0, 1000, 3, 1, 2),
            SharePartitionRow("orders", 1, -1, -1, 0, -1),
            SharePartitionRow("audit", 2, 2048, -1, 5, -1),
        ],
    )


def test_the_describe_tables() -> None:
    o = overview()
    assert len(STATE_HEADER) == len(state_rows(o)[0])
    assert state_rows(o) == [["jobs", "share", "Stable", "4", "simple", "2"]]
    assert member_rows(o) == [
        ["jobs", "m-1", "/127.0.0.1", "rdkafka", "3", "audit(2), orders(0,1)"],
        ["jobs", "m-2", "-", "-", "0", "-"],
    ]
    assert all(len(r) == len(MEMBER_HEADER) for r in member_rows(o))
    assert offset_rows(o) == [
        ["jobs", "orders", "0", "1000", "3", "1", "2"],
        ["jobs", "orders", "1", "-", "-", "-", "-"],
        ["jobs", "audit", "2", "2048", "-", "5", "-"],
    ]
    assert all(len(r) == len(OFFSETS_HEADER) for r in offset_rows(o))
    assert assignment_text({"b": [1], "a": [], "c": [0, 2]}) == "b(1), c(0,2)"


def test_the_json_forms() -> None:
    o = overview()
    assert summary_json(o) == {"group": "jobs", "protocol": "share", "state": "Stable",
                               "members": 2}  # fmt: skip
    described = json.loads(json.dumps(overview_json(o)))
    assert described["type"] == "share" and described["lag_unit"] == "records"
    assert described["members"][0]["assignment"] == {"orders": [0, 1], "audit": [2]}
    assert described["partitions"][1] == {"topic": "orders", "partition": 1,
                                          "start_offset": -1, "lag": -1, "in_flight": 0,
                                          "available": -1}  # fmt: skip


def test_topic_totals_leave_out_what_is_unknown() -> None:
    totals = topic_totals(overview().partitions)
    assert [(t.topic, t.partitions, t.in_flight, t.available, t.lag) for t in totals] == [
        ("audit", 1, 5, 0, 0),
        ("orders", 1, 1, 2, 3),
    ]
    assert topic_totals([]) == []


def test_live_members_are_counted_by_their_session() -> None:
    now = 1_000_000
    live = json.dumps({"expiry": now + 10, "topics": ["orders"], "epoch": 3})
    gone = json.dumps({"expiry": now - 1, "topics": ["orders"], "epoch": 3})
    stored = [
        (b"3", {b"a": live.encode(), b"b": gone.encode()}),
        (b"2", {b"c": gone.encode()}),
        (None, {}),  # deleted meanwhile
    ]
    members, states = membership_counts(stored, ["g1", "g2", "g3"], now)
    assert members == {"g1": 1, "g2": 0}
    assert states == {"g1": "Stable", "g2": "Empty"}
