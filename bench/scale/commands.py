"""What Redis did for a row: ``INFO cpu`` and ``INFO commandstats`` of every primary read when
the load processes get the word and when they have all reported, the difference divided by
the records, on both sides of a row. Where the pods cost Redis more per record than the raw
calls, this says how much (CPU) and which commands the difference is made of.

Redis counts a command a script runs under its own name too (a ``kafka/produce.lua`` call:
one ``evalsha``, whose time includes the ``xadd`` of each record, counted again as
``xadd``), so the commands' times overlap; the CPU figure is the whole."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis


@dataclass
class Reading:
    cpu_us: float = 0.0  # user + system CPU of the redis-server processes
    commands: dict[str, tuple[int, int]] = field(default_factory=dict)  # -> (calls, µs)


def read(ports: Iterable[int]) -> Reading:
    """Every primary's CPU and command statistics, summed (``cmdstat_xadd`` -> ``xadd``,
    subcommands as Redis names them: ``client|setname``)."""
    total = Reading()
    for port in ports:
        client = redis.Redis(port=port, socket_timeout=10)
        with contextlib.closing(client):
            cpu, stats = client.info("cpu"), client.info("commandstats")
        total.cpu_us += (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])) * 1e6
        for name, fields in stats.items():
            command = name.removeprefix("cmdstat_")
            calls, usec = total.commands.get(command, (0, 0))
            total.commands[command] = (calls + int(fields["calls"]), usec + int(fields["usec"]))
    return total


def per_record(before: Reading, after: Reading, records: int) -> dict:
    """``{"cpu_us": Redis CPU µs per record, "commands": {command: [calls per record, µs
    per record]}}`` over the window, the commands Redis spent most time in first (``INFO``
    itself, which the reading runs, left out); empty without records."""
    if records <= 0:
        return {}
    used = {}
    for command, (calls, usec) in after.commands.items():
        was_calls, was_usec = before.commands.get(command, (0, 0))
        if command != "info" and calls > was_calls:
            used[command] = [(calls - was_calls) / records, (usec - was_usec) / records]
    ordered = dict(sorted(used.items(), key=lambda item: -item[1][1]))
    return {"cpu_us": (after.cpu_us - before.cpu_us) / records, "commands": ordered}


def summary(costs: dict, top: int = 4) -> str:
    """``CPU 4.10 µs/rec; evalsha 0.05x 3.20 µs, xadd 1x 0.80 µs, ...`` (calls per record
    as a multiplier), or ``-`` when nothing was read."""
    if not costs:
        return "-"
    parts = [f"{name} {calls:.3g}x {usec:.2f}"
             for name, (calls, usec) in list(costs["commands"].items())[:top]]  # fmt: skip
    return f"CPU {costs['cpu_us']:.2f} µs/rec; " + ", ".join(parts)
