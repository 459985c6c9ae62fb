"""Which topics a source reads, as Spark's Kafka source names them: option ``topic`` (this
connector's first name for one topic), ``subscribe`` (a comma-separated list) or
``subscribePattern`` (a regular expression over topic names). Exactly one of them.

A pattern is Python's ``re`` (Spark's is a Java regex) and must match the whole name, as
Java's ``Matcher.matches()`` in Kafka's pattern subscription does. The driver looks the
matching topics up again at every micro-batch (mapping/core/keys.py's topics set), so a topic
created later is read from its first record, as Spark does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mapping.core.keys import is_valid_name
from spark_connector.errors import OptionError

SUBSCRIPTION_OPTIONS = ("topic", "subscribe", "subscribepattern")


@dataclass(frozen=True, slots=True)
class TopicNames:
    """The topics named by option ``topic`` or ``subscribe``: each one must exist."""

    names: tuple[str, ...]

    def describe(self) -> str:
        return ", ".join(self.names)


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """Every topic whose whole name matches ``pattern`` (it may match none yet)."""

    pattern: str

    def matching(self, names: Iterable[str]) -> list[str]:
        compiled = re.compile(self.pattern)
        return sorted(name for name in names if compiled.fullmatch(name))

    def describe(self) -> str:
        return f"topics matching {self.pattern!r}"


Subscription = TopicNames | TopicPattern


def _name(option: str, name: str) -> str:
    if not is_valid_name(name):
        raise OptionError(
            f"option {option}: a topic name is 1-249 characters of [A-Za-z0-9._-], got {name!r}"
        )
    return name


def parse_subscription(opts: Mapping[str, str]) -> Subscription:
    """The subscription of the lower-cased options ``opts``."""
    given = [name for name in SUBSCRIPTION_OPTIONS if name in opts]
    if not given:
        raise OptionError(
            "option topic is required (or subscribe: a comma-separated list of topics, or "
            "subscribePattern: a regular expression over topic names)"
        )
    if len(given) > 1:
        raise OptionError(
            "give only one of the options topic, subscribe and subscribePattern "
            f"(got {', '.join(given)})"
        )
    if "topic" in opts:
        topic = opts["topic"]
        if not topic:
            raise OptionError("option topic is required")
        return TopicNames((_name("topic", topic),))
    if "subscribe" in opts:
        # as Spark: items trimmed, empty ones dropped; a name given twice is read once
        items = [item.strip() for item in opts["subscribe"].split(",")]
        names = tuple(dict.fromkeys(_name("subscribe", item) for item in items if item))
        if not names:
            raise OptionError(
                f"option subscribe names no topic (a comma-separated list), got "
                f"{opts['subscribe']!r}"
            )
        return TopicNames(names)
    pattern = opts["subscribepattern"].strip()
    if not pattern:
        raise OptionError("option subscribePattern is empty")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise OptionError(
            f"option subscribePattern is not a Python regular expression ({exc}): {pattern!r}"
        ) from None
    return TopicPattern(pattern)
