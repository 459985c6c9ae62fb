"""Optional client authentication: the additive V1 command ``AUTH <user> <password>``.

With authentication on (``--auth-file`` and/or ``--auth-redis``), a connection must send a
successful AUTH first: every other command, PING included, answers
``ERR|AUTH_REQUIRED`` until then, and a wrong user or password answers ``ERR|AUTH_FAILED``
(the connection stays open; an earlier successful AUTH stays in force). With it off, AUTH
answers ``OK|auth=off`` so clients configured with credentials work against any pod.

Requests are answered concurrently, so a request pipelined right behind an AUTH waits for
that AUTH's outcome before it is let through or refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread

from adapter.v1 import protocol
from adapter.v1.escaping import unescape
from mapping.auth import (
    CredentialsError,
    ScramSecret,
    dummy_hash,
    load_auth_file_users,
    parse_scram_secrets,
    verify_password,
)
from mapping.batcher import RedisBatcher
from mapping.errors import (
    AUTH_FAILED,
    AUTH_REQUIRED,
    BAD_REQUEST,
    BrokerError,
    ConfigurationError,
)
from mapping.keys import Keys

AUTH_USAGE = "AUTH requires: <user> <password>"
VERIFY_THREADS = 2
# Looks a user's encoded hash up in Redis (None: no such user).
HashLookup = Callable[[str], Awaitable[str | None]]


class Authenticator:
    """Checks credentials against an auth file (read at start) and/or users in Redis."""

    def __init__(
        self,
        file_users: dict[str, str] | None = None,
        redis_lookup: HashLookup | None = None,
        *,
        file_scram: dict[str, str] | None = None,
        scram_lookup: HashLookup | None = None,
    ) -> None:
        self.file_users = file_users or {}
        self.redis_lookup = redis_lookup
        self.file_scram = file_scram or {}  # user -> encoded SCRAM secrets (Kafka SASL)
        self.scram_lookup = scram_lookup
        # A storm of AUTH attempts uses at most this many cores; the rest wait their turn.
        self._hashing = anyio.CapacityLimiter(VERIFY_THREADS)

    @classmethod
    def from_options(
        cls,
        auth_file: Path | None,
        redis_lookup: HashLookup | None,
        scram_lookup: HashLookup | None = None,
    ) -> Authenticator | None:
        """None when authentication is off (no file and no Redis users)."""
        if auth_file is None and redis_lookup is None:
            return None
        try:
            file_users = load_auth_file_users(auth_file) if auth_file else None
        except (OSError, UnicodeDecodeError, CredentialsError) as exc:
            raise ConfigurationError(f"--auth-file: {exc}") from None
        if file_users is None:
            return cls(None, redis_lookup, scram_lookup=scram_lookup)
        return cls(
            file_users.hashes, redis_lookup, file_scram=file_users.scram, scram_lookup=scram_lookup
        )

    async def scram_secret(self, user: str, mechanism: str) -> ScramSecret | None:
        """``user``'s stored secret for SCRAM ``mechanism``; None for an unknown user or
        one stored without SCRAM secrets (an auth file line of an older ``user hash``)."""
        if user in self.file_users:
            encoded = self.file_scram.get(user)
        elif self.scram_lookup is not None:
            encoded = await self.scram_lookup(user)
        else:
            encoded = None
        if encoded is None:
            return None
        try:
            return parse_scram_secrets(encoded).get(mechanism)
        except CredentialsError:
            return None

    async def check(self, user: str, password: bytes) -> bool:
        encoded = self.file_users.get(user)
        if encoded is None and self.redis_lookup is not None:
            encoded = await self.redis_lookup(user)
        # scrypt takes ~50 ms of CPU: off the event loop. An unknown user costs the same.
        matches = await anyio.to_thread.run_sync(
            verify_password, password, encoded or dummy_hash(), limiter=self._hashing
        )
        return matches and encoded is not None


def users_in_redis(batcher: RedisBatcher, keys: Keys, hash_key: str | None = None) -> HashLookup:
    """Looks a user's hash up in Redis (``--auth-redis``), so users added or removed with
    ``python -m adapter user`` count from the next AUTH on, in every pod. ``hash_key``:
    another hash of users (``keys.users_scram`` for the SCRAM secrets)."""
    key = hash_key or keys.users

    async def lookup(user: str) -> str | None:
        encoded = await batcher.call("HGET", key, user)
        return encoded.decode() if encoded is not None else None

    return lookup


class AuthGate:
    """One connection's authentication state."""

    def __init__(
        self, authenticator: Authenticator | None, auth_timeout_s: float = 0, now: float = 0
    ) -> None:
        self.authenticator = authenticator
        self.user: str | None = None
        self._pending: asyncio.Future[None] | None = None  # the last AUTH not yet decided
        # An unauthenticated connection is closed at this time (``now``: the connection's
        # clock when it opened), so connections that never authenticate cannot hold the
        # pod's connection slots (0: no such limit).
        self._deadline = now + auth_timeout_s if auth_timeout_s > 0 else None

    @property
    def open(self) -> bool:
        """Requests may skip the gate: no authentication, or authenticated with no AUTH
        still being decided."""
        return self.authenticator is None or (self.user is not None and self._pending is None)

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
        try:
            accepted = await self.authenticator.check(user, password)
        except BrokerError as exc:  # the users hash in Redis could not be read
            return protocol.format_error(cid, exc.code, exc.message)
        if not accepted:
            return protocol.format_error(cid, AUTH_FAILED, "invalid user or password")
        self.user = user
        return protocol.format_ok(cid, f"user={user}")
