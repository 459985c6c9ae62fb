"""Kafka's client quota rules, pure: entities, validation, precedence, the throttle math."""

from __future__ import annotations

import pytest

from mapping.core.kafka_errors import INVALID_REQUEST, UNSUPPORTED_VERSION
from mapping.security.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    PRODUCER_BYTE_RATE,
    USER,
    QuotaError,
    QuotaFilter,
    Rate,
    alteration,
    entity_of,
    quota_of,
    throttle_ms,
)

P = PRODUCER_BYTE_RATE
CONSUMER = CONSUMER_BYTE_RATE


def test_entity_is_canonical_and_validated() -> None:
    assert entity_of([(USER, "a"), (CLIENT_ID, None)]) == ((CLIENT_ID, None), (USER, "a"))
    for bad in ([], [(USER, "a"), (USER, "b")], [("group", "g")], [(USER, "")], [("ip", "1")]):
        with pytest.raises(QuotaError) as caught:
            entity_of(bad)
        assert caught.value.code == INVALID_REQUEST


def test_values_are_checked_as_kafka_does() -> None:
    assert alteration([(P, 1024.0, False), ("request_percentage", 0, True)]) == {
        P: 1024.0,
        "request_percentage": None,
    }
    for ops, message in (
        ([("bogus", 1.0, False)], "Invalid configuration key bogus"),
        ([(P, 0.0, False)], f"Quota {P} must be greater than 0"),
        ([(P, 1.5, False)], f"{P} cannot be a fractional value."),
        ([(P, 1.0, False), (P, 2.0, False)], f"Duplicate quota key {P}"),
    ):
        with pytest.raises(QuotaError) as caught:
            alteration(ops)
        assert (caught.value.code, caught.value.message) == (INVALID_REQUEST, message)
    assert alteration([("request_percentage", 12.5, False)]) == {"request_percentage": 12.5}


def test_precedence_follows_kafka() -> None:
    levels = [
        ((USER, "u"), (CLIENT_ID, "c")),
        ((USER, "u"), (CLIENT_ID, None)),
        ((USER, "u"),),
        ((USER, None), (CLIENT_ID, "c")),
        ((USER, None), (CLIENT_ID, None)),
        ((USER, None),),
        ((CLIENT_ID, "c"),),
        ((CLIENT_ID, None),),
    ]
    tags = [("u", "c"), ("u", "c"), ("u", ""), ("u", "c"), ("u", "c"), ("u", ""), ("", "c")]
    tags.append(("", "c"))
    quotas = {entity_of(pairs): {P: float(i + 1)} for i, pairs in enumerate(levels)}
    for i in range(len(levels)):
        assert quota_of(quotas, P, "u", "c") == (float(i + 1), tags[i])
        del quotas[entity_of(levels[i])]
    assert quota_of(quotas, P, "u", "c") is None
    # a key another entity does not set falls through to the next that does
    quotas = {entity_of(levels[0]): {"consumer_byte_rate": 5.0}, entity_of(levels[7]): {P: 9.0}}
    assert quota_of(quotas, P, "u", "c") == (9.0, ("", "c"))


def test_rate_and_throttle_follow_kafka() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(5000, 0)
    # the window counts as 10 s until 10 full windows passed: 500 B/s
    assert rate.measure(0) == 500.0
    assert throttle_ms(rate, 1000.0, 0) == 0
    rate.record(15000, 0)  # 2000 B/s over 10 s: (2000 - 1000) / 1000 * 10 s
    assert throttle_ms(rate, 1000.0, 0) == 10_000
    # 100 ms later the window is 10.1 s: 20000 B / 10.1 s over 1000 B/s, times 10.1 s
    assert throttle_ms(rate, 1000.0, 100) == 9_900
    # samples older than 11 windows are gone
    assert rate.measure(11_000) == 0.0


def test_describe_filter() -> None:
    alice_app = entity_of([(USER, "alice"), (CLIENT_ID, "app")])
    alice = entity_of([(USER, "alice")])
    default_user = entity_of([(USER, None)])
    exact = QuotaFilter.of([(USER, MATCH_EXACT, "alice")], strict=False)
    assert [exact.matches(e) for e in (alice_app, alice, default_user)] == [True, True, False]
    strict = QuotaFilter.of([(USER, MATCH_EXACT, "alice")], strict=True)
    assert [strict.matches(e) for e in (alice_app, alice)] == [False, True]
    default = QuotaFilter.of([(USER, MATCH_DEFAULT, None)], strict=False)
    assert [default.matches(e) for e in (alice, default_user)] == [False, True]
    any_client = QuotaFilter.of([(CLIENT_ID, MATCH_SPECIFIED, None)], strict=False)
    assert [any_client.matches(e) for e in (alice_app, alice)] == [True, False]
    for components, code in (
        ([(USER, MATCH_EXACT, None)], INVALID_REQUEST),
        ([(USER, MATCH_DEFAULT, "x")], INVALID_REQUEST),
        ([(USER, 7, None)], INVALID_REQUEST),
        ([(USER, MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], INVALID_REQUEST),
        ([("group", MATCH_SPECIFIED, None)], UNSUPPORTED_VERSION),
    ):
        with pytest.raises(QuotaError) as caught:
            QuotaFilter.of(components, strict=False)
        assert caught.value.code == code


def test_request_quota_is_bounded_and_a_throttled_fetch_is_not_counted() -> None:
    from adapter.quotas import QuotaManager

    now = [0.0]
    manager = QuotaManager(clock=lambda: now[0])
    assert not manager.request_active
    manager.set({entity_of([(CLIENT_ID, "c")]): {"request_percentage": 1.0, CONSUMER: 1000.0}})
    assert manager.active and manager.request_active
    # 50 % of a second over a 10 s window, 1 % allowed: Kafka's bound is one window (1 s)
    assert manager.record("request_percentage", "u", "c", 50.0) == 1000
    assert manager.max_in_window(CONSUMER, "u", "c") == 10_000.0
    # a Fetch throttled by another quota counts none of its bytes
    assert manager.record(CONSUMER, "u", "c", 9000, unless=5) == 0
    assert manager.record(CONSUMER, "u", "c", 9000, unless=0) == 0  # kept: 900 B/s
    assert manager.record(CONSUMER, "u", "c", 2000, unless=0) == 1000  # over: taken back
    assert manager.record(CONSUMER, "u", "c", 1000, unless=0) == 0  # 10000 B in 10 s
