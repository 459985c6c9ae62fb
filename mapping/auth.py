"""Client credentials for the V1 ``AUTH`` command: salted password hashes, in a file or in
Redis (one hash ``<prefix>:users``, field = user name, value = the encoded hash).

The encoded hash is ``scrypt$<n>$<r>$<p>$<salt b64>$<hash b64>``: scrypt is a memory-hard
KDF from the standard library, so a leaked users hash or file is slow to brute-force. A
password is never stored or logged; comparisons are constant-time.

An auth file has one ``<user>:<encoded hash>`` per line (``python -m adapter user hash``
prints such a line); blank lines and lines starting with ``#`` are ignored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

from redis import Redis

from mapping.keys import Keys, is_valid_name

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


# Checked when the user is unknown, so a wrong user name costs as much time as a wrong
# password and response times do not reveal which user names exist.
DUMMY_HASH = hash_password(b"", salt=b"\0" * SALT_BYTES)


def parse_auth_file(text: str, source: str = "auth file") -> dict[str, str]:
    """``{user: encoded hash}`` from the text of an auth file."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, encoded = line.partition(":")
        if not sep or not is_valid_name(user):
            raise CredentialsError(f"{source} line {number}: expected <user>:<hash>")
        try:
            users[user] = check_encoded(encoded)
        except CredentialsError as exc:
            raise CredentialsError(f"{source} line {number}: {exc}") from None
    return users


def load_auth_file(path: Path) -> dict[str, str]:
    return parse_auth_file(Path(path).read_text(), str(path))


class RedisUsers:
    """The users stored in Redis, managed by ``python -m adapter user`` (synchronous)."""

    def __init__(self, client: Redis, keys: Keys) -> None:
        self.client = client
        self.keys = keys

    def add(self, user: str, password: str) -> bool:
        """Store (or replace) ``user``'s password hash; True when the user is new."""
        return bool(self.client.hset(self.keys.users, user, hash_password(password)))

    def remove(self, user: str) -> bool:
        return bool(self.client.hdel(self.keys.users, user))

    def names(self) -> list[str]:
        names = self.client.hkeys(self.keys.users)
        return sorted(n.decode() if isinstance(n, bytes) else n for n in names)
