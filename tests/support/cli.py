"""The command line (``python -m adapter ...``, in-process) pointed at one Redis and key
prefix."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import redis
from click.testing import CliRunner

from adapter.cli import main
from mapping.core.keys import Keys


@dataclass
class CliTarget:
    """One Redis and key prefix, and ``python -m adapter`` pointed at them."""

    url: str
    keys: Keys
    client: redis.Redis

    @classmethod
    def fresh(cls, url: str, client: redis.Redis, kind: str) -> CliTarget:
        """A target under a key prefix of its own (``<kind>-<random>``)."""
        return cls(url, Keys(f"{kind}-{uuid.uuid4().hex[:8]}"), client)

    def _run(self, args: tuple[str, ...], exit_code: int) -> str:
        base = ["--redis-url", self.url, "--key-prefix", self.keys.prefix]
        result = CliRunner().invoke(main, [*args, *base])
        assert result.exit_code == exit_code, (args, result.output)
        return result.output

    def cli(self, *args: str) -> str:
        return self._run(args, 0)

    def announced(self, channel: str, *args: str) -> str:
        """``cli(*args)``, which must tell the pods on ``channel`` ("changed"): its output."""
        notices = self.client.pubsub(ignore_subscribe_messages=True)
        notices.subscribe(channel)
        try:
            notices.get_message(timeout=5)  # the subscription's confirmation
            output = self.cli(*args)
            notice = notices.get_message(timeout=5)
            assert notice is not None and notice["data"] == b"changed", (args, notice)
        finally:
            notices.close()
        return output

    def refused(self, *args: str) -> str:
        """The output of a command the command line refuses (exit code 2, a usage error)."""
        return self._run(args, 2)

    def refused_in_one_line(self, *args: str) -> str:
        """A refused command's one line, ``Error: ...``."""
        lines = self.refused(*args).splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (args, lines)
        return lines[0]
