"""The idle load processes of ``python -m bench.scale``: clients that hold the pods' resources
while asking for nothing new, so the rows show what the pods and Redis spend on them."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any

from bench.scale.harness import Clock, Report


def nothing(seconds: float, ready: Any, go: Any) -> Report:
    """No client at all: the pods' and Redis' own background work over ``seconds``."""
    ready.set()
    go.wait()
    clock = Clock()
    time.sleep(seconds)
    return clock.report(0)


def consumer(bootstrap: str, topic: str, group: str, index: int, assigned: Any,
             seconds: float, ready: Any, go: Any) -> Report:  # fmt: skip
    """A member of ``group`` caught up on ``topic`` (nothing to read): it long-polls Fetch on
    every partition it holds for ``seconds``. ``assigned[index]`` counts its partitions once
    librdkafka fetches from each (its statistics: fetch_state "active"), after the start-up
    work of finding positions (ListOffsets, a request per partition); records it gets anyway
    are counted."""
    from confluent_kafka import Consumer

    mine: list[Any] = []
    fetching = [0]

    def on_assign(consumer: Any, partitions: list[Any]) -> None:
        consumer.assign(partitions)
        mine[:] = partitions

    def on_revoke(consumer: Any, partitions: list[Any]) -> None:
        consumer.unassign()
        mine.clear()

    def stats(text: str) -> None:
        partitions = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {})
        fetching[0] = sum(1 for p in partitions.values() if p.get("fetch_state") == "active")

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "latest",
        "enable.auto.commit": False, "statistics.interval.ms": 250, "stats_cb": stats,
    })  # fmt: skip
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    ready.set()
    while not go.is_set():
        consumer.poll(0.05)
        assigned[index] = len(mine) if mine and fetching[0] >= len(mine) else 0
    clock = Clock()
    got = errors = 0
    while time.monotonic() < clock.wall + seconds:
        message = consumer.poll(0.1)
        if message is not None:
            got, errors = (got + 1, errors) if message.error() is None else (got, errors + 1)
    report = clock.report(got, errors=errors)
    consumer.close()
    return report


def connections(ports: tuple[int, ...], count: int, seconds: float, ready: Any,
                go: Any) -> Report:  # fmt: skip
    """``count`` V1 connections over the pods (each answers a PING first: accepted, not
    queued), then silent for ``seconds``; its report's records: the connections still open
    at the end."""
    opened = []
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=30)
            opened.append(sock)
            sock.sendall(b"V1|1|PING|\n")
        for sock in opened:
            if b"|OK|pong" not in sock.recv(256):
                raise RuntimeError("a connection was not accepted")
        ready.set()
        go.wait()
        clock = Clock()
        time.sleep(seconds)
        alive = sum(_open(sock) for sock in opened)
        return clock.report(alive, errors=count - alive)
    finally:
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.close()


def _open(sock: socket.socket) -> bool:
    """The pod has not closed it (nothing to read, no end of stream)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""  # (data would be unexpected, but the connection lives)
    except BlockingIOError:
        return True
    except OSError:
        return False
