"""What a KIP-848 member subscribes to: topic names, a regular expression, or both.

Kafka's coordinator compiles ``SubscribedTopicRegex`` with RE2/J and matches it against a
topic's whole name; here RE2 itself (google-re2) does, the engine RE2/J was ported from: the
same syntax, no backreferences or lookaround, and time linear in the name, so no pattern a
client sends can hold a pod's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import re2

# topics -> those of them a member's principal may see (the authorizer's DESCRIBE)
Visible = Callable[[list[str]], Awaitable[list[str]]]


class InvalidRegex(ValueError):
    """A SubscribedTopicRegex that does not compile; the text is Kafka's message."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a client's bad pattern is its answer, not the pod's log
    return options


_OPTIONS = _options()


@lru_cache(maxsize=256)
def compile_regex(regex: str) -> Any:
    """The compiled pattern, or InvalidRegex with the message Kafka answers."""
    try:
        return re2.compile(regex, options=_OPTIONS)
    except re2.error as failure:
        detail = failure.args[0] if failure.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise InvalidRegex(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {detail}."
        ) from None


def matching(regex: str, topics: Iterable[str]) -> list[str]:
    """The topics whose whole name ``regex`` matches, sorted."""
    pattern = compile_regex(regex)
    return sorted(t for t in topics if pattern.fullmatch(t) is not None)


def topic_list(value: Any) -> list[str]:
    """A stored list of topics, sorted (Lua's cjson writes an empty list as {})."""
    return sorted(value) if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class Subscription:
    """A member's subscription as it sent it: ``regex`` '' when it has none."""

    names: tuple[str, ...] = ()
    regex: str = ""

    @classmethod
    def stored(cls, member: dict[str, Any] | None) -> Subscription:
        """The subscription kept in a member's state (a member stored before regexes were
        served has only ``subscribed``: its names)."""
        if not member:
            return cls()
        names = topic_list(member.get("names", member.get("subscribed")))
        return cls(tuple(names), member.get("regex") or "")

    def updated(self, names: list[str] | None, regex: str | None) -> Subscription:
        """This subscription with a heartbeat's fields (None: unchanged)."""
        return Subscription(
            tuple(sorted(names)) if names is not None else self.names,
            regex if regex is not None else self.regex,
        )

    def as_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "regex": self.regex}
