"""The raw-Redis load processes of ``python -m bench.scale``: the same script calls and reads
the pods send, straight from redis-py to the primary that holds each key. One connection
per primary; each round sends every primary its share as one pipeline before reading any
reply, so the primaries work at the same time, as under the pods."""

from __future__ import annotations

import time
from typing import Any

from redis.connection import Connection

from bench.scale.harness import Clock, Report

# (index of the primary, the command, the records it appends; 0: count the reply's entries)
Call = tuple[int, tuple, int]
PAGE = 1000  # XRANGE COUNT, as the pods' CONSUME and Fetch pages of small records


class Primaries:
    """A connection to each primary (its scripts loaded), and rounds of pipelines."""

    def __init__(self, ports: list[int], scripts: tuple[str, ...] = ()) -> None:
        self.connections = [Connection(port=port, socket_timeout=120) for port in ports]
        for connection in self.connections:
            connection.connect()
            for source in scripts:
                connection.send_command("SCRIPT", "LOAD", source)
                connection.read_response()

    def exchange(self, grouped: list[list[tuple]]) -> list[list[Any]]:
        """``grouped[i]``'s commands to primary i, every pipeline sent before any is read."""
        for connection, commands in zip(self.connections, grouped, strict=True):
            if commands:
                connection.send_packed_command(connection.pack_commands(commands), False)
        return [
            [connection.read_response() for _ in commands]
            for connection, commands in zip(self.connections, grouped, strict=True)
        ]

    def close(self) -> None:
        for connection in self.connections:
            connection.disconnect()


def calls(ports: list[int], scripts: tuple[str, ...], work: list[Call], records: int,
          seconds: float, per_round: int, ready: Any, go: Any) -> Report:  # fmt: skip
    """``work`` round and round, ``per_round`` calls a round, until ``records`` records
    (0: no count) and ``seconds`` (0: no clock) are done."""
    primaries = Primaries(ports, scripts)
    ready.set()
    go.wait()
    clock = Clock()
    done = position = 0
    end = clock.wall + seconds
    while (records and done < records) or (seconds and time.monotonic() < end):
        grouped: list[list[tuple]] = [[] for _ in ports]
        counted: list[list[int]] = [[] for _ in ports]
        queued = done
        for _ in range(per_round):
            if records and queued >= records:
                break  # (the last call may carry a few more than asked: a whole batch)
            node, command, appended = work[position % len(work)]
            queued += appended
            grouped[node].append(command)
            counted[node].append(appended)
            position += 1
        for replies, appended in zip(primaries.exchange(grouped), counted, strict=True):
            done += sum(n or len(reply) for n, reply in zip(appended, replies, strict=True))
    report = clock.report(done)
    primaries.close()
    return report


def read_logs(ports: list[int], logs: list[tuple[int, str]], ready: Any, go: Any) -> Report:
    """Every stream of ``logs`` (index of its primary, key) from its start to its end in
    XRANGE pages, a page of each unfinished log a round."""
    primaries = Primaries(ports)
    ready.set()
    go.wait()
    clock = Clock()
    after = {log: "-" for _, log in logs}
    pending = list(logs)
    done = 0
    while pending:
        grouped: list[list[tuple]] = [[] for _ in ports]
        order: list[list[str]] = [[] for _ in ports]
        for node, log in pending:
            grouped[node].append(("XRANGE", log, after[log], "+", "COUNT", PAGE))
            order[node].append(log)
        finished = set()
        for replies, names in zip(primaries.exchange(grouped), order, strict=True):
            for log, page in zip(names, replies, strict=True):
                done += len(page)
                if len(page) < PAGE:
                    finished.add(log)
                else:
                    after[log] = b"(" + page[-1][0]
        pending = [(node, log) for node, log in pending if log not in finished]
    report = clock.report(done)
    primaries.close()
    return report
