"""Per-pod and per-connection limits, shared by both front doors and kept out of their
connection loops so they stay short.

- ``ConnectionSlots``: at most ``--max-connections`` open client connections per pod, V1's
  and Kafka's together; one more is refused by its door (``_refuse``: V1 answers
  ``UNAVAILABLE|too many connections ...`` first, Kafka just closes) and closed.
- ``tune_socket``: TCP keepalive probes, so a peer that vanished (host down, cable pulled,
  NAT entry gone) is detected and its connection closed instead of being kept forever, and
  a send to such a peer fails after the same time (``TCP_USER_TIMEOUT``).
- Per V1 connection (enforced in adapter/v1/connection.py; Kafka's own in
  adapter/kafka/connection.py): at most ``--max-in-flight`` requests are answered at once,
  and nothing more is read while a whole next slice waits or while the client does not
  take its replies; a client that pipelines without reading fills its socket buffers and
  is then simply not read from, so a pod never holds more per connection than one read
  (256 KiB), one unfinished line (at most ``--max-line-bytes``), one slice of lines and its
  replies (each bounded by the line limit or ``--consume-max-bytes``).
- The idle timeout (``--idle-timeout-s``) closes a connection that sends nothing for that
  long with nothing outstanding, or whose peer does not take a reply for that long.
"""

from __future__ import annotations

import logging
import socket

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


def tune_socket(sock: socket.socket, keepalive_s: int) -> None:
    """Turn on TCP keepalive: the first probe after ``keepalive_s`` idle seconds, then
    every third of that, dropped after 3 unanswered probes (0: leave the OS defaults)."""
    if keepalive_s <= 0:
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
