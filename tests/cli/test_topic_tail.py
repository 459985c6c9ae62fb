"""``adapter topic tail`` (adapter/cli/topic_tail.py) as an operator runs it: a child process
reading a topic a real pod writes to (confluent-kafka and V1 producers): keys, headers and
values escaped readably, new records followed, aborted transactions never shown, Ctrl-C,
--count, --exit, and its failures in one line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from click.testing import CliRunner
from confluent_kafka import Producer

from adapter.cli import main
from adapter.cli.topic_tail import quoted, quoted_text
from mapping.connection.embedded import free_port
from mapping.core.keys import Keys
from tests.support import ROOT
from tests.support.cli import CliTarget
from tests.support.kafka import produce_delivered
from tests.support.pods import RF1, Pod
from tests.support.waiting import wait_until


@pytest.fixture
def target(redis_url: str) -> Iterator[CliTarget]:
    client = redis.Redis.from_url(redis_url)
    yield CliTarget(redis_url, Keys(f"tail{uuid.uuid4().hex[:8]}"), client)
    client.close()


@pytest.fixture
def pod(target: CliTarget, start_pod) -> Pod:
    return start_pod(target.url, "--key-prefix", target.keys.prefix, *RF1)


class Tail:
    """``python -m adapter topic tail ...`` as a child process; ``lines`` what it printed."""

    def __init__(self, target: CliTarget, *args: str) -> None:
        base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "adapter", "topic", "tail", *args, *base],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.decode().rstrip("\n"))

    def wait_lines(self, count: int) -> list[str]:
        wait_until(lambda: len(self.lines) >= count, timeout=20)
        return self.lines[:count]

    def finish(self, timeout: float = 20) -> tuple[int, str]:
        """(exit status, stderr) once the process ended by itself."""
        status = self.process.wait(timeout)
        self._reader.join(5)
        assert self.process.stderr is not None
        return status, self.process.stderr.read().decode()


def line(partition: int, message, key: str, headers: str, value: str) -> str:  # noqa: ANN001
    return (
        f"partition={partition} offset={message.offset()} timestamp={message.timestamp()[1]} "
        f"key={key} headers=[{headers}] value={value}"
    )


def make_topic(target: CliTarget, name: str, partitions: int) -> None:
    target.cli("topic", "create", name, "--partitions", str(partitions),
               "--replication-factor", "1", "--min-insync-replicas", "1")  # fmt: skip


def test_tail_shows_keys_and_headers_and_follows(target: CliTarget, pod: Pod, topic: str) -> None:
    make_topic(target, topic, 2)
    sent = produce_delivered(pod.bootstrap, topic, [
        (0, b"user-1", b"hello world", [("trace", b"abc"), ("bin", b"\x00\xff")]),
        (1, None, b'line one\nsaid "hi"', []),
    ])  # fmt: skip
    tail = Tail(target, topic, "--from-beginning", "--count", "4")
    assert sorted(tail.wait_lines(2)) == [
        line(0, sent[0], '"user-1"', '"trace"="abc" "bin"="\\x00\\xff"', '"hello world"'),
        line(1, sent[1], "null", "", '"line one\\nsaid \\"hi\\""'),
    ]
    # new records, written after the tail read everything: followed
    more = produce_delivered(pod.bootstrap, topic, [
        (1, b"k\xc3\xa9", None, [("n", None)]),  # a tombstone, a UTF-8 key, a null header
        (0, b"last", b"x", []),
    ])  # fmt: skip
    status, errors = tail.finish()
    assert (status, errors) == (0, "")
    assert sorted(tail.lines[2:]) == [
        line(0, more[1], '"last"', "", '"x"'),
        line(1, more[0], '"ké"', '"n"=null', "null"),
    ]


def test_tail_follows_until_ctrl_c(target: CliTarget, pod: Pod, topic: str) -> None:
    with pod.client() as client:
        first = client.produce(topic, "k", "before")
        tail = Tail(target, topic, "--partition", str(first.partition), "--offset", "0")
        assert tail.wait_lines(1)[0].endswith(' key="k" headers=[] value="before"')
        later = client.produce(topic, "k", "after")
        assert tail.wait_lines(2)[1].startswith(
            f"partition={first.partition} offset={later.offset} timestamp="
        )
    tail.process.send_signal(signal.SIGINT)
    status, errors = tail.finish()
    assert status == 0 and "Traceback" not in errors, errors


def test_tail_never_shows_aborted_records(target: CliTarget, pod: Pod, topic: str) -> None:
    make_topic(target, topic, 1)
    producer = Producer({"bootstrap.servers": pod.bootstrap, "transactional.id": topic})
    producer.init_transactions(20)
    for value, commit in ((b"aborted", False), (b"committed", True)):
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=value, partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(20)
    plain = produce_delivered(pod.bootstrap, topic, [(0, b"k", b"plain", [])])
    tail = Tail(target, topic, "--from-beginning", "--exit", "--format", "json")
    status, errors = tail.finish()
    assert (status, errors) == (0, "")
    records = [json.loads(text) for text in tail.lines]
    assert [r["payload"] for r in records] == ["committed", "plain"]  # no marker, no abort
    assert records[1] == {"topic": topic, "partition": 0, "offset": plain[0].offset(),
                          "ts": plain[0].timestamp()[1], "key": "k", "payload": "plain",
                          "headers": []}  # fmt: skip
    # from the end: nothing there yet, --exit ends at once
    at_end = Tail(target, topic, "--exit")
    assert at_end.finish() == (0, "") and at_end.lines == []


def test_tail_fails_in_one_line(target: CliTarget, pod: Pod, topic: str) -> None:
    base = ["--redis-url", target.url, "--key-prefix", target.keys.prefix]
    unknown = CliRunner().invoke(main, ["topic", "tail", "nothing-here", "--exit", *base])
    assert (unknown.exit_code, unknown.output) == (1, "Error: no topic nothing-here\n")
    make_topic(target, topic, 2)
    outside = CliRunner().invoke(main, ["topic", "tail", topic, "--partition", "2", *base])
    assert (outside.exit_code, outside.output) == (
        1, f"Error: topic {topic} has 2 partitions: no partition 2\n"
    )  # fmt: skip
    down = f"redis://127.0.0.1:{free_port()}/0"
    gone = CliRunner().invoke(main, ["topic", "tail", topic, "--redis-url", down])
    assert gone.exit_code == 1
    (text,) = gone.output.splitlines()
    assert text.startswith(f"Error: cannot reach Redis at {down} (--redis-url, "), text


def test_escapes_read_back_unambiguously() -> None:
    assert quoted(None) == "null"
    assert quoted(b"") == '""'
    assert quoted(b'a "b" \\ c\td\r\n') == '"a \\"b\\" \\\\ c\\td\\r\\n"'
    assert quoted(b"\x00\x1b\x7f") == '"\\x00\\x1b\\x7f"'
    assert quoted("ünï ✓".encode()) == '"ünï ✓"'  # printable UTF-8 stays
    assert quoted(b"\xff\xc3") == '"\\xff\\xc3"'  # not UTF-8: the bytes
    assert quoted("\u2028".encode()) == '"\\u2028"'  # unprintable: its code point
    assert quoted_text("a=b") == '"a=b"'
