"""An identity provider for the OAuth tests: a signing key, its JWKS and the tokens it
signs (RS256 JWTs, as Keycloak, Okta or Entra ID issue them)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://idp.test/realms/streams"
AUDIENCE = "kafka"


class TokenIssuer:
    def __init__(self, key_id: str | None = None) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.key_id = key_id or uuid.uuid4().hex[:8]

    def jwk(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {**public, "kid": self.key_id, "use": "sig", "alg": "RS256"}

    def token(self, subject: str, lifetime_s: float = 300, **claims: Any) -> str:
        """A token for ``subject`` valid ``lifetime_s`` from now; ``claims`` add to or
        replace the standard ones (None drops one)."""
        now = time.time()
        payload = {
            "iss": ISSUER, "aud": AUDIENCE, "sub": subject,
            "iat": int(now), "exp": int(now + lifetime_s),
        }  # fmt: skip
        payload.update(claims)
        payload = {name: value for name, value in payload.items() if value is not None}
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.key_id})


def write_jwks(path: Path, *issuers: TokenIssuer) -> Path:
    path.write_text(json.dumps({"keys": [issuer.jwk() for issuer in issuers]}))
    return path
