"""JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET (filled in by the groups work)."""

from __future__ import annotations

from adapter.handlers import Handler

HANDLERS: dict[str, Handler] = {}
