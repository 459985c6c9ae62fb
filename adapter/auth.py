"""The pod's users, shared by both front doors: ``Authenticator`` checks a user's password
(V1 ``AUTH``, Kafka SASL PLAIN) and finds a user's SCRAM secrets (Kafka SASL SCRAM) in the
auth file (``--auth-file``) and/or in Redis (``--auth-redis``), and carries the OAuth bearer
token validator (``--oauth-jwks``, adapter/oauth.py) for V1 ``AUTH`` with a token and Kafka
SASL OAUTHBEARER, and the Kerberos acceptor (``--kerberos-keytab``, adapter/kerberos.py) for
Kafka SASL GSSAPI. Each door has its own gate
in front of its requests: V1's ``AuthGate`` (adapter/v1/auth_gate.py), Kafka's ``SaslGate``
(adapter/kafka/sasl.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import anyio.to_thread

from adapter.kerberos import KerberosAcceptor
from adapter.oauth import BearerValidator
from mapping.connection.batcher import RedisBatcher
from mapping.core.errors import ConfigurationError
from mapping.core.keys import Keys
from mapping.security.auth import (
    CredentialsError,
    ScramSecret,
    dummy_hash,
    load_auth_file_users,
    parse_scram_secrets,
    verify_password,
)

VERIFY_THREADS = 2
# Looks a user's encoded hash up in Redis (None: no such user).
HashLookup = Callable[[str], Awaitable[str | None]]


class Authenticator:
    """Checks credentials against an auth file (read at start) and/or users in Redis, and
    bearer tokens against an identity provider's keys."""

    def __init__(
        self,
        file_users: dict[str, str] | None = None,
        redis_lookup: HashLookup | None = None,
        *,
        file_scram: dict[str, str] | None = None,
        scram_lookup: HashLookup | None = None,
        bearer: BearerValidator | None = None,
        kerberos: KerberosAcceptor | None = None,
        users: bool = True,
    ) -> None:
        self.file_users = file_users or {}
        self.redis_lookup = redis_lookup
        self.file_scram = file_scram or {}  # user -> encoded SCRAM secrets (Kafka SASL)
        self.scram_lookup = scram_lookup
        self.bearer = bearer
        self.kerberos = kerberos
        # whether there are users with passwords at all (off: only bearer tokens and
        # Kerberos tickets authenticate, and Kafka offers only OAUTHBEARER and GSSAPI)
        self.users = users
        # A storm of AUTH attempts uses at most this many cores; the rest wait their turn.
        self._hashing = anyio.CapacityLimiter(VERIFY_THREADS)

    @classmethod
    def from_options(
        cls,
        auth_file: Path | None,
        redis_lookup: HashLookup | None,
        scram_lookup: HashLookup | None = None,
        bearer: BearerValidator | None = None,
        kerberos: KerberosAcceptor | None = None,
    ) -> Authenticator | None:
        """None when authentication is off (no file, no Redis users, no bearer tokens, no
        keytab)."""
        if auth_file is None and redis_lookup is None:
            if bearer is None and kerberos is None:
                return None
            return cls(users=False, bearer=bearer, kerberos=kerberos)
        try:
            file_users = load_auth_file_users(auth_file) if auth_file else None
        except (OSError, UnicodeDecodeError, CredentialsError) as exc:
            raise ConfigurationError(f"--auth-file: {exc}") from None
        if file_users is None:
            return cls(
                None, redis_lookup, scram_lookup=scram_lookup, bearer=bearer, kerberos=kerberos
            )
        return cls(
            file_users.hashes,
            redis_lookup,
            file_scram=file_users.scram,
            scram_lookup=scram_lookup,
            bearer=bearer,
            kerberos=kerberos,
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
