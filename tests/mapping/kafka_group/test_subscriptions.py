"""KIP-848 subscriptions: RE2 regexes matched against whole topic names, Kafka's message for
one that does not compile, and what a member keeps of what it sent."""

from __future__ import annotations

import pytest

from mapping.kafka_group.subscriptions import InvalidRegex, Subscription, compile_regex, matching


def test_a_regex_matches_whole_names() -> None:
    topics = ["orders-eu", "orders", "old-orders-eu", "payments"]
    assert matching("orders-.*", topics) == ["orders-eu"]
    assert matching("^orders.*", topics) == ["orders", "orders-eu"]
    assert matching("(orders)|(payments)", topics) == ["orders", "payments"]
    assert matching(".*orders.*", topics) == ["old-orders-eu", "orders", "orders-eu"]


@pytest.mark.parametrize(
    ("regex", "detail"),
    [
        ("a(", "missing ): a("),
        ("(?=a)b", "invalid perl operator: (?="),
        (r"(a)\1", r"invalid escape sequence: \1"),
    ],
)
def test_what_re2j_refuses_is_refused_with_kafkas_message(regex: str, detail: str) -> None:
    with pytest.raises(InvalidRegex) as refused:
        compile_regex(regex)
    assert str(refused.value) == (
        f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}."
    )


@pytest.mark.timeout(10)
def test_a_pattern_that_backtracks_exponentially_elsewhere_answers_at_once() -> None:
    # Python's re would run for ages on this name: RE2's time is linear in it
    assert matching("(a+)+$", ["a" * 200 + "!"]) == []


def test_a_member_keeps_each_field_until_a_heartbeat_changes_it() -> None:
    kept = Subscription.stored(
        {"names": ["b", "a"], "regex": "x.*", "subscribed": ["a", "b", "x1"]}
    )
    assert kept == Subscription(("a", "b"), "x.*")
    assert kept.updated(None, None) == kept
    assert kept.updated(["c"], None) == Subscription(("c",), "x.*")
    assert kept.updated(None, "") == Subscription(("a", "b"), "")
    assert Subscription.stored({"subscribed": ["t"]}) == Subscription(("t",))  # stored before
    assert Subscription.stored({"names": {}, "regex": ""}) == Subscription()  # cjson's empty list
    assert Subscription.stored(None) == Subscription()
    assert Subscription(("a",), "x").as_json() == {"names": ["a"], "regex": "x"}
