"""OAuth 2 bearer tokens: Kafka SASL OAUTHBEARER and V1 ``AUTH <user> <token>`` accept a
JWT signed by a key of the identity provider's JWKS (``--oauth-jwks``: a file, or an
https:// URL), checked as Kafka's own validator (KIP-768) checks it: the signature (RSA,
RSA-PSS, EC or EdDSA keys; never ``none`` or a shared secret), ``exp`` and ``iat`` present,
``exp`` and ``nbf`` within the allowed clock skew, the issuer and audience when configured,
and a subject claim (``sub`` unless ``--oauth-subject-claim`` names another) that becomes the
principal, ``User:<subject>``, for ACLs and quotas.

A JWKS file is read again when it changes on disk (keys rotated by rewriting it); a JWKS
URL is fetched once an hour, and at once for a key id it does not hold yet (at most every 30
s), off the event loop.
"""

from __future__ import annotations

import json
import os
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.to_thread
import jwt

from mapping.core.errors import ConfigurationError

# Asymmetric algorithms only: a shared-secret (HS*) or unsigned token is refused, so a public
# JWKS can never be used to forge one.
ALGORITHMS = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
]  # fmt: skip
JWKS_REFRESH_S = 3600.0  # Kafka's sasl.oauthbearer.jwks.endpoint.refresh.ms
JWKS_TIMEOUT_S = 10.0
DEFAULT_CLOCK_SKEW_S = 30  # Kafka's sasl.oauthbearer.clock.skew.seconds


class TokenError(Exception):
    """A token that does not authenticate anyone; the message says why, for the client."""


@dataclass(frozen=True)
class Bearer:
    """What a valid token says: whom it names and until when."""

    principal: str
    expires_at_ms: int  # its exp, in ms since the epoch


class KeySource(Protocol):
    async def key(self, key_id: str | None) -> jwt.PyJWK: ...


def _signing_keys(jwk_set: jwt.PyJWKSet) -> list[jwt.PyJWK]:
    return [key for key in jwk_set.keys if key.public_key_use in (None, "sig")]


def _pick(keys: list[jwt.PyJWK], key_id: str | None) -> jwt.PyJWK | None:
    if key_id is None:  # no kid: only an unambiguous set answers
        return keys[0] if len(keys) == 1 else None
    return next((key for key in keys if key.key_id == key_id), None)


class JwksFile:
    """Keys from a JWKS file, read again whenever the file changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._keys: list[jwt.PyJWK] = []
        self._load()  # a bad file stops the pod at start, not at the first client

    def _load(self) -> None:
        stat = os.stat(self.path)
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return
        text = self.path.read_text(encoding="utf-8")
        try:
            keys = _signing_keys(jwt.PyJWKSet.from_json(text))
        except (jwt.PyJWKSetError, ValueError) as exc:
            raise ConfigurationError(f"--oauth-jwks {self.path}: {exc}") from None
        self._keys, self._stamp = keys, stamp

    async def key(self, key_id: str | None) -> jwt.PyJWK:
        try:
            self._load()
        except (OSError, ConfigurationError):
            pass  # a rewrite under way or gone wrong: the keys read last stay in force
        found = _pick(self._keys, key_id)
        if found is None:
            raise TokenError(f"no signing key {key_id!r} in the JWKS")
        return found


class JwksUrl:
    """Keys from a JWKS endpoint (PyJWT's client: the set cached an hour, fetched again
    for an unknown key id), each fetch in a worker thread, one at a time."""

    def __init__(self, url: str) -> None:
        self.client = jwt.PyJWKClient(
            url, cache_jwk_set=True, lifespan=JWKS_REFRESH_S, timeout=JWKS_TIMEOUT_S
        )
        self._fetching = anyio.CapacityLimiter(1)

    def _find(self, key_id: str | None) -> jwt.PyJWK:
        try:
            if key_id is not None:  # fetched again for a rotated key (at most every 30 s)
                return self.client.get_signing_key(key_id)
            found = _pick(self.client.get_signing_keys(), None)
        except jwt.PyJWKClientError as exc:
            raise TokenError(f"no signing key {key_id!r} in the JWKS: {exc}") from None
        if found is None:
            raise TokenError("the token names no key id and the JWKS has several keys")
        return found

    async def key(self, key_id: str | None) -> jwt.PyJWK:
        return await anyio.to_thread.run_sync(self._find, key_id, limiter=self._fetching)


@dataclass(frozen=True)
class BearerValidator:
    """Checks a bearer token and says whom it authenticates until when."""

    keys: KeySource
    _: KW_ONLY
    issuer: str | None = None
    audience: str | None = None
    subject_claim: str = "sub"
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S

    @classmethod
    def from_options(
        cls,
        jwks: str | None,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        subject_claim: str = "sub",
        clock_skew_s: float = DEFAULT_CLOCK_SKEW_S,
    ) -> BearerValidator | None:
        """None when OAuth is off (no ``--oauth-jwks``)."""
        if not jwks:
            return None
        keys: KeySource
        if jwks.startswith("https://"):
            keys = JwksUrl(jwks)
        elif "://" in jwks:
            raise ConfigurationError("--oauth-jwks: an https:// URL or a file")
        else:
            try:
                keys = JwksFile(Path(jwks))
            except OSError as exc:
                raise ConfigurationError(f"--oauth-jwks: {exc}") from None
        return cls(
            keys,
            issuer=issuer,
            audience=audience,
            subject_claim=subject_claim,
            clock_skew_s=clock_skew_s,
        )

    async def validate(self, token: str) -> Bearer:
        """Whom ``token`` authenticates; TokenError when it authenticates no one."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenError("malformed token: not a signed JWT") from None
        if header.get("alg") not in ALGORITHMS:
            raise TokenError(f"token algorithm {header.get('alg')!r} not allowed")
        key_id = header.get("kid")
        key = await self.keys.key(key_id if isinstance(key_id, str) else None)
        claims = self._claims(token, key)
        subject = claims.get(self.subject_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise TokenError(f"token has no {self.subject_claim!r} claim naming its subject")
        expires = claims["exp"]
        if not isinstance(expires, int | float):
            raise TokenError("token's 'exp' is not a number")
        return Bearer(subject, int(expires * 1000))

    def _claims(self, token: str, key: jwt.PyJWK) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.clock_skew_s,
                options={
                    "require": ["exp", "iat"],
                    "verify_aud": self.audience is not None,
                    "verify_iss": self.issuer is not None,
                },
            )
        except jwt.ExpiredSignatureError:
            raise TokenError("token expired") from None
        except jwt.InvalidSignatureError:
            raise TokenError("token signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"invalid token: {exc}") from None


def looks_like_jwt(text: str) -> bool:
    """Whether ``text`` has a JWS compact form's shape (three base64url parts whose first
    is a JSON header), so that V1 AUTH tries it as a token before as a password."""
    parts = text.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        return False
    try:
        header = json.loads(jwt.utils.base64url_decode(parts[0]))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and "alg" in header
