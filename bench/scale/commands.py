"""What Redis did for a row, by command: ``INFO commandstats`` of every primary read when the
load processes get the word and when they have all reported, and the difference divided by
the records, on both sides of a row. Where the pods cost Redis more per record than the raw
calls, this says which commands the difference is made of (docs/scale.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import redis

# command -> (calls, microseconds inside Redis)
Stats = dict[str, tuple[int, int]]


def read(ports: Iterable[int]) -> Stats:
    """Every primary's ``INFO commandstats``, summed by command (``cmdstat_xadd`` -> ``xadd``,
    subcommands as Redis names them: ``client|setname``)."""
    total: Stats = {}
    for port in ports:
        client = redis.Redis(port=port, socket_timeout=10)
        with contextlib.closing(client):
            info = client.info("commandstats")
        for name, fields in info.items():
            command = name.removeprefix("cmdstat_")
            calls, usec = total.get(command, (0, 0))
            total[command] = (calls + int(fields["calls"]), usec + int(fields["usec"]))
    return total


def per_record(before: Stats, after: Stats, records: int) -> dict[str, list[float]]:
    """command -> [calls per record, µs per record] over the window, the commands Redis
    spent most time in first (``INFO`` itself, which the reading runs, left out)."""
    if records <= 0:
        return {}
    used = {}
    for command, (calls, usec) in after.items():
        was_calls, was_usec = before.get(command, (0, 0))
        if command != "info" and calls > was_calls:
            used[command] = [(calls - was_calls) / records, (usec - was_usec) / records]
    return dict(sorted(used.items(), key=lambda item: -item[1][1]))


def summary(costs: dict[str, list[float]], top: int = 4) -> str:
    """``4.1 µs/rec: evalsha 0.05x 3.2 µs, publish 0.05x 0.4 µs, ...`` (calls per record
    written as a multiplier), or ``-`` when nothing was read."""
    if not costs:
        return "-"
    total = sum(usec for _, usec in costs.values())
    parts = [f"{name} {calls:.3g}x {usec:.2f}" for name, (calls, usec) in list(costs.items())[:top]]
    return f"{total:.2f} µs/rec: " + ", ".join(parts)
