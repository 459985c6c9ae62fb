"""Kafka framing, sans-I/O: every request and response is an int32 size, then that many bytes.

``FrameDecoder.feed`` takes whatever the socket gave and returns the complete frames in it;
a size above the limit (or negative) raises ``FrameTooLarge`` before anything of that frame
is buffered, so a client can never make the pod hold more than one limit's worth.
"""

from __future__ import annotations

import struct

SIZE = struct.Struct(">i")
DEFAULT_MAX_REQUEST_BYTES = 100 << 20  # Kafka's socket.request.max.bytes


class FrameTooLarge(Exception):
    """A frame announced more bytes than allowed: the connection is closed, as Kafka does."""


class FrameDecoder:
    __slots__ = ("max_bytes", "_buffer", "_need")

    def __init__(self, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._need = -1  # the current frame's size once its prefix was read

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        """The frames completed by ``data``, in order (payloads without their size prefix)."""
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        start = 0
        end = len(buffer)
        while True:
            if self._need < 0:
                if end - start < 4:
                    break
                (size,) = SIZE.unpack_from(buffer, start)
                if size < 0 or size > self.max_bytes:
                    self._buffer = bytearray()
                    raise FrameTooLarge(f"frame of {size} bytes (limit {self.max_bytes})")
                self._need = size
                start += 4
            if end - start < self._need:
                break
            frames.append(bytes(buffer[start : start + self._need]))
            start += self._need
            self._need = -1
        if start:
            del buffer[:start]
        return frames


def frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix."""
    return SIZE.pack(len(payload)) + payload
