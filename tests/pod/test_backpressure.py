"""Backpressure (adapter/backpressure.py): the append budget's accounting as pure logic, and
both front doors' connections pausing their socket while over a bound and resuming as their
requests are answered (in process, with a recording transport)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from adapter.authorizer import Authorizer
from adapter.backpressure import AppendBudget, Share, Trimmer
from adapter.kafka.connection import KafkaConnection
from adapter.kafka.protocol import encode_request
from adapter.kafka.versions import PRODUCE
from adapter.settings import Settings
from tests.support.kafka import batch, produce_body


class Resumes:
    """A connection's stand-in: records when the budget gives it its turn, and the requests
    it starts (into ``started``, shared by the stand-ins of one test)."""

    def __init__(
        self, budget: AppendBudget, name: str, log: list[str], started: list[Any] | None = None
    ) -> None:
        self.name, self.log = name, log
        self.share: Share = budget.share(self.resume)
        self.wants: list[int] = []  # sizes of its requests not started yet
        self.budget = budget
        self.started = started if started is not None else []

    def resume(self) -> None:
        self.log.append(self.name)
        self.pump()

    def pump(self) -> None:
        while self.wants and self.budget.try_take(self.share, self.wants[0]):
            self.started.append((self, self.wants.pop(0)))


def test_a_connection_is_held_at_its_own_bound_but_always_gets_one_request() -> None:
    budget = AppendBudget(pod_bytes=0, connection_bytes=100)
    share = budget.share(lambda: None)
    assert budget.try_take(share, 60)
    assert budget.try_take(share, 40)
    assert not budget.try_take(share, 1)  # at its bound: waits for its own answers
    assert not budget.waiting  # (not queued: nothing of the pod's holds it)
    budget.give(share, 60)
    budget.give(share, 40)
    assert budget.try_take(share, 500)  # one request, however large, when none is open
    assert (share.in_flight, budget.in_flight) == (500, 500)


def test_the_pod_bound_queues_connections_and_wakes_them_in_order() -> None:
    budget = AppendBudget(pod_bytes=100, connection_bytes=0)
    log: list[str] = []
    a, b, c = (Resumes(budget, name, log) for name in "abc")
    assert budget.try_take(a.share, 100)
    b.wants, c.wants = [10], [10]
    b.pump()
    c.pump()
    assert [s for s in budget.waiting] == [b.share, c.share]
    assert not budget.try_take(a.share, 1)  # others wait: a takes its place behind them
    budget.give(a.share, 100)
    assert log == ["b", "c", "a"] and not budget.waiting
    assert budget.in_flight == 20 and not b.wants and not c.wants


def test_a_waiting_connection_keeps_its_place() -> None:
    """A connection pumped again while it waits (more data, its own answers) is neither
    queued twice nor let ahead of the others."""
    budget = AppendBudget(pod_bytes=100)
    log: list[str] = []
    a, b, c = (Resumes(budget, name, log) for name in "abc")
    assert budget.try_take(a.share, 100)
    b.wants, c.wants = [10], [10]
    b.pump()
    c.pump()
    b.pump()
    assert list(budget.waiting) == [b.share, c.share] and log == []
    budget.give(a.share, 100)
    assert log == ["b", "c"] and budget.in_flight == 20


def test_turns_share_bytes_not_requests() -> None:
    """Deficit round robin: under a full pod, a connection of large requests and one of
    small requests get the same bytes through."""
    budget = AppendBudget(pod_bytes=1000, quantum=1000)
    log: list[str] = []
    started: list[tuple[Resumes, int]] = []  # open requests, oldest first
    big = Resumes(budget, "big", log, started)
    small = Resumes(budget, "small", log, started)
    filler = budget.share(lambda: None)
    assert budget.try_take(filler, 1000)
    big.wants = [500] * 1000
    small.wants = [50] * 10_000
    big.pump()
    small.pump()
    budget.give(filler, 1000)
    through: Counter[str] = Counter()
    for _ in range(2000):  # answer the oldest open request, again and again
        one, size = started.pop(0)
        through[one.name] += size
        budget.give(one.share, size)
    assert budget.in_flight <= 1000 + budget.quantum
    assert 0.9 < through["big"] / through["small"] < 1.1, through


def test_a_closed_connection_loses_its_turn() -> None:
    budget = AppendBudget(pod_bytes=10)
    log: list[str] = []
    a, b = Resumes(budget, "a", log), Resumes(budget, "b", log)
    assert budget.try_take(a.share, 10)
    b.wants = [5]
    b.pump()
    budget.forget(b.share)
    budget.give(a.share, 10)
    assert log == [] and not budget.waiting


def test_no_bounds_admit_everything() -> None:
    budget = AppendBudget()
    share = budget.share(lambda: None)
    assert all(budget.try_take(share, 1 << 30) for _ in range(10))


def test_memory_is_given_back_once_idle_after_a_burst(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapter import backpressure

    monkeypatch.setattr(backpressure, "TRIM_DELAY_S", 0.01)
    trims: list[int] = []
    monkeypatch.setattr(backpressure, "_load_malloc_trim", lambda: trims.append)

    async def main() -> None:
        budget = AppendBudget(pod_bytes=1 << 30)
        trimmer = Trimmer(asyncio.get_running_loop(), budget)
        share = budget.share(lambda: None)
        budget.try_take(share, 1000)  # a small burst: nothing to give back
        budget.give(share, 1000)
        await asyncio.sleep(0.05)
        assert trimmer.trims == 0
        budget.try_take(share, backpressure.TRIM_AFTER_BYTES)
        budget.give(share, backpressure.TRIM_AFTER_BYTES)
        await asyncio.sleep(0.05)
        assert trimmer.trims == 1 and trims == [0]
        trimmer.close()

    asyncio.run(main())


# --- connections: reading pauses over a bound and resumes -----------------------------------


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0
        self.written: list[bytes] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def settle() -> None:
    """Let every callback and task step that is ready run (answers, done callbacks, the
    next requests' first steps)."""
    for _ in range(10):
        await asyncio.sleep(0)


def _held(answers: list[asyncio.Future[Any]]) -> Callable[..., Awaitable[Any]]:
    """A PRODUCE handler (either door's) that waits until the test answers it: the append
    "in Redis"."""

    async def produce(_context: Any, _request: Any) -> Any:
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        answers.append(answer)
        return await answer

    return produce


def _connected(connection: asyncio.Protocol) -> Transport:
    transport = Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return transport


def _produce_frame(correlation_id: int, values: int) -> bytes:
    body = produce_body("t", 0, batch([b"v" * 100] * values), acks=0)
    return encode_request(PRODUCE, 9, body, correlation_id, "test")


def test_a_kafka_connection_over_its_bound_stops_reading_and_resumes() -> None:
    async def main() -> None:
        answers: list[asyncio.Future[None]] = []  # acks=0: answered None, no response
        frames = [_produce_frame(i, 20) for i in range(3)]
        budget = AppendBudget(pod_bytes=0, connection_bytes=2 * len(frames[0]))
        connection = KafkaConnection(
            None, {PRODUCE.key: _held(answers)}, max_request_bytes=1 << 20, budget=budget
        )
        transport = _connected(connection)
        connection.data_received(b"".join(frames))
        await settle()
        assert len(answers) == 2  # the third waits: two are at the connection's bound
        assert transport.paused
        answers[0].set_result(None)
        await settle()
        assert len(answers) == 3 and not transport.paused  # started, and reading again
        for answer in answers[1:]:
            answer.set_result(None)
        await settle()
        assert budget.in_flight == 0

    asyncio.run(main())


def test_a_kafka_connection_waits_its_turn_under_the_pod_bound() -> None:
    async def main() -> None:
        answers: list[asyncio.Future[None]] = []
        frame = _produce_frame(1, 20)
        budget = AppendBudget(pod_bytes=len(frame), connection_bytes=0)
        handlers = {PRODUCE.key: _held(answers)}
        connections = [
            KafkaConnection(None, handlers, max_request_bytes=1 << 20, budget=budget)
            for _ in range(2)
        ]
        transports = [_connected(connection) for connection in connections]
        connections[0].data_received(frame)
        connections[1].data_received(frame)
        await settle()
        assert len(answers) == 1 and transports[1].paused and not transports[0].paused
        answers[0].set_result(None)
        await settle()
        assert len(answers) == 2 and not transports[1].paused
        answers[1].set_result(None)
        await settle()

    asyncio.run(main())


def test_a_v1_connection_waits_its_turn_under_the_pod_bound() -> None:
    from adapter.v1.connection import Connection
    from adapter.v1.handlers import Context

    async def main() -> None:
        answers: list[asyncio.Future[str]] = []
        context = Context(
            SimpleNamespace(settings=Settings(), authorizer=Authorizer()), starters={}
        )  # type: ignore[arg-type]
        line = b"V1|1|PRODUCE|t k:" + b"v" * 100 + b"\n"
        budget = AppendBudget(pod_bytes=len(line), connection_bytes=0)
        handlers = {"PRODUCE": _held(answers)}
        connections = [Connection(context, handlers, budget=budget) for _ in range(2)]
        transports = [_connected(connection) for connection in connections]
        connections[0].data_received(line)
        connections[1].data_received(line)
        await settle()
        assert len(answers) == 1 and transports[1].paused
        answers[0].set_result("partition=0 offset=1 hw=1")
        await settle()
        assert transports[0].written == [b"V1|1|OK|partition=0 offset=1 hw=1\n"]
        assert len(answers) == 2 and not transports[1].paused
        answers[1].set_result("partition=0 offset=2 hw=2")
        await settle()
        assert budget.in_flight == 0 and transports[1].written

    asyncio.run(main())


def test_a_v1_slice_stops_at_the_connection_bound() -> None:
    from adapter.v1.connection import Connection
    from adapter.v1.handlers import Context

    async def main() -> None:
        started: list[str] = []

        async def produce(_context: Any, argv: list[str]) -> str:
            started.append(argv[1])
            return "ok"

        context = Context(
            SimpleNamespace(settings=Settings(), authorizer=Authorizer()), starters={}
        )  # type: ignore[arg-type]
        lines = [b"V1|%d|PRODUCE|t k:%s\n" % (i, b"v" * 100) for i in range(10)]
        budget = AppendBudget(pod_bytes=0, connection_bytes=3 * len(lines[0]))
        connection = Connection(context, {"PRODUCE": produce}, budget=budget)
        transport = _connected(connection)
        connection.data_received(b"".join(lines))
        await settle()
        replies = b"".join(transport.written).count(b"|OK|")
        assert replies == 10 and len(transport.written) >= 4  # slices of at most 3 lines

    asyncio.run(main())
