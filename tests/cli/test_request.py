"""``adapter request`` (adapter/cli/request.py): the replies as the pod sent them, and an exit
status that says whether any of them was an error."""

from __future__ import annotations

from click.testing import CliRunner

from adapter.cli import main
from tests.support.pods import Pod


def test_exit_status_says_whether_a_reply_was_an_error(pod: Pod, topic: str) -> None:
    port = ["--port", str(pod.port)]
    ok = CliRunner().invoke(main, ["request", *port, "PING", f"CONSUME {topic} 0 0"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines() == ["V1|1|OK|pong", "V1|2|OK|messages= hw=-1"]

    failed = CliRunner().invoke(main, ["request", *port, f"PRODUCE {topic} k:hello world", "PING"])
    assert failed.exit_code == 1, failed.output
    first, second = failed.output.splitlines()
    assert first.startswith("V1|1|ERR|BAD_REQUEST|invalid acks") and "k:hello%20world" in first
    assert second == "V1|2|OK|pong"  # every request is still sent and its reply printed
