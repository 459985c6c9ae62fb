"""Ctrl-C on the guide's GroupConsumer loop (docs/guide.md): the program leaves the group
(its partitions are free at once, not after the session timeout) and ends quietly, exit
status 0, no traceback; a record whose callback was interrupted is not committed."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import uuid

import pytest
import redis

from tests.support import ROOT
from tests.support.pods import Pod
from tests.support.v1 import KEYS
from tests.support.waiting import wait_until

# The guide's loop, saying when it has joined and which record it handles
PROGRAM = textwrap.dedent(
    """
    import sys
    import time

    from adapter.client import GroupConsumer

    group, topic, port, slow = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "slow"


    def joined(assignment):
        print("joined", assignment.generation, flush=True)


    def handle(record):
        print("record", record.partition, record.offset, flush=True)
        if slow:  # Ctrl-C comes in the middle of the callback
            time.sleep(60)


    with GroupConsumer(group, topic, port=port, on_assign=joined) as consumer:
        consumer.run(handle)
    """
)


class Program:
    """PROGRAM as a child process; ``lines`` what it printed."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C; (exit status, stderr)."""
        self.process.send_signal(signal.SIGINT)
        status = self.process.wait(30)
        self._reader.join(5)
        assert self.process.stderr is not None
        return status, self.process.stderr.read()


@pytest.mark.parametrize("when", ["idle", "slow"])
def test_ctrl_c_leaves_the_group_quietly(pod: Pod, topic: str, redis_url: str, when: str) -> None:
    group = f"g-{uuid.uuid4().hex[:10]}"
    with pod.client() as client:
        handled = client.produce(topic, "k", "before")  # (also creates the topic)
    program = Program(group, topic, str(pod.port), when)
    try:
        wait_until(lambda: any(line.startswith("record ") for line in program.lines), timeout=30)
        if when == "idle":  # handled and committed: the loop waits for more
            with pod.client() as client:
                wait_until(
                    lambda: client.committed(group, topic, handled.partition) > 0, timeout=30
                )
    finally:
        status, errors = program.interrupt()
    assert status == 0 and errors == "", errors
    assert program.lines[0] == "joined 1"
    assert program.lines[1] == f"record {handled.partition} {handled.offset}"
    keys = KEYS.group(group, topic)
    with redis.Redis.from_url(redis_url) as r:
        assert r.hlen(keys.members) == 0  # LEFT: no waiting for the session to expire
        assert r.hget(keys.meta, "generation") == b"2"
    with pod.client() as client:
        committed = client.committed(group, topic, handled.partition)
    # the handled record is committed; the interrupted one is handed out again
    assert committed == (handled.offset + 1 if when == "idle" else 0)
