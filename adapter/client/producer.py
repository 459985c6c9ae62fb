"""A batching producer: ``send`` returns at once; a background thread sends what queued up
as one pipeline (one round trip for the whole batch) and resolves each record's future.

    from adapter.client.producer import Producer

    with Producer("127.0.0.1", 9092, acks="all") as producer:
        for i in range(10_000):
            producer.send("orders", f"user{i % 100}", f"event {i}")
        producer.flush()                       # everything sent so far is answered
    reply = producer.send(...).result()        # -> ProduceReply(partition, offset, hw)

A batch goes out when it holds ``max_batch`` records or its first record has waited
``linger_s`` (or on ``flush``/``close``). A record the adapter refuses fails its own future
with ``RequestFailed``; a lost connection fails the batch in flight (records of a failed
batch may or may not have been written) and the next batch reconnects.

TLS and AUTH take the options of `Client` (`adapter.client.client.Endpoint`); the producer
connects with its first batch, so a refused password (``RequestFailed`` ``AUTH_FAILED``) or
certificate fails that batch's futures, and every later batch tries again. V1 records carry
a key and a value only: no headers and no timestamp of the producer's own (the offset holds
the append time).
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from concurrent.futures import Future

from adapter.client.client import Client, Endpoint
from adapter.client.wire import ProduceReply, RequestFailed, produce_args, produce_reply

log = logging.getLogger(__name__)

_Pending = tuple[str, "Future[ProduceReply]"]


class ProducerClosed(Exception):
    pass


class Producer:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 9092,
        *,
        acks: str = "1",
        linger_s: float = 0.005,
        max_batch: int = 1000,
        timeout_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        user: str | None = None,
        password: bytes | str | None = None,
    ) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.endpoint = Endpoint(
            host, port, timeout_s, ssl_context, server_hostname, user, password
        )
        self.address = (host, port)
        self.acks = acks
        self.linger_s = linger_s
        self.max_batch = max_batch
        self.timeout_s = timeout_s
        self._client: Client | None = None
        self._pending: list[_Pending] = []
        self._wakeup = threading.Condition()
        self._flush_requested = False
        self._closed = False
        self._last: Future[ProduceReply] | None = None  # replies come back in order
        self._sender = threading.Thread(target=self._send_loop, name="producer", daemon=True)
        self._sender.start()

    def send(
        self, topic: str, key: bytes | str, value: bytes | str, acks: str | None = None
    ) -> Future[ProduceReply]:
        """Queue one record (any bytes); the future gives its partition, offset and hw."""
        args = produce_args(topic, key, value, acks or self.acks)
        future: Future[ProduceReply] = Future()
        with self._wakeup:
            if self._closed:
                raise ProducerClosed("producer is closed")
            self._pending.append((args, future))
            self._last = future
            if len(self._pending) == 1 or len(self._pending) >= self.max_batch:
                self._wakeup.notify()
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is answered (failures stay in their futures)."""
        with self._wakeup:
            last = self._last
            self._flush_requested = True
            self._wakeup.notify()
        if last is not None:
            try:
                last.exception(timeout)
            except TimeoutError:
                raise
            except Exception:  # a cancelled future: answered as far as flush is concerned
                pass

    def close(self) -> None:
        """Send what is queued, wait for the answers, close the connection."""
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._sender.join()
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_batch(self) -> list[_Pending] | None:
        """Wait for a batch: full, lingered long enough, flushed or closing. None: done."""
        with self._wakeup:
            while not self._pending and not self._closed:
                self._wakeup.wait()
            if not self._pending:
                return None
            deadline = time.monotonic() + self.linger_s
            while (
                len(self._pending) < self.max_batch
                and not self._closed
                and not self._flush_requested
            ):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wakeup.wait(remaining)
            batch, self._pending = (
                self._pending[: self.max_batch],
                self._pending[self.max_batch :],
            )
            if not self._pending:
                self._flush_requested = False
            return batch

    def _send_loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            live = [(args, f) for args, f in batch if f.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                if self._client is None:
                    self._client = self.endpoint.client()
                responses = self._client.pipeline(("PRODUCE", args) for args, _ in live)
            except Exception as exc:  # the sender must never die: every future gets an answer
                log.warning("producer: batch of %d failed: %s", len(live), exc)
                if self._client is not None:
                    self._client.close()
                    self._client = None
                for _, future in live:
                    future.set_exception(_batch_failure(exc))
                continue
            for (_, future), response in zip(live, responses, strict=True):
                try:
                    future.set_result(produce_reply(response))
                except RequestFailed as exc:
                    future.set_exception(exc)


def _batch_failure(exc: Exception) -> Exception:
    """What a failed batch's futures raise: the pod's refusal of the connection (AUTH_FAILED)
    as it is, so that it reads as what it is; anything else as a lost connection."""
    if isinstance(exc, RequestFailed):
        return exc
    failure = ConnectionError(f"produce failed: {exc}")
    failure.__cause__ = exc
    return failure
