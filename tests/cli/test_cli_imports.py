"""``--help`` of every command loads only the command lines themselves: the libraries and
modules the commands run on (redis, the pod, the Kafka protocol, anyio) are imported when a
command runs (adapter/cli/lazy.py), so help answers at once. Checked on the module names
``python -X importtime`` lists, never on timings."""

from __future__ import annotations

import subprocess
import sys

import pytest

# What no --help may import (a name, or a package and everything under it)
HEAVY = [
    "redis", "kafka", "aiokafka", "anyio", "uvloop", "asyncio", "yaml", "prometheus_client",
    "pyspark", "adapter.kafka", "adapter.pod", "adapter.server", "adapter.v1",
    "adapter.client", "mapping.connection", "mapping.kafka_group", "mapping.operations",
    "mapping.topic.topics",
]  # fmt: skip

COMMANDS = [
    [], ["serve"], ["request"], ["ping"], ["topic"], ["topic", "create"], ["topic", "list"],
    ["topic", "tail"], ["group"], ["group", "reset-offsets"], ["inspect"],
    ["inspect", "transactions"], ["user"], ["user", "add"], ["acl"], ["acl", "add"],
    ["quota"], ["quota", "set"], ["config"], ["config", "set"], ["console"],
]  # fmt: skip


def imported_by_help(command: list[str]) -> set[str]:
    """The modules ``python -X importtime -m adapter COMMAND --help`` imports."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "adapter", *command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: "), done.stdout
    rows = [line.split("|") for line in done.stderr.splitlines()]
    return {row[-1].strip() for row in rows if row[0].startswith("import time:") and len(row) == 3}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "adapter")
def test_help_imports_nothing_heavy(command: list[str]) -> None:
    imported = imported_by_help(command)
    assert "click" in imported  # (the list is read right)
    heavy = sorted(
        name for name in imported for h in HEAVY if name == h or name.startswith(h + ".")
    )
    assert heavy == [], f"adapter {' '.join(command)} --help imports {heavy}"
