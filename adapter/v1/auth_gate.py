"""V1's authentication gate: the additive command ``AUTH <user> <password>``, checked by the
pod's ``Authenticator`` (adapter/auth.py).

With authentication on (``--auth-file``, ``--auth-redis`` and/or ``--oauth-jwks``), a
connection must send a successful AUTH first: every other command, PING included, answers
``ERR|AUTH_REQUIRED`` until then, and a wrong user or password answers ``ERR|AUTH_FAILED``
(the connection stays open; an earlier successful AUTH stays in force). With
authentication off, AUTH answers ``OK|auth=off`` so clients configured with credentials work
against any pod.

With ``--oauth-jwks``, the password may be an OAuth bearer token (a JWT) whose subject is
the user (adapter/oauth.py), as Redis clients send a token as AUTH's password. Its session
ends when the token expires: from then on every command answers ``ERR|AUTH_REQUIRED``
until the client sends AUTH again with a fresh token.

Requests are answered concurrently, so a request pipelined right behind an AUTH waits for
that AUTH's outcome before it is let through or refused.
"""

from __future__ import annotations

import asyncio
import time

from adapter.auth import Authenticator
from adapter.oauth import TokenError, looks_like_jwt
from adapter.v1 import protocol
from adapter.v1.escaping import unescape
from mapping.core.errors import AUTH_FAILED, AUTH_REQUIRED, BAD_REQUEST, BrokerError

AUTH_USAGE = "AUTH requires: <user> <password>"


class AuthGate:
    """One V1 connection's authentication state."""

    def __init__(
        self, authenticator: Authenticator | None, auth_timeout_s: float = 0, now: float = 0
    ) -> None:
        self.authenticator = authenticator
        self.user: str | None = None
        # when the session ends (a bearer token's expiry, on time.monotonic's clock)
        self.expires_at: float | None = None
        # The peer's IP as ACL bindings name hosts (the connection sets it once it knows the
        # peer; "*" until then matches only bindings for every host)
        self.host = "*"
        self._pending: asyncio.Future[None] | None = None  # the last AUTH not yet decided
        # An unauthenticated connection is closed at this time (``now``: the connection's
        # clock when it opened), so connections that never authenticate cannot hold the
        # pod's connection slots (0: no such limit).
        self._deadline = now + auth_timeout_s if auth_timeout_s > 0 else None

    @property
    def open(self) -> bool:
        """Requests may skip the gate: no authentication, or authenticated with no AUTH
        still being decided."""
        if self.authenticator is None:
            return True
        return self.user is not None and self._pending is None and not self._expired()

    def _expired(self) -> bool:
        return self.expires_at is not None and time.monotonic() >= self.expires_at

    @property
    def closes_at(self) -> float | None:
        """When this connection is closed unless it authenticates first (on the clock of
        ``now``)."""
        if self.authenticator is None or self.user is not None:
            return None
        return self._deadline

    async def screen(self, request: protocol.Request) -> bytes | None:
        """The reply when the gate answers ``request`` itself (AUTH, or a refusal); None
        when the request may go to its handler. Must be called before any other await of
        the request, so that pipelined requests see the AUTHs sent before them."""
        if request.command == "AUTH":
            return await self._auth(request)
        if self.authenticator is None:
            return None
        if self._pending is not None:
            await asyncio.shield(self._pending)
        if self.user is None:
            return protocol.format_error(
                request.correlation_id, AUTH_REQUIRED, "authenticate first: AUTH <user> <password>"
            )
        if self._expired():
            return protocol.format_error(
                request.correlation_id,
                AUTH_REQUIRED,
                "the token expired: AUTH <user> <token> with a new one",
            )
        return None

    async def _auth(self, request: protocol.Request) -> bytes:
        previous, decided = self._pending, asyncio.get_running_loop().create_future()
        self._pending = decided
        try:
            if previous is not None:
                await asyncio.shield(previous)
            return await self._check(request)
        finally:
            decided.set_result(None)
            if self._pending is decided:
                self._pending = None

    async def _check(self, request: protocol.Request) -> bytes:
        cid = request.correlation_id
        if len(request.args) != 2:
            return protocol.format_error(cid, BAD_REQUEST, AUTH_USAGE)
        user, password = request.args[0], unescape(request.args[1])
        if self.authenticator is None:
            return protocol.format_ok(cid, "auth=off")
        validator = self.authenticator.bearer
        if validator is not None and looks_like_jwt(password.decode("utf-8", "replace")):
            try:
                bearer = await validator.validate(password.decode())
            except (TokenError, UnicodeDecodeError) as exc:
                return protocol.format_error(cid, AUTH_FAILED, f"invalid token: {exc}")
            if bearer.principal != user:
                return protocol.format_error(cid, AUTH_FAILED, "the token names another user")
            remaining_s = bearer.expires_at_ms / 1000 - time.time()
            self.user, self.expires_at = user, time.monotonic() + remaining_s
            return protocol.format_ok(cid, f"user={user}")
        try:
            accepted = await self.authenticator.check(user, password)
        except BrokerError as exc:  # the users hash in Redis could not be read
            return protocol.format_error(cid, exc.code, exc.message)
        if not accepted:
            return protocol.format_error(cid, AUTH_FAILED, "invalid user or password")
        self.user, self.expires_at = user, None
        return protocol.format_ok(cid, f"user={user}")
