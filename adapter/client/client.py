"""A small V1 client, sync and asyncio, that pipelines requests.

    with Client("127.0.0.1", 9092) as client:
        client.produce("orders", b"user1", b"created")      # -> ProduceReply
        replies = client.pipeline([("PRODUCE", "orders k:v"), ("PING", "")])
        client.consume("orders", 2, 0)                      # -> ConsumeReply

TLS and AUTH are the options of `Endpoint`. Keys and values are bytes (str is UTF-8
encoded), percent-escaped on the wire by `adapter.client.wire`. An ERR reply raises
`RequestFailed` from the convenience methods; `request` and `pipeline` return raw
`Response`s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import ssl
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from adapter.client.wire import (
    AcquiredRecord,
    ConsumeReply,
    GroupAssignment,
    ProduceReply,
    RequestFailed,
    ShareAcquireReply,
    assignment_reply,
    auth_args,
    consume_reply,
    join_args,
    ok,
    produce_args,
    produce_reply,
    share_ack_args,
    share_ack_reply,
    share_acquire_args,
    share_acquire_reply,
    share_leave_reply,
)
from adapter.v1 import protocol

__all__ = [
    "AcquiredRecord",
    "AsyncClient",
    "Client",
    "ConsumeReply",
    "Endpoint",
    "GroupAssignment",
    "ProduceReply",
    "RequestFailed",
    "ShareAcquireReply",
    "consume_reply",
    "produce_args",
    "produce_reply",
]

# Pipelines up to this size are sent before reading; larger ones are sent while reading.
_SEND_INLINE = 1 << 14


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A pod and how to reach it: the connection options `Client`, `AsyncClient`, `Producer`
    and `GroupConsumer` share, and the one place their connections are opened.

    - ``ssl_context``: TLS, for a pod serving TLS; `adapter.client.tls.client_context` makes
      one from the CA that signed the pod's certificate, a client certificate and key (pods
      with ``--tls-client-ca``), or ``insecure=True`` (tests only: no verification);
    - ``server_hostname``: the name the pod's certificate must carry (default ``host``);
    - ``user``, ``password``: AUTH before anything else on every connection (pods with
      ``--auth-file``/``--auth-redis``); a wrong one raises `RequestFailed` ``AUTH_FAILED``.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    timeout: float = 30.0
    ssl_context: ssl.SSLContext | None = None
    server_hostname: str | None = None
    user: str | None = None
    password: bytes | str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password go together")

    def open_socket(self) -> socket.socket:
        """A connected socket (TLS done when ``ssl_context`` is set), not yet authenticated."""
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is None:
            return sock
        try:
            return self.ssl_context.wrap_socket(
                sock, server_hostname=self.server_hostname or self.host
            )
        except BaseException:
            sock.close()
            raise

    async def open_streams(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """`open_socket` for asyncio (the blocking ``timeout`` does not apply)."""
        return await asyncio.open_connection(
            self.host,
            self.port,
            limit=1 << 24,
            ssl=self.ssl_context,
            server_hostname=(self.server_hostname or self.host) if self.ssl_context else None,
        )

    def client(self) -> Client:
        """A new `Client` connected (and authenticated) to this pod."""
        return Client(
            self.host,
            self.port,
            self.timeout,
            ssl_context=self.ssl_context,
            server_hostname=self.server_hostname,
            user=self.user,
            password=self.password,
        )


class Client:
    """Blocking client over one TCP connection. The keyword options (TLS, AUTH) are those
    of `Endpoint`: with ``user`` the connection is authenticated before the constructor
    returns."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9092,
        timeout: float = 30.0,
        *,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        user: str | None = None,
        password: bytes | str | None = None,
    ) -> None:
        endpoint = Endpoint(host, port, timeout, ssl_context, server_hostname, user, password)
        self._sock = endpoint.open_socket()
        self._reader = self._sock.makefile("rb")
        self._ids = itertools.count(1)
        if endpoint.user is not None and endpoint.password is not None:
            try:
                self.auth(endpoint.user, endpoint.password)
            except BaseException:
                self.close()
                raise

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

    # Share groups (KIP-932), beside Kafka's ShareConsumers: each record to one member at a
    # time, acknowledged by (partition, offset) before its lock runs out.

    def share_acquire(
        self, group: str, topic: str, consumer_id: str, max_records: int | None = None
    ) -> ShareAcquireReply:
        """Join the share group if needed (renewing the member's session otherwise) and
        acquire up to ``max_records`` records (the pod's default: 100)."""
        args = share_acquire_args(group, topic, consumer_id, max_records)
        return share_acquire_reply(self.request("SHARE_ACQUIRE", args))

    def share_ack(
        self,
        group: str,
        topic: str,
        consumer_id: str,
        partition: int,
        offsets: Iterable[int],
        kind: str = "accept",
    ) -> int:
        """Accept, release or reject records this member holds; `RequestFailed`
        INVALID_RECORD_STATE when it holds some of them no longer."""
        args = share_ack_args(group, topic, consumer_id, partition, offsets, kind)
        return share_ack_reply(self.request("SHARE_ACK", args))

    def share_leave(self, group: str, topic: str, consumer_id: str) -> bool:
        """Leave the share group; the records the member holds go to the others at once."""
        return share_leave_reply(self.request("SHARE_LEAVE", f"{group} {topic} {consumer_id}"))


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
        user: str | None = None,
        password: bytes | str | None = None,
    ) -> AsyncClient:
        """Connect with the options of `Endpoint` (with ``user``: authenticated)."""
        endpoint = Endpoint(
            host,
            port,
            ssl_context=ssl_context,
            server_hostname=server_hostname,
            user=user,
            password=password,
        )
        client = cls(*await endpoint.open_streams())
        if endpoint.user is not None and endpoint.password is not None:
            try:
                await client.auth(endpoint.user, endpoint.password)
            except BaseException:
                await client.close()
                raise
        return client

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

    # Share groups, as on Client.

    async def share_acquire(
        self, group: str, topic: str, consumer_id: str, max_records: int | None = None
    ) -> ShareAcquireReply:
        args = share_acquire_args(group, topic, consumer_id, max_records)
        return share_acquire_reply(await self.request("SHARE_ACQUIRE", args))

    async def share_ack(
        self,
        group: str,
        topic: str,
        consumer_id: str,
        partition: int,
        offsets: Iterable[int],
        kind: str = "accept",
    ) -> int:
        args = share_ack_args(group, topic, consumer_id, partition, offsets, kind)
        return share_ack_reply(await self.request("SHARE_ACK", args))

    async def share_leave(self, group: str, topic: str, consumer_id: str) -> bool:
        args = f"{group} {topic} {consumer_id}"
        return share_leave_reply(await self.request("SHARE_LEAVE", args))
