"""Consumer groups in Redis (filled in by the groups work)."""

from __future__ import annotations

from mapping.batcher import RedisBatcher
from mapping.keys import Keys


class Groups:
    def __init__(self, batcher: RedisBatcher, keys: Keys, *, session_timeout_ms: int) -> None:
        self.batcher = batcher
        self.keys = keys
        self.session_timeout_ms = session_timeout_ms
