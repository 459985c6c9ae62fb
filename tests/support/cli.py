"""The command line (``python -m adapter ...``, in-process) pointed at one Redis and key
prefix."""

from __future__ import annotations

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

    def cli(self, *args: str) -> str:
        base = ["--redis-url", self.url, "--key-prefix", self.keys.prefix]
        result = CliRunner().invoke(main, [*args, *base])
        assert result.exit_code == 0, result.output
        return result.output
