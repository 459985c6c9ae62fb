"""A high-level consumer-group client: consume a topic with a group in a few lines.

    from adapter.client.group_consumer import GroupConsumer

    def handle(record):
        print(record.partition, record.offset, record.value)

    with GroupConsumer("billing", "orders", host="127.0.0.1", port=9092) as consumer:
        consumer.run(handle)          # until consumer.stop() or Ctrl-C; LEAVEs on exit

Ctrl-C (KeyboardInterrupt) ends ``run`` as ``stop()`` does: it returns, the ``with`` block
LEAVEs the group, and the program ends without a traceback.

What it does for you: JOIN (and JOIN again whenever the group answers GENERATION_MISMATCH),
HEARTBEAT from a background thread over its own connection, CONSUME every owned partition
from the group's committed offset (all partitions in one pipelined round trip), hand each
record to the callback, then COMMIT ``last offset + 1`` per partition, and LEAVE on close.

Delivery is at least once: a record is committed only after the callback returned, so after
a rebalance or a crash the partition's next owner starts at the committed offset and may see
records again that were handled but not yet committed.

Records are `Record`s: V1 CONSUME gives offset and value, so ``key`` is None and
``headers`` empty; ``timestamp`` is the append time read from the offset (``sequence_bits``
must be the pods' ``--sequence-bits``). TLS and AUTH take the options of `Client`
(`adapter.client.client.Endpoint`), for both of its connections.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import socket
import ssl
import threading
import uuid
from collections.abc import Callable

from adapter.client.client import Client, Endpoint
from adapter.client.wire import (
    GroupAssignment,
    Record,
    RequestFailed,
    consume_reply,
    consumed_records,
)
from adapter.v1 import protocol
from mapping.core.codec import DEFAULT_SEQUENCE_BITS, check_sequence_bits

log = logging.getLogger(__name__)

GENERATION_MISMATCH = "GENERATION_MISMATCH"
UNAVAILABLE = "UNAVAILABLE"  # Redis behind the adapter is unreachable: retry later
RETRY_WAIT_S = 0.5


def default_consumer_id() -> str:
    """``<host>-<pid>-<random>``: unique per consumer, a valid name (``[A-Za-z0-9._-]``)."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:200] or "consumer"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class GroupConsumer:
    """One member of ``group`` consuming ``topic`` through the adapter at ``host:port``.

    ``heartbeat_interval_s`` must stay well below the pods' ``--session-timeout-ms``
    (default 10 s; a third of it is a good choice). ``assignor`` is sent with the first JOIN
    only (None: the group's, round_robin for a new group), so members that disagree cannot
    make the group rebalance back and forth. ``on_assign`` is called after every JOIN with
    the new generation and partitions. ``sequence_bits``: the pods' ``--sequence-bits``
    (records' timestamps). ``ssl_context``, ``server_hostname``, ``user``, ``password``: as
    for `Client`; a refused password raises `RequestFailed` ``AUTH_FAILED`` from ``join``,
    ``poll`` and ``run``.
    """

    def __init__(
        self,
        group: str,
        topic: str,
        consumer_id: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        assignor: str | None = None,
        on_assign: Callable[[GroupAssignment], object] | None = None,
        heartbeat_interval_s: float = 3.0,
        idle_wait_s: float = 0.1,
        timeout_s: float = 30.0,
        sequence_bits: int = DEFAULT_SEQUENCE_BITS,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        user: str | None = None,
        password: bytes | str | None = None,
    ) -> None:
        self.group = group
        self.topic = topic
        self.consumer_id = consumer_id or default_consumer_id()
        self.endpoint = Endpoint(
            host, port, timeout_s, ssl_context, server_hostname, user, password
        )
        self.sequence_bits = check_sequence_bits(sequence_bits)
        self.address = (host, port)
        self.heartbeat_interval_s = heartbeat_interval_s
        self.idle_wait_s = idle_wait_s
        self.timeout_s = timeout_s
        self._assignor = assignor
        self._on_assign = on_assign
        self._client: Client | None = None
        self._positions: dict[int, int] = {}  # owned partition -> next offset to CONSUME
        self._lock = threading.Lock()  # guards _generation and _assigned
        self._generation: int | None = None
        self._assigned: list[int] = []
        self._rejoin = threading.Event()  # set by the heartbeat thread on a mismatch
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name=f"heartbeat-{self.consumer_id}", daemon=True
        )
        self._heartbeats.start()

    # --- what a user calls ----------------------------------------------------------------

    @property
    def generation(self) -> int | None:
        with self._lock:
            return self._generation

    @property
    def assignment(self) -> list[int]:
        with self._lock:
            return list(self._assigned)

    def join(self) -> GroupAssignment:
        """JOIN (again) and restart every owned partition at the group's committed offset."""
        self._rejoin.clear()  # before JOIN: a mismatch reported after it means a newer change
        client = self._connection()
        reply = client.join(self.group, self.topic, self.consumer_id, self._assignor)
        self._assignor = None  # later JOINs keep the group's assignor
        self._positions = self._committed(client, reply.assigned)
        with self._lock:
            self._generation, self._assigned = reply.generation, list(reply.assigned)
        log.info(
            "%s joined %s/%s: generation %d, partitions %s",
            self.consumer_id,
            self.group,
            self.topic,
            reply.generation,
            reply.assigned,
        )
        if self._on_assign is not None:
            self._on_assign(reply)
        return reply

    def poll(self) -> list[Record]:
        """The next records of every owned partition (JOINs first when needed); they count
        as handed out: the next poll continues after them."""
        if self.generation is None or self._rejoin.is_set():
            self.join()
        partitions = sorted(self._positions)
        if not partitions:
            return []
        requests = [("CONSUME", f"{self.topic} {p} {self._positions[p]}") for p in partitions]
        responses = self._connection().pipeline(requests)
        records: list[Record] = []
        for partition, response in zip(partitions, responses, strict=True):
            reply = consume_reply(response)
            records += consumed_records(self.topic, partition, reply, self.sequence_bits)
            if reply.next_offset is not None:
                self._positions[partition] = reply.next_offset
        return records

    def commit(self, partition: int, next_offset: int) -> bool:
        """COMMIT ``next_offset`` (last handled + 1). False when the group has moved on (the
        partition may belong to someone else now): the next poll JOINs again."""
        generation = self.generation
        if generation is None:
            return False
        try:
            self._connection().commit(
                self.group, self.topic, self.consumer_id, generation, partition, next_offset
            )
        except RequestFailed as exc:
            if exc.code != GENERATION_MISMATCH:
                raise
            log.info("%s: commit refused (%s), joining again", self.consumer_id, exc.message)
            self._rejoin.set()
            return False
        return True

    def run(self, callback: Callable[[Record], object]) -> None:
        """Hand every record to ``callback`` and commit after each partition's batch, until
        ``stop()`` or Ctrl-C (KeyboardInterrupt: ``run`` returns, the record in hand is not
        committed). An exception from the callback ends the run (nothing more is committed).
        A lost connection or an UNAVAILABLE backend is retried (after a lost connection it
        JOINs again)."""
        self._stopping.clear()
        try:
            self._run(callback)
        except KeyboardInterrupt:
            # Ctrl-C may have cut a request short, its reply unread: the LEAVE that follows
            # (close) goes over a new connection.
            self._disconnect()
            self._stopping.set()
            log.info("%s: interrupted, stopping", self.consumer_id)

    def _run(self, callback: Callable[[Record], object]) -> None:
        while not self._stopping.is_set():
            try:
                records = self.poll()
                if not records:
                    self._stopping.wait(self.idle_wait_s)
                    continue
                self._hand_out(records, callback)
            except RequestFailed as exc:
                if exc.code != UNAVAILABLE:
                    raise
                log.warning("%s: adapter backend unavailable: %s", self.consumer_id, exc)
                self._stopping.wait(RETRY_WAIT_S)
            except (OSError, protocol.ParseError) as exc:
                log.warning(
                    "%s: connection to %s:%d lost: %s", self.consumer_id, *self.address, exc
                )
                self._disconnect()
                self._rejoin.set()
                self._stopping.wait(RETRY_WAIT_S)

    def _hand_out(self, records: list[Record], callback: Callable[[Record], object]) -> None:
        """Call back and commit partition by partition. Whatever is not handed out (the group
        changed, stop(), the callback raised) is fetched again by the next poll."""
        unhandled: dict[int, int] = {}  # partition -> first offset the callback did not finish
        for record in records:
            unhandled.setdefault(record.partition, record.offset)
        try:
            for partition, batch in itertools.groupby(records, key=lambda r: r.partition):
                if self._rejoin.is_set() or self._stopping.is_set():
                    return  # the group changed: the rest may not be ours any more
                for record in batch:
                    callback(record)
                    unhandled[partition] = record.offset + 1
                if not self.commit(partition, unhandled[partition]):
                    return
        finally:
            for partition, offset in unhandled.items():
                if partition in self._positions:
                    self._positions[partition] = offset

    def stop(self) -> None:
        """Make ``run`` return after the record in hand (safe from any thread)."""
        self._stopping.set()

    def close(self, leave: bool = True) -> None:
        """Stop heartbeats and LEAVE the group (its partitions move to the others at once).
        Call it after ``run`` returned (the ``with`` block does)."""
        self.stop()
        self._closed.set()
        self._heartbeats.join(timeout=self.timeout_s)
        if leave:
            self._leave()
        self._disconnect()

    def __enter__(self) -> GroupConsumer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:  # it may have cut a request short: LEAVE over a new connection
            self._disconnect()
        self.close()

    # --- the rest ---------------------------------------------------------------------------

    def _connection(self) -> Client:
        if self._client is None:
            self._client = self.endpoint.client()
        return self._client

    def _disconnect(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
            self._client = None

    def _committed(self, client: Client, partitions: list[int]) -> dict[int, int]:
        requests = [("OFFSET", f"{self.group} {self.topic} {p}") for p in partitions]
        responses = client.pipeline(requests) if requests else []
        positions = {}
        for partition, response in zip(partitions, responses, strict=True):
            if not response.ok:
                raise RequestFailed(response)
            positions[partition] = int(response.fields()["offset"])
        return positions

    def _leave(self) -> None:
        generation = self.generation
        if generation is None:
            return
        args = (self.group, self.topic, self.consumer_id)
        try:
            client = self._connection()
            try:
                client.leave(*args, generation)
            except RequestFailed as exc:
                if exc.message != "stale generation":
                    return  # expired already (unknown member): nothing to leave
                # Still a member at a newer generation: JOIN (no new generation for a current
                # member) to learn it, then LEAVE.
                client.leave(*args, client.join(*args).generation)
        except (OSError, RequestFailed, protocol.ParseError) as exc:
            log.info("%s: LEAVE failed (%s); the session will expire", self.consumer_id, exc)
        with self._lock:
            self._generation, self._assigned = None, []

    def _heartbeat_loop(self) -> None:
        client: Client | None = None
        while not self._closed.wait(self.heartbeat_interval_s):
            generation = self.generation
            if generation is None:
                continue
            try:
                if client is None:
                    client = self.endpoint.client()
                client.heartbeat(self.group, self.topic, self.consumer_id, generation)
            except RequestFailed as exc:
                # A mismatch for the generation we hold now: the group changed, JOIN again.
                if exc.code == GENERATION_MISMATCH and self.generation == generation:
                    self._rejoin.set()
                elif exc.code != GENERATION_MISMATCH:  # AUTH_FAILED, UNAVAILABLE: say so
                    log.warning("%s: heartbeat refused: %s", self.consumer_id, exc)
            except (OSError, protocol.ParseError) as exc:
                log.warning("%s: heartbeat failed: %s", self.consumer_id, exc)
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()
