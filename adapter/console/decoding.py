"""Keys, values and headers as the message browser shows them: JSON pretty-printed, other
UTF-8 text as it is, other bytes as hex, a null one as null; and times in ms since the epoch
as ISO 8601 date-times in UTC."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import NamedTuple

NULL, JSON, TEXT, HEX = "null", "json", "text", "hex"


class Shown(NamedTuple):
    kind: str  # NULL, JSON, TEXT or HEX
    text: str


def shown(data: bytes | None) -> Shown:
    if data is None:
        return Shown(NULL, "null")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown(HEX, data.hex(" "))
    if text.lstrip()[:1] in ("{", "["):
        try:
            return Shown(JSON, json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            pass
    return Shown(TEXT, text)


def utc_time(ms: int | None) -> str:
    """``ms`` since the epoch as an ISO 8601 date-time in UTC to the millisecond
    (2026-11-24T09:30:00.123Z); "-" for none (Kafka's -1: no timestamp)."""
    if ms is None or ms < 0:
        return "-"
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
