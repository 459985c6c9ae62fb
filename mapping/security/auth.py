"""Client credentials for the V1 ``AUTH`` command: salted password hashes, in a file or in
Redis (one hash ``<prefix>:users``, field = user name, value = the encoded hash).

The encoded hash is ``scrypt$<n>$<r>$<p>$<salt b64>$<hash b64>``: scrypt is a memory-hard
KDF from the standard library, so a leaked users hash or file is slow to brute-force. A
password is never stored or logged; comparisons are constant-time.

An auth file has one ``<user>:<encoded hash>[:<SCRAM secrets>]`` per line (``python -m
adapter user hash`` prints such a line); blank lines and lines starting with ``#`` are
ignored.

Kafka SASL SCRAM (RFC 5802/7677) cannot use the scrypt hash: the server needs the salt,
iteration count, StoredKey and ServerKey of each SCRAM mechanism, derived from the password
when it is set. ``scram_secrets`` encodes them as
``SCRAM-SHA-256$<iterations>$<salt b64>$<StoredKey b64>$<ServerKey b64>,SCRAM-SHA-512$...``
(in Redis: the hash ``<prefix>:users:scram``; in an auth file: the optional third column).
A user without them can use PLAIN (checked against the scrypt hash) but not SCRAM.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from redis import Redis
from scramp import ScramException, ScramMechanism

from mapping.connection import scripts
from mapping.core.codec import to_str
from mapping.core.keys import Keys, is_valid_name

SCHEME = "scrypt"
# 16 MiB of memory and ~50 ms of CPU per check: the OWASP minimum for scrypt.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 14, 8, 1
SALT_BYTES, HASH_BYTES = 16, 32
_MAX_MEM = 64 * 1024 * 1024


class CredentialsError(Exception):
    """A malformed auth file line or stored hash."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int, size: int) -> bytes:
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, maxmem=_MAX_MEM, dklen=size)


def hash_password(password: str | bytes, *, salt: bytes | None = None) -> str:
    """The encoded salted hash of ``password`` (a fresh random salt unless given)."""
    secret = password.encode() if isinstance(password, str) else password
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P, HASH_BYTES)
    return f"{SCHEME}${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}"


def _decode(encoded: str) -> tuple[int, int, int, bytes, bytes]:
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != SCHEME:
            raise ValueError(scheme)
        return int(n), int(r), int(p), base64.b64decode(salt), base64.b64decode(digest)
    except ValueError as exc:
        raise CredentialsError(f"not a {SCHEME} password hash: {exc}") from None


def check_encoded(encoded: str) -> str:
    """``encoded`` if it is a well-formed hash, else ``CredentialsError``."""
    _decode(encoded)
    return encoded


def verify_password(password: str | bytes, encoded: str) -> bool:
    """Whether ``password`` matches ``encoded``. CPU-heavy: call it off the event loop."""
    n, r, p, salt, digest = _decode(encoded)
    secret = password.encode() if isinstance(password, str) else password
    try:
        candidate = _scrypt(secret, salt, n, r, p, len(digest))
    except ValueError:  # parameters out of range
        return False
    return hmac.compare_digest(candidate, digest)


@functools.cache
def dummy_hash() -> str:
    """Checked when the user is unknown, so a wrong user name costs as much time as a wrong
    password and response times do not reveal which user names exist. Computed on first use,
    not at import: scrypt costs ~50 ms, and every command line imports this module."""
    return hash_password(b"", salt=b"\0" * SALT_BYTES)


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 4096  # Kafka's minimum and its kafka-configs default
# Kafka's SCRAM mechanism codes (AlterUserScramCredentials, DescribeUserScramCredentials)
SCRAM_MECHANISM_CODES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
# The iteration counts Kafka accepts from AlterUserScramCredentials (ScramControlManager)
SCRAM_MIN_ITERATIONS, SCRAM_MAX_ITERATIONS = 4096, 16384
_SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


@dataclass(frozen=True, slots=True)
class ScramSecret:
    """What a SCRAM server stores for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def scram_secrets(password: str, *, iterations: int = SCRAM_ITERATIONS) -> str:
    """The encoded SCRAM secrets of ``password`` for every mechanism, each with a fresh salt."""
    parts = []
    for mechanism in SCRAM_MECHANISMS:
        salt, stored, server, count = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=iterations
        )
        parts.append(f"{mechanism}${count}${_b64(salt)}${_b64(stored)}${_b64(server)}")
    return ",".join(parts)


def parse_scram_secrets(encoded: str) -> dict[str, ScramSecret]:
    """``{mechanism: secret}`` from ``scram_secrets``' encoding, else ``CredentialsError``."""
    secrets: dict[str, ScramSecret] = {}
    try:
        for part in encoded.split(","):
            mechanism, count, salt, stored, server = part.split("$")
            if mechanism not in SCRAM_MECHANISMS:
                raise ValueError(mechanism)
            secrets[mechanism] = ScramSecret(
                base64.b64decode(salt, validate=True),
                base64.b64decode(stored, validate=True),
                base64.b64decode(server, validate=True),
                int(count),
            )
    except ValueError as exc:
        raise CredentialsError(f"not SCRAM secrets: {exc}") from None
    return secrets


def scram_secret_from_salted(
    mechanism: str, iterations: int, salt: bytes, salted_password: bytes
) -> str:
    """One mechanism's part of ``scram_secrets``' encoding from the SaltedPassword a Kafka
    admin client sends (AlterUserScramCredentials): StoredKey and ServerKey derived as RFC
    5802 says (and Kafka's ScramFormatter does); the password itself is never seen."""
    digest = _SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored = digest(client_key).digest()
    server = hmac.new(salted_password, b"Server Key", digest).digest()
    return f"{mechanism}${iterations}${_b64(salt)}${_b64(stored)}${_b64(server)}"


USERS_SCRAM_ALTER = scripts.load("users/scram_alter")


def users_scram_alter_call(keys: Keys, user: str, mechanism: str, secret: str) -> tuple:
    """users/scram_alter.lua: sets ``user``'s ``mechanism`` secret (one part of
    ``scram_secrets``' encoding), or deletes it when ``secret`` is empty (answers 0 when
    there was none); the user's other mechanism stays."""
    return USERS_SCRAM_ALTER.command([keys.users_scram], [user, mechanism, secret])


def scram_password_check(password: str, secret: ScramSecret, mechanism: str) -> bool:
    """Whether ``password`` derives ``secret`` (tests and tools; the server never sees it)."""
    try:
        _, stored, server, _ = ScramMechanism(mechanism).make_auth_info(
            password, iteration_count=secret.iterations, salt=secret.salt
        )
    except ScramException:
        return False
    return hmac.compare_digest(stored, secret.stored_key) and hmac.compare_digest(
        server, secret.server_key
    )


@dataclass(frozen=True, slots=True)
class FileUsers:
    """An auth file's users: their scrypt hashes and, where the line has them, SCRAM secrets."""

    hashes: dict[str, str]
    scram: dict[str, str]


def parse_auth_file_users(text: str, source: str = "auth file") -> FileUsers:
    hashes: dict[str, str] = {}
    scram: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, rest = line.partition(":")
        encoded, _, secrets = rest.partition(":")
        if not sep or not is_valid_name(user):
            raise CredentialsError(f"{source} line {number}: expected <user>:<hash>")
        try:
            hashes[user] = check_encoded(encoded)
            if secrets:
                parse_scram_secrets(secrets)
                scram[user] = secrets
        except CredentialsError as exc:
            raise CredentialsError(f"{source} line {number}: {exc}") from None
    return FileUsers(hashes, scram)


def parse_auth_file(text: str, source: str = "auth file") -> dict[str, str]:
    """``{user: encoded hash}`` from the text of an auth file."""
    return parse_auth_file_users(text, source).hashes


def load_auth_file_users(path: Path) -> FileUsers:
    return parse_auth_file_users(Path(path).read_text(), str(path))


def load_auth_file(path: Path) -> dict[str, str]:
    return load_auth_file_users(path).hashes


def auth_file_line(user: str, password: str) -> str:
    """One auth file line: the scrypt hash (PLAIN, V1 AUTH) and the SCRAM secrets."""
    return f"{user}:{hash_password(password)}:{scram_secrets(password)}"


class RedisUsers:
    """The users stored in Redis, managed by ``python -m adapter user`` (synchronous)."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def add(self, user: str, password: str) -> bool:
        """Store (or replace) ``user``'s password hash and SCRAM secrets; True when the user
        is new. The SCRAM secrets go first: a user visible to AUTH can do SCRAM too."""
        self.client.hset(self.keys.users_scram, user, scram_secrets(password))
        return bool(self.client.hset(self.keys.users, user, hash_password(password)))

    def remove(self, user: str) -> bool:
        removed = bool(self.client.hdel(self.keys.users, user))
        # a user made by Kafka's AlterUserScramCredentials has SCRAM secrets alone
        return bool(self.client.hdel(self.keys.users_scram, user)) or removed

    def names(self) -> list[str]:
        """Every user: those with a password hash and those with SCRAM secrets alone."""
        names = {*self.client.hkeys(self.keys.users), *self.client.hkeys(self.keys.users_scram)}
        return sorted(to_str(n) for n in names)
