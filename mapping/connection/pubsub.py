"""The pod's one pub/sub connection (`Subscriber`), shared by every wait that wakes on a
notification: the waits of mapping/connection/waits.py (acks=all, Kafka Fetch long-polls, group
barriers), the replicator's idle followers (mapping/replication/replicator.py), and anything else
that
must not poll Redis."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from mapping.connection.cluster import pubsub_connection

log = logging.getLogger(__name__)

Handler = Callable[[bytes], None]


class Subscriber:
    """One pub/sub connection per pod, multiplexing every channel the pod listens to.

    ``subscribe`` returns once Redis confirmed the subscription, so a caller can then read the
    current state and miss no later change. After a lost connection every channel is
    subscribed again and the ``on_reconnect`` callbacks run (notifications may have been
    missed while it was down).

    A connection that goes silent is lost too: an idle connection sends PING every
    ``keepalive_s`` and is dropped when nothing at all came back for ``silent_s``. Otherwise a
    subscriber on a node that stopped (paused, cut off) and was failed over would wait
    forever for notifications that now go elsewhere: every acks=all waiter and replicator
    wake-up of the pod with it.
    """

    def __init__(
        self,
        client: Redis,
        home_channel: str,
        *,
        keepalive_s: float = 1.0,
        silent_s: float | None = None,
    ) -> None:
        self._client = client
        self.keepalive_s = keepalive_s
        if silent_s is None:  # the client's own reply timeout (the pod's --redis-timeout-ms)
            timeout = _socket_timeout(client)
            silent_s = max(2 * keepalive_s, timeout or 0.0)
        self.silent_s = silent_s
        self.reconnects = 0
        # Connections lost so far: what a reader remembered while notifications could come
        # is stale once this moved (mapping/replication/hw_views.py).
        self.losses = 0
        # Always subscribed, so the connection is in pub/sub mode from the start.
        self._home = home_channel.encode()
        self._handlers: dict[bytes, list[Handler]] = {}
        self._active: set[bytes] = set()
        self._unconfirmed: dict[bytes, int] = {}  # SUBSCRIBEs sent, not yet confirmed
        self._waiting: dict[bytes, list[asyncio.Future[None]]] = {}
        self._conn = None
        self._callbacks: list[Callable[[], None]] = []
        self.messages_received = 0

    def on_reconnect(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    async def subscribe(self, channel: str, handler: Handler) -> None:
        """Add ``handler`` to the channel's handlers (several owners may share a channel:
        acks=all waiters and Kafka fetches both listen to hw channels)."""
        key = channel.encode()
        handlers = self._handlers.setdefault(key, [])
        if handler not in handlers:
            handlers.append(handler)
        if key in self._active:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append(future)
        await self._send("SUBSCRIBE", key)
        await future

    async def unsubscribe(self, channel: str, handler: Handler | None = None) -> None:
        """Remove ``handler`` (None: every handler); the channel is left when none is left."""
        key = channel.encode()
        handlers = self._handlers.get(key, [])
        if handler is not None and handler in handlers:
            handlers.remove(handler)
        if handler is not None and handlers:
            return
        self._handlers.pop(key, None)
        self._active.discard(key)
        for future in self._waiting.pop(key, []):
            future.cancel()
        await self._send("UNSUBSCRIBE", key)

    async def _send(self, command: str, *channels: bytes) -> None:
        conn = self._conn
        if conn is None:
            return  # the reader subscribes every channel in _handlers when it connects
        if command == "SUBSCRIBE":
            for key in channels:
                self._unconfirmed[key] = self._unconfirmed.get(key, 0) + 1
        try:
            await conn.send_command(command, *channels, check_health=False)
        except (OSError, RedisError) as exc:  # the reader sees it too and reconnects
            log.debug("pub/sub send failed: %s", exc)

    def _confirmed(self, key: bytes) -> None:
        left = self._unconfirmed.get(key, 1) - 1
        self._unconfirmed[key] = left
        # After SUBSCRIBE, UNSUBSCRIBE, SUBSCRIBE only the last confirmation counts.
        if left <= 0 and key in self._handlers:
            self._active.add(key)
            for future in self._waiting.pop(key, []):
                if not future.done():
                    future.set_result(None)

    def _dispatch(self, message: object) -> None:
        if not isinstance(message, list) or len(message) < 3:
            return
        kind, channel = message[0], message[1]
        if kind == b"message":
            self.messages_received += 1
            for handler in self._handlers.get(channel, ()):
                try:
                    handler(message[2])
                except Exception:
                    log.exception("pub/sub handler failed on %r", channel)
        elif kind == b"subscribe":
            self._confirmed(channel)

    async def run(self) -> None:
        backoff = 0.1
        first = True
        while True:
            conn = None
            try:
                conn = pubsub_connection(self._client)
                await conn.connect()
                self._active.clear()
                channels = [self._home, *self._handlers]
                self._unconfirmed = dict.fromkeys(channels, 1)
                self._conn = conn
                await conn.send_command("SUBSCRIBE", *channels, check_health=False)
                if not first:
                    self.reconnects += 1
                    asyncio.ensure_future(self._after_reconnect(list(self._handlers)))
                first = False
                backoff = 0.1
                silent = 0.0
                while True:
                    # A timeout of its own, not the client's: None when nothing came in
                    # time. push_request: under RESP3 messages are pushes, which the parser
                    # otherwise swallows.
                    message = await conn.read_response(timeout=self.keepalive_s, push_request=True)
                    if message is None:
                        silent += self.keepalive_s
                        if silent >= self.silent_s:
                            raise RedisConnectionError(f"pub/sub connection silent {silent:g}s")
                        # Its answer (or any message) shows the connection still works.
                        await conn.send_command("PING", check_health=False)
                        continue
                    silent = 0.0
                    self._dispatch(message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("pub/sub connection lost (%s); reconnecting", exc)
            finally:
                if self._conn is not None:
                    self.losses += 1
                self._conn = None
                self._active.clear()
                try:
                    if conn is not None:
                        await conn.disconnect()
                except Exception:
                    pass
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    async def _after_reconnect(self, channels: list[bytes]) -> None:
        waits = []
        for key in channels:
            if key not in self._active and key in self._handlers:
                future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
                self._waiting.setdefault(key, []).append(future)
                waits.append(future)
        await asyncio.gather(*waits, return_exceptions=True)
        for callback in self._callbacks:
            callback()


def _socket_timeout(client: Redis | RedisCluster) -> float | None:
    """The reply timeout ``client``'s connections were made with, if any."""
    if isinstance(client, RedisCluster):
        kwargs = client.nodes_manager.connection_kwargs
    else:
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if timeout else None
