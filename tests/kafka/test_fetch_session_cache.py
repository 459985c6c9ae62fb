"""The fetch sessions' bookkeeping (adapter/kafka/fetch_sessions.py), as Kafka's
FetchManager and FetchSessionCache keep it: contexts by session id and epoch, incremental
updates, what an answer must carry, the order, eviction and the bounds. Pure: no pod."""

from __future__ import annotations

import random
import uuid

from adapter.kafka import errors
from adapter.kafka.fetch_sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    MAX_EPOCH,
    SWEEP_MS,
    FetchSessions,
    SessionPartition,
    next_epoch,
)


def parts(*numbers: int, topic: str = "t", offset: int = 0) -> list[SessionPartition]:
    return [SessionPartition(topic, n, offset, 1 << 20) for n in numbers]


def by_id(
    topic_id: uuid.UUID, *numbers: int, topic: str | None = "t", offset: int = 0
) -> list[SessionPartition]:
    """Partitions as Fetch v13+ names them: by topic id (``topic``: the name it resolved
    to, None: none)."""
    return [SessionPartition(topic, n, offset, 1 << 20, topic_id=topic_id) for n in numbers]


def create(
    cache: FetchSessions,
    partitions: list[SessionPartition],
    now: float = 0.0,
    topic_ids: bool = False,
) -> int:
    """A full fetch asking for a session, its partitions answered at hw 10."""
    context = cache.open(0, INITIAL_EPOCH, partitions, [], now, topic_ids)
    assert context.create and context.session is None
    for p in context.partitions:
        p.must_answer(errors.NONE, 10, 0, 10, False)
    error, session_id = cache.finish(context, [], now)
    assert error == errors.NONE
    return session_id


def test_a_full_fetch_with_epoch_0_creates_a_session_and_epoch_minus_1_none() -> None:
    cache = FetchSessions(10, ids=random.Random(1))
    session_id = create(cache, parts(0, 1, 2))
    assert session_id > 0 and cache.stats().sessions == 1 and cache.stats().partitions == 3
    session = cache.sessions[session_id]
    assert list(session.partitions) == [("t", 0), ("t", 1), ("t", 2)] and session.epoch == 1

    sessionless = cache.open(0, FINAL_EPOCH, parts(0, 1), [], 1.0)
    assert not sessionless.create and sessionless.session is None
    assert cache.finish(sessionless, [], 1.0) == (errors.NONE, 0)
    assert cache.stats().sessions == 1
    assert cache.stats().fetches == {
        "sessionless": 1, "full": 1, "incremental": 0, "session_error": 0,
    }  # fmt: skip


def test_a_full_fetch_naming_a_session_closes_it() -> None:
    cache = FetchSessions(10)
    old = create(cache, parts(0))
    new = create(cache, parts(0, 1))  # (a full fetch names no session: both live)
    assert set(cache.sessions) == {old, new}
    cache.finish(cache.open(old, FINAL_EPOCH, parts(0), [], 1.0), [], 1.0)
    assert set(cache.sessions) == {new}
    context = cache.open(new, INITIAL_EPOCH, parts(5), [], 2.0)
    _, newest = cache.finish(context, [], 2.0)
    assert set(cache.sessions) == {newest} and newest != new


def test_unknown_sessions_and_wrong_epochs_are_session_errors() -> None:
    cache = FetchSessions(10)
    session_id = create(cache, parts(0))
    assert cache.open(session_id + 1, 1, [], [], 1.0).error == errors.FETCH_SESSION_ID_NOT_FOUND
    assert cache.open(session_id, 2, [], [], 1.0).error == errors.INVALID_FETCH_SESSION_EPOCH
    first = cache.open(session_id, 1, [], [], 1.0)
    assert first.error == errors.NONE and first.session is not None
    assert cache.finish(first, [], 1.0) == (errors.NONE, session_id)
    # the same epoch again (a retried request) is refused: the session expects 2 now
    assert cache.open(session_id, 1, [], [], 2.0).error == errors.INVALID_FETCH_SESSION_EPOCH
    assert cache.open(session_id, 2, [], [], 2.0).error == errors.NONE
    assert cache.stats().fetches["session_error"] == 3


def test_a_request_of_the_session_meanwhile_makes_the_slower_one_invalid() -> None:
    cache = FetchSessions(10)
    session_id = create(cache, parts(0))
    slow = cache.open(session_id, 1, [], [], 1.0)
    fast = cache.open(session_id, 2, [], [], 1.0)
    assert cache.finish(fast, [], 1.0) == (errors.NONE, session_id)
    assert cache.finish(slow, [], 1.0) == (errors.INVALID_FETCH_SESSION_EPOCH, session_id)


def test_epochs_wrap_to_1() -> None:
    assert next_epoch(1) == 2 and next_epoch(MAX_EPOCH) == 1 and next_epoch(-1) == FINAL_EPOCH


def test_incremental_requests_add_change_and_forget_partitions() -> None:
    cache = FetchSessions(10)
    session_id = create(cache, parts(0, 1, 2))
    session = cache.sessions[session_id]
    session.dirty.clear()
    context = cache.open(
        session_id, 1, parts(1, offset=7) + parts(3) + parts(9), [("t", 2), ("t", 9)], 1.0
    )
    assert context.session is session
    assert list(session.partitions) == [("t", 0), ("t", 1), ("t", 3)]
    assert session.partitions[("t", 1)].offset == 7
    assert session.partitions[("t", 1)].high_watermark == 10  # what it was told is kept
    assert session.dirty == {("t", 1), ("t", 3)}  # changed and added: looked at next
    assert ("t", 3) in session.added and ("t", 2) in session.removed  # for its follower
    assert cache.stats().partitions == 3


def test_a_session_emptied_is_closed_and_its_fetch_answered_sessionless() -> None:
    cache = FetchSessions(10)
    session_id = create(cache, parts(0))
    context = cache.open(session_id, 1, [], [("t", 0)], 1.0)
    assert context.session is None and not context.create and context.partitions == []
    assert cache.finish(context, [], 1.0) == (errors.NONE, 0)
    assert not cache.sessions and cache.stats().partitions == 0


def test_what_an_incremental_answer_must_carry() -> None:
    p = SessionPartition("t", 0, 5, 100)
    assert p.must_answer(errors.NONE, 10, 0, 10, False)  # never told anything: it goes
    assert not p.must_answer(errors.NONE, 10, 0, 10, False)  # nothing new
    assert p.must_answer(errors.NONE, 10, 0, 10, True)  # records
    assert p.must_answer(errors.NONE, 11, 0, 11, False)  # the high watermark moved
    assert p.must_answer(errors.NONE, 11, 3, 11, False)  # the log start moved
    assert p.must_answer(errors.NONE, 11, 3, 9, False)  # the last stable offset moved
    assert not p.must_answer(errors.NONE, 11, 3, 9, False)
    assert p.must_answer(errors.OFFSET_OUT_OF_RANGE, 11, 3, 9, False)  # an error always
    assert p.must_answer(errors.NONE, 11, 3, 9, False)  # and the answer after it too


def test_partitions_to_read_come_in_the_sessions_order_and_answered_ones_go_last() -> None:
    cache = FetchSessions(10)
    session_id = create(cache, parts(0, 1, 2, 3))
    session = cache.sessions[session_id]
    assert [p.partition for p in session.to_read()] == [0, 1, 2, 3]
    context = cache.open(session_id, 1, [], [], 1.0)
    cache.finish(context, [session.partitions[("t", 1)], session.partitions[("t", 0)]], 1.0)
    assert [p.partition for p in session.to_read()] == [2, 3, 1, 0]
    session.dirty -= {("t", 3), ("t", 1)}
    assert [p.partition for p in session.to_read()] == [2, 0]


def test_a_full_cache_creates_no_session_until_one_is_stale() -> None:
    cache = FetchSessions(2)
    first, second = create(cache, parts(0), 0.0), create(cache, parts(0), 10.0)
    assert create(cache, parts(0, 1), 20.0) == 0  # both young, neither stale
    cache.finish(cache.open(second, 1, [], [], 30.0), [], 30.0)  # second used: first is LRU
    assert create(cache, parts(0), EVICTION_MS) == 0  # first unused 120 s: not more
    third = create(cache, parts(0), EVICTION_MS + 1.0)
    assert third and set(cache.sessions) == {second, third}  # the stale one went
    assert cache.stats().evictions == 1 and first not in cache.sessions


def test_a_larger_session_evicts_the_smallest_one_older_than_the_eviction_time() -> None:
    cache = FetchSessions(2)
    small = create(cache, parts(0, 1), 0.0)
    large = create(cache, parts(0, 1, 2), 0.0)
    later = EVICTION_MS + 10.0
    for session_id in (small, large):  # used lately (not stale), old enough to be evictable
        cache.finish(cache.open(session_id, 1, [], [], later), [], later)
    assert create(cache, parts(0, 1), later + 1) == 0  # not more partitions than the smallest
    newer = create(cache, parts(0, 1, 2), later + 2)
    assert newer and set(cache.sessions) == {large, newer}
    largest = create(cache, parts(*range(10)), later + 3)  # large: the one evictable left
    assert largest and set(cache.sessions) == {newer, largest}
    assert create(cache, parts(*range(20)), later + 4) == 0  # both young
    assert cache.stats().evictions == 2


def test_no_slots_no_sessions() -> None:
    cache = FetchSessions(0)
    assert create(cache, parts(0)) == 0 and not cache.sessions


def test_the_partitions_held_are_bounded() -> None:
    cache = FetchSessions(10, max_partitions=5)
    assert create(cache, parts(*range(6))) == 0  # larger than the bound: no session
    session_id = create(cache, parts(0, 1, 2))
    assert create(cache, parts(0, 1, 2)) == 0  # 6 in all would pass it
    context = cache.open(session_id, 1, parts(3, 4, 5), [], 1.0)  # growing past it
    assert context.session is None and [p.partition for p in context.partitions] == [
        0, 1, 2, 3, 4, 5,
    ]  # fmt: skip
    assert not cache.sessions and cache.stats().partitions == 0


def test_a_removed_session_closes_its_follower() -> None:
    class Follower:
        closed = False

        def close(self) -> None:
            self.closed = True

    cache = FetchSessions(10)
    session_id = create(cache, parts(0))
    follower = cache.sessions[session_id].follower = Follower()
    cache.open(session_id, INITIAL_EPOCH, parts(0), [], 1.0)  # a full fetch closes it
    assert follower.closed


def test_a_stale_session_stops_following_its_partitions_until_used_again() -> None:
    class Follower:
        closed = False

        def close(self) -> None:
            self.closed = True

    cache = FetchSessions(10)
    stale, used = create(cache, parts(0, 1)), create(cache, parts(2))
    followers = {s: Follower() for s in (stale, used)}
    for session_id, follower in followers.items():
        cache.sessions[session_id].follower = follower
        cache.sessions[session_id].dirty.clear()
        cache.sessions[session_id].added.clear()
    cache.finish(cache.open(used, 1, [], [], EVICTION_MS - 1), [], EVICTION_MS - 1)
    cache.open(0, FINAL_EPOCH, parts(5), [], EVICTION_MS + SWEEP_MS)  # any fetch sweeps
    assert followers[stale].closed and not followers[used].closed
    session = cache.sessions[stale]  # kept (evicted only for a new session, as in Kafka)
    assert session.follower is None and session.dirty == {("t", 0), ("t", 1)}
    assert session.added == [("t", 0), ("t", 1)]  # for the next follower


ID_1 = uuid.UUID("00000000-0000-4000-8000-000000000001")
ID_2 = uuid.UUID("00000000-0000-4000-8000-000000000002")


def test_a_session_of_fetch_v13_keys_its_partitions_by_topic_id() -> None:
    """A topic deleted and created again under its name is another topic: the client names
    the new id and forgets the old one (the Java client's "replaced" partitions), both
    named "t" meanwhile."""
    cache = FetchSessions(10)
    session_id = create(cache, by_id(ID_1, 0, 1), topic_ids=True)
    session = cache.sessions[session_id]
    assert session.topic_ids and list(session.partitions) == [(ID_1, 0), (ID_1, 1)]
    context = cache.open(session_id, 1, by_id(ID_2, 0), [(ID_1, 0), (ID_1, 1)], 1.0, True)
    assert context.session is session and context.topic_ids
    assert list(session.partitions) == [(ID_2, 0)]
    assert session.partitions[(ID_2, 0)].topic == "t"
    assert session.removed == [(ID_1, 0), (ID_1, 1)] and (ID_2, 0) in session.added


def test_a_session_is_by_name_or_by_id_never_both() -> None:
    """Kafka's FETCH_SESSION_TOPIC_ID_ERROR: a session made by v7-12 asked by v13+, or the
    other way round (a client that changed versions on a reconnect to the same pod)."""
    cache = FetchSessions(10)
    by_name = create(cache, parts(0))
    ids = create(cache, by_id(ID_1, 0), topic_ids=True)
    refused = cache.open(by_name, 1, by_id(ID_1, 0), [], 1.0, True)
    assert refused.error == errors.FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.open(ids, 1, parts(0), [], 1.0, False).error == (
        errors.FETCH_SESSION_TOPIC_ID_ERROR
    )
    # a wrong epoch is told first, as Kafka checks it first
    assert cache.open(ids, 5, [], [], 1.0, False).error == errors.INVALID_FETCH_SESSION_EPOCH
    assert cache.stats().fetches["session_error"] == 3
    assert cache.open(ids, 1, [], [], 1.0, True).error == errors.NONE  # untouched


def test_an_unknown_topic_id_stays_in_the_session_until_it_resolves_or_is_forgotten() -> None:
    """Kafka keeps a partition whose id it cannot name (its name null) and names it once the
    id is known (maybeResolveUnknownName)."""
    cache = FetchSessions(10)
    session_id = create(cache, by_id(ID_1, 0, topic=None) + by_id(ID_2, 0), topic_ids=True)
    session = cache.sessions[session_id]
    assert session.unresolved() == {ID_1}
    session.dirty.clear()
    session.added.clear()
    session.resolve((ID_1, 0), "late")
    assert session.partitions[(ID_1, 0)].topic == "late" and not session.unresolved()
    assert session.added == [(ID_1, 0)] and session.dirty == {(ID_1, 0)}  # followed, read
    session.resolve((ID_2, 0), "other")  # a resolved partition keeps its name
    assert session.partitions[(ID_2, 0)].topic == "t"

    cache.open(session_id, 1, by_id(ID_1, 1, topic=None), [(ID_1, 0)], 1.0, True)
    assert session.unresolved() == {ID_1} and list(session.partitions) == [(ID_2, 0), (ID_1, 1)]
    # named again by a request that resolved it: resolved in the session too
    cache.open(session_id, 2, by_id(ID_1, 1, topic="late"), [], 2.0, True)
    assert not session.unresolved() and session.partitions[(ID_1, 1)].topic == "late"
