"""What every front door's connection shares (V1's adapter/v1/connection.py, Kafka's
adapter/kafka/connection.py): the pod's connection slot, TCP tuning, the idle/stall timer's
bookkeeping, reading paused while the peer takes no replies, the mute of a client over its
quota (adapter/quotas.py: nothing read or started for the throttle time, the replies already
due still go out), the end of the input (a client's, or the SIGTERM drain's), closing.

A subclass answers requests (``_pump``), says when reading must pause
(``_update_reading``), what the end of the input means to it (``_input_ended``: answer
what was read, then close) and what its timer does (``_arm_timer``/``_on_timer``).
"""

from __future__ import annotations

import asyncio
import select
import socket

from adapter.limits import ConnectionSlots, tune_socket

# asyncio may run a timer a little early
TIMER_SLACK_S = 0.01


class ServedConnection(asyncio.Protocol):
    def __init__(
        self, *, slots: ConnectionSlots | None, idle_timeout_s: float, keepalive_s: int
    ) -> None:
        self.slots = slots
        self.idle_s = idle_timeout_s if idle_timeout_s > 0 else None
        self.keepalive_s = keepalive_s
        self.loop = asyncio.get_running_loop()
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._write_stalled_at: float | None = None
        self._last_activity = self.loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._has_slot = False
        self._tls = False
        self._muted = False  # over a client quota: neither read nor start anything
        self._mute_timer: asyncio.TimerHandle | None = None

    # --- hooks ----------------------------------------------------------------------------

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        """No connection slot left: say so if the protocol can, and close."""
        transport.close()

    def _pump(self) -> None:
        raise NotImplementedError

    def _update_reading(self) -> None:
        raise NotImplementedError

    def _input_ended(self) -> None:
        """No more requests will be read: answer those read, then close."""
        raise NotImplementedError

    def _forget_requests(self) -> None:
        """The connection is gone: cancel what is still being answered."""

    def _arm_timer(self) -> None:
        """(Re)arm ``self._timer`` for the next deadline, if any."""

    # --- asyncio callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's: no subclass
        self._tls = transport.get_extra_info("sslcontext") is not None
        if self.slots is not None:
            if not self.slots.try_acquire():
                self._refuse(transport)
                return
            self._has_slot = True
        sock = transport.get_extra_info("socket")
        if sock is not None:
            tune_socket(sock, self.keepalive_s)
        self._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._has_slot and self.slots is not None:
            self.slots.release()
            self._has_slot = False
        if self._timer is not None:
            self._timer.cancel()
        if self._mute_timer is not None:
            self._mute_timer.cancel()
        self._forget_requests()
        if not self.closed.done():
            self.closed.set_result(None)

    def eof_received(self) -> bool:
        self._input_ended()
        # Keep the write side: the replies to what was read still go out. (TLS cannot: the
        # end of its input starts its shutdown, and asyncio warns when asked to.)
        return not self._tls

    def pause_writing(self) -> None:
        """The client does not take the replies: start nothing more, read nothing more."""
        self._write_stalled_at = self.loop.time()
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_stalled_at = None
        self._last_activity = self.loop.time()
        self._pump()

    def _input_waiting(self) -> bool:
        """Whether the socket holds bytes not read yet. A pod that was stalled past a
        connection's deadline (a starved CPU, a long pause) may run its timers before it
        reads its sockets: such a connection is not idle, its request is there unread."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    # --- client quotas --------------------------------------------------------------------

    def _mute(self, wait_ms: int) -> None:
        """Read and start nothing for ``wait_ms`` (the replies already due still go out):
        Kafka's throttling of a client over its quota (KIP-219)."""
        if self._mute_timer is not None:
            self._mute_timer.cancel()
        self._muted = True
        self._mute_timer = self.loop.call_later(wait_ms / 1000.0, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._mute_timer = None
        self._muted = False
        self._pump()

    # --- reading and closing --------------------------------------------------------------

    def _set_reading(self, pause: bool) -> None:
        transport = self.transport
        if transport is None or pause == self._reading_paused or transport.is_closing():
            return
        self._reading_paused = pause
        if pause:
            transport.pause_reading()
        else:
            transport.resume_reading()

    def close(self) -> None:
        """Close once what was written is sent."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def drain(self) -> None:
        """SIGTERM: answer every request the client has sent, then close. On plain TCP the
        read side is shut: the kernel still hands over what had arrived, then the end of
        the input. Through TLS that end would start the TLS shutdown with replies still
        owed, so reading just stops."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        sock = transport.get_extra_info("socket")
        if not self._tls and sock is not None:
            try:
                # through a duplicate of the descriptor: uvloop's transport socket has no
                # shutdown(), and shutting down acts on the connection, not the descriptor
                with socket.fromfd(sock.fileno(), sock.family, sock.type) as duplicate:
                    duplicate.shutdown(socket.SHUT_RD)
                return
            except OSError:
                pass  # already gone
        self._input_ended()
