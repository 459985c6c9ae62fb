"""Per-pod and per-connection limits, kept out of the connection loop so it stays short.

- ``ConnectionSlots``: at most ``--max-connections`` open client connections per pod; one
  more gets ``V1|0|ERR|UNAVAILABLE|too many connections ...`` and is closed (a client may
  retry, or go to another pod).
- ``tune_socket``: TCP keepalive probes, so a peer that vanished (host down, cable pulled,
  NAT entry gone) is detected and its connection closed instead of being kept forever, and
  a send to such a peer fails after the same time (``TCP_USER_TIMEOUT``).
- ``stop_reading_ahead`` (with the server's slices of at most ``--max-in-flight`` lines): a
  connection has at most that many requests being answered at once. The loop answers one
  slice, sends
  its replies, and reads nothing more until that send is done: a client that pipelines
  without reading fills its socket buffers and is then simply not read from, so a pod
  never holds more per connection than one read (64 KiB), one unfinished line (at most
  ``--max-line-bytes``) and one batch of replies (at most max-in-flight replies, each
  bounded by the line limit or ``--consume-max-bytes``).
- The idle timeout (``--idle-timeout-s``) closes a connection that sends nothing for that
  long with nothing outstanding, or whose peer does not take a reply for that long.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket

import anyio
from anyio.abc import AnyByteStream, SocketAttribute

from adapter import protocol
from mapping.errors import UNAVAILABLE

log = logging.getLogger(__name__)


class ConnectionSlots:
    """Counts a pod's open client connections against its maximum (0: no maximum)."""

    def __init__(self, maximum: int = 0) -> None:
        self.maximum = maximum
        self.active = 0

    def try_acquire(self) -> bool:
        if self.maximum and self.active >= self.maximum:
            return False
        self.active += 1
        return True

    def release(self) -> None:
        self.active -= 1

    def refusal(self) -> bytes:
        return protocol.format_error(
            "0", UNAVAILABLE, f"too many connections: this pod allows {self.maximum}"
        )


def timeout_or_inf(seconds: float) -> float:
    """A limit of 0 means "none"."""
    return seconds if seconds > 0 else math.inf


def tune_socket(stream: AnyByteStream, keepalive_s: int) -> None:
    """Turn on TCP keepalive: the first probe after ``keepalive_s`` idle seconds, then
    every third of that, dropped after 3 unanswered probes (0: leave the OS defaults)."""
    if keepalive_s <= 0:
        return
    try:
        sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
    except Exception:  # not a socket (a test's memory stream)
        return
    interval = max(1, keepalive_s // 3)
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]
    for name, value in (
        ("TCP_KEEPIDLE", keepalive_s),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", 3),
        # unacknowledged data to a vanished peer: give up after the same time
        ("TCP_USER_TIMEOUT", (keepalive_s + 3 * interval) * 1000),
    ):
        if hasattr(socket, name):  # Linux has all; macOS lacks some
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    for level, option, value in options:
        try:
            sock.setsockopt(level, option, value)
        except OSError as exc:
            log.debug("setsockopt %s failed: %s", option, exc)


def stop_reading_ahead(stream: object) -> None:
    """Call after each ``receive``: no more bytes are read from the socket until the next.

    anyio's asyncio socket stream pauses its transport only after a ``receive`` that had to
    wait; when data was already queued, reading stays on, and the transport keeps pulling
    everything a client sends into memory while the connection is busy answering. Pausing
    here leaves the bytes in the kernel, whose full buffers then stop the client. (Private
    attributes, looked up defensively: without them, this does nothing.)"""
    inner = getattr(stream, "transport_stream", stream)  # through a TLSStream
    transport = getattr(inner, "_transport", None)
    pause = getattr(transport, "pause_reading", None)
    if pause is not None and not transport.is_closing():
        pause()


async def close_after(stream: AnyByteStream, reply: bytes, linger_s: float = 2.0) -> None:
    """Send a last reply before closing (``line too long``). Closing a socket with unread
    input makes the kernel send a reset, which can destroy the reply before the client
    reads it; so the write side is shut first and what the client still sends is read and
    dropped for a moment (at most 16 MiB)."""
    with anyio.move_on_after(linger_s), contextlib.suppress(anyio.EndOfStream):
        await stream.send(reply)
        with contextlib.suppress(Exception):
            await stream.send_eof()
        dropped = 0
        while dropped < 16 << 20:
            dropped += len(await stream.receive(1 << 16))
