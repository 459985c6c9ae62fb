"""A small V1 client, sync and asyncio, that pipelines requests.

    with Client("127.0.0.1", 9092) as client:
        client.produce("orders", b"user1", b"created")      # -> ProduceReply
        replies = client.pipeline([("PRODUCE", "orders k:v"), ("PING", "")])
        client.consume("orders", 2, 0)                      # -> ConsumeReply

Keys and values are bytes (str is UTF-8 encoded) and are percent-escaped on the wire, so
any byte string round-trips. An ERR reply raises `RequestFailed` from the convenience
methods; `request` and `pipeline` return raw `Response`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from adapter.v1 import protocol
from adapter.v1.escaping import escape, unescape

# Pipelines up to this size are sent before reading; larger ones are sent while reading.
_SEND_INLINE = 1 << 14


class RequestFailed(Exception):
    def __init__(self, response: protocol.Response) -> None:
        super().__init__(f"{response.code}: {response.message}")
        self.code = response.code
        self.message = response.message
        self.response = response


@dataclass(frozen=True, slots=True)
class ProduceReply:
    partition: int
    offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class ConsumeReply:
    records: list[tuple[int, bytes]]
    high_watermark: int

    @property
    def next_offset(self) -> int | None:
        """Where the next CONSUME starts (None when nothing was returned)."""
        return self.records[-1][0] + 1 if self.records else None


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """JOIN / SYNC: the group's generation and this member's partitions."""

    generation: int
    assigned: list[int]


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def produce_args(topic: str, key: bytes | str, value: bytes | str, acks: str = "1") -> str:
    return f"{topic} {escape(_bytes(key), also=':')}:{escape(_bytes(value))} acks={acks}"


def auth_args(user: str, password: bytes | str) -> str:
    """The password is percent-escaped, so it may hold any byte, spaces included."""
    return f"{user} {escape(_bytes(password))}"


def ok(response: protocol.Response) -> dict[str, str]:
    if not response.ok:
        raise RequestFailed(response)
    return response.fields()


def produce_reply(response: protocol.Response) -> ProduceReply:
    fields = ok(response)
    return ProduceReply(int(fields["partition"]), int(fields["offset"]), int(fields["hw"]))


def consume_reply(response: protocol.Response) -> ConsumeReply:
    fields = ok(response)
    records = []
    for item in filter(None, fields["messages"].split(",")):
        offset, _, value = item.partition(":")
        records.append((int(offset), unescape(value)))
    return ConsumeReply(records, int(fields["hw"]))


def assignment_reply(response: protocol.Response) -> GroupAssignment:
    fields = ok(response)
    assigned = protocol.parse_list(fields["assigned"])
    return GroupAssignment(int(fields["generation"]), assigned)


def join_args(group: str, topic: str, consumer_id: str, assignor: str | None = None) -> str:
    suffix = f" assignor={assignor}" if assignor else ""
    return f"{group} {topic} {consumer_id}{suffix}"


class Client:
    """Blocking client over one TCP connection; ``ssl_context`` (see
    `adapter.client.tls.client_context`) for a pod serving TLS."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9092,
        timeout: float = 30.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            try:
                sock = ssl_context.wrap_socket(sock, server_hostname=server_hostname or host)
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        self._reader = self._sock.makefile("rb")
        self._ids = itertools.count(1)

    def close(self) -> None:
        self._reader.close()
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)

    def read_line(self) -> bytes:
        """The next reply line as the pod sent it."""
        line = self._reader.readline()
        if not line:
            raise ConnectionError("connection closed by the adapter")
        return line

    def read_response(self) -> protocol.Response:
        return protocol.parse_response(self.read_line())

    def pipeline(self, requests: Iterable[tuple[str, str]]) -> list[protocol.Response]:
        """Send every (command, args) request, then read all replies (in request order)."""
        data = b"".join(protocol.format_request(next(self._ids), c, a) for c, a in requests)
        count = data.count(b"\n")
        if len(data) <= _SEND_INLINE:
            self._sock.sendall(data)
            return [self.read_response() for _ in range(count)]
        # A big pipeline is sent by a helper thread while this one reads the replies: sending
        # everything first would deadlock once both directions' socket buffers are full.
        errors: list[BaseException] = []

        def send() -> None:
            try:
                self._sock.sendall(data)
            except BaseException as exc:  # reported after the reads
                errors.append(exc)

        sender = threading.Thread(target=send, name="v1-client-send", daemon=True)
        sender.start()
        try:
            replies = [self.read_response() for _ in range(count)]
        except BaseException:
            # The connection is unusable now; shutting it down also frees a blocked sender.
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            sender.join()
            if errors and not isinstance(errors[0], OSError | ValueError):
                raise errors[0] from None
            raise
        sender.join()
        return replies

    def request(self, command: str, args: str = "") -> protocol.Response:
        return self.pipeline([(command, args)])[0]

    def ping(self) -> str:
        response = self.request("PING")
        ok(response)
        return response.payload

    def auth(self, user: str, password: bytes | str) -> None:
        """AUTH on this connection; `RequestFailed` (AUTH_FAILED) on a wrong password."""
        ok(self.request("AUTH", auth_args(user, password)))

    def produce(
        self, topic: str, key: bytes | str, value: bytes | str, acks: str = "1"
    ) -> ProduceReply:
        return produce_reply(self.request("PRODUCE", produce_args(topic, key, value, acks)))

    def produce_many(
        self, topic: str, records: Sequence[tuple[bytes | str, bytes | str]], acks: str = "1"
    ) -> list[ProduceReply]:
        responses = self.pipeline(("PRODUCE", produce_args(topic, k, v, acks)) for k, v in records)
        return [produce_reply(r) for r in responses]

    def consume(self, topic: str, partition: int, offset: int) -> ConsumeReply:
        return consume_reply(self.request("CONSUME", f"{topic} {partition} {offset}"))

    # Consumer groups: a GENERATION_MISMATCH raises RequestFailed (then JOIN again).

    def join(
        self, group: str, topic: str, consumer_id: str, assignor: str | None = None
    ) -> GroupAssignment:
        return assignment_reply(
            self.request("JOIN", join_args(group, topic, consumer_id, assignor))
        )

    def sync(self, group: str, topic: str, consumer_id: str, generation: int) -> GroupAssignment:
        return assignment_reply(self.request("SYNC", f"{group} {topic} {consumer_id} {generation}"))

    def heartbeat(self, group: str, topic: str, consumer_id: str, generation: int) -> None:
        ok(self.request("HEARTBEAT", f"{group} {topic} {consumer_id} {generation}"))

    def leave(self, group: str, topic: str, consumer_id: str, generation: int) -> None:
        ok(self.request("LEAVE", f"{group} {topic} {consumer_id} {generation}"))

    def commit(
        self,
        group: str,
        topic: str,
        consumer_id: str,
        generation: int,
        partition: int,
        offset: int,
    ) -> None:
        """Store ``offset`` (the next offset to read: last processed + 1) for ``partition``."""
        args = f"{group} {topic} {consumer_id} {generation} {partition} {offset}"
        ok(self.request("COMMIT", args))

    def committed(self, group: str, topic: str, partition: int) -> int:
        """OFFSET: the committed offset (next to read); 0 when nothing is committed."""
        return int(ok(self.request("OFFSET", f"{group} {topic} {partition}"))["offset"])


class AsyncClient:
    """asyncio client over one TCP connection; concurrent calls are pipelined."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._waiting: asyncio.Queue[asyncio.Future[protocol.Response]] = asyncio.Queue()
        self._read_task = asyncio.create_task(self._read_loop())

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = 9092,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> AsyncClient:
        reader, writer = await asyncio.open_connection(
            host,
            port,
            limit=1 << 24,
            ssl=ssl_context,
            server_hostname=(server_hostname or host) if ssl_context is not None else None,
        )
        return cls(reader, writer)

    async def close(self) -> None:
        self._read_task.cancel()
        while not self._waiting.empty():
            future = self._waiting.get_nowait()
            if not future.done():
                future.set_exception(ConnectionError("client closed"))
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except ConnectionError:
            pass

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read_loop(self) -> None:
        error: BaseException = ConnectionError("connection closed by the adapter")
        try:
            while True:
                line = await self._reader.readline()
                if not line:
                    break
                future = await self._waiting.get()
                if not future.done():
                    future.set_result(protocol.parse_response(line))
        except Exception as exc:  # deliver the failure to every waiting caller
            error = exc
        while not self._waiting.empty():
            future = self._waiting.get_nowait()
            if not future.done():
                future.set_exception(error)

    async def pipeline(self, requests: Iterable[tuple[str, str]]) -> list[protocol.Response]:
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[protocol.Response]] = []
        chunks = []
        for command, args in requests:
            chunks.append(protocol.format_request(next(self._ids), command, args))
            future = loop.create_future()
            futures.append(future)
            self._waiting.put_nowait(future)
        if self._read_task.done():
            for future in futures:
                future.cancel()
            raise ConnectionError("connection closed by the adapter")
        self._writer.write(b"".join(chunks))
        await self._writer.drain()
        return list(await asyncio.gather(*futures))

    async def request(self, command: str, args: str = "") -> protocol.Response:
        return (await self.pipeline([(command, args)]))[0]

    async def auth(self, user: str, password: bytes | str) -> None:
        ok(await self.request("AUTH", auth_args(user, password)))

    async def produce(
        self, topic: str, key: bytes | str, value: bytes | str, acks: str = "1"
    ) -> ProduceReply:
        return produce_reply(await self.request("PRODUCE", produce_args(topic, key, value, acks)))

    async def consume(self, topic: str, partition: int, offset: int) -> ConsumeReply:
        return consume_reply(await self.request("CONSUME", f"{topic} {partition} {offset}"))

    # Consumer groups, as on Client.

    async def join(
        self, group: str, topic: str, consumer_id: str, assignor: str | None = None
    ) -> GroupAssignment:
        args = join_args(group, topic, consumer_id, assignor)
        return assignment_reply(await self.request("JOIN", args))

    async def sync(
        self, group: str, topic: str, consumer_id: str, generation: int
    ) -> GroupAssignment:
        args = f"{group} {topic} {consumer_id} {generation}"
        return assignment_reply(await self.request("SYNC", args))

    async def heartbeat(self, group: str, topic: str, consumer_id: str, generation: int) -> None:
        ok(await self.request("HEARTBEAT", f"{group} {topic} {consumer_id} {generation}"))

    async def leave(self, group: str, topic: str, consumer_id: str, generation: int) -> None:
        ok(await self.request("LEAVE", f"{group} {topic} {consumer_id} {generation}"))

    async def commit(
        self,
        group: str,
        topic: str,
        consumer_id: str,
        generation: int,
        partition: int,
        offset: int,
    ) -> None:
        args = f"{group} {topic} {consumer_id} {generation} {partition} {offset}"
        ok(await self.request("COMMIT", args))

    async def committed(self, group: str, topic: str, partition: int) -> int:
        response = await self.request("OFFSET", f"{group} {topic} {partition}")
        return int(ok(response)["offset"])
