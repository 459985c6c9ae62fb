"""Argument checks shared by the handlers: each failure is a BAD_REQUEST with the V1 text."""

from __future__ import annotations

import re

from mapping.core.errors import BadRequest
from mapping.core.keys import is_valid_name

_INTEGER = re.compile(r"-?[0-9]{1,30}")


def expect_count(args: list[str], usage: str, low: int, high: int | None = None) -> None:
    """``usage`` is the command's form, e.g. ``PRODUCE requires: <topic> <key>:<value>``."""
    if not low <= len(args) <= (low if high is None else high):
        raise BadRequest(usage)


def name(value: str, field: str) -> str:
    """A topic, group or consumer name: 1-249 characters of ``[A-Za-z0-9._-]``."""
    if not is_valid_name(value):
        raise BadRequest(f"invalid {field}: must be 1-249 characters of [A-Za-z0-9._-]")
    return value


def integer(value: str, field: str, minimum: int | None = None) -> int:
    """A decimal integer (``invalid <field>`` otherwise), optionally at least ``minimum``."""
    if _INTEGER.fullmatch(value) is None:
        raise BadRequest(f"invalid {field}")
    number = int(value)
    if minimum is not None and number < minimum:
        raise BadRequest(f"invalid {field}")
    return number
