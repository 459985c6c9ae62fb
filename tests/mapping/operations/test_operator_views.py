"""The readings behind DescribeProducers and DescribeLogDirs, from the structures' contents:
each producer's epoch, last sequence, last append and open transaction; expired producers
left out unless a transaction of theirs is open; Redis' memory room."""

from __future__ import annotations

from mapping.operations.log_dirs import room
from mapping.operations.producer_states import ProducerState, producer_states

NOW, EXPIRATION = 1_000_000, 60_000


def test_the_last_batch_gives_the_last_sequence() -> None:
    stored = {
        7: "2 0 4 100 104 5 9 200 204",  # epoch 2, two batches kept: the last ends at seq 9
        8: "0 0 0 300 300",
    }
    times = {7: str(NOW - 10), 8: f"{NOW - 20}.0"}  # (scores may come as floats)
    assert producer_states(stored, times, {}, NOW, EXPIRATION) == [
        ProducerState(7, 2, 9, NOW - 10, -1),
        ProducerState(8, 0, 0, NOW - 20, -1),
    ]


def test_expired_producers_are_left_out_unless_a_transaction_is_open() -> None:
    stored = {1: "0 0 0 10 10", 2: "3 5 5 20 20", 3: "1 0 0 30 30"}
    times = {1: str(NOW - EXPIRATION - 1), 2: str(NOW - EXPIRATION - 1)}  # 3: no time kept
    open_txns = {2: "4 20 1700000000000"}
    assert producer_states(stored, times, open_txns, NOW, EXPIRATION) == [
        ProducerState(2, 4, 5, NOW - EXPIRATION - 1, 20)  # the open transaction's newer epoch
    ]


def test_a_registered_transaction_with_nothing_appended() -> None:
    # AddPartitionsToTxn registered it: no batch here yet, first offset -1
    assert producer_states({}, {}, {5: "0 -1 -1"}, NOW, EXPIRATION) == [
        ProducerState(5, 0, -1, -1, -1)
    ]


def test_a_marker_only_entry_has_no_sequence() -> None:
    # the epoch alone (a fencing marker wrote it): no batch, no sequence
    assert producer_states({9: "6"}, {9: str(NOW)}, {}, NOW, EXPIRATION) == [
        ProducerState(9, 6, -1, NOW, -1)
    ]


def test_memory_room_is_maxmemory_else_the_machine() -> None:
    limited = {"used_memory": 300, "maxmemory": 1000, "total_system_memory": 8000}
    unlimited = {"used_memory": 500, "maxmemory": 0, "total_system_memory": 8000}
    assert room([limited]) == (1000, 700)
    assert room([unlimited]) == (8000, 7500)
    assert room([limited, unlimited]) == (9000, 8200)  # a cluster's primaries together
    assert room([{"used_memory": 2000, "maxmemory": 1000}]) == (1000, 0)  # over: none usable
