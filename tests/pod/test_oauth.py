"""Bearer tokens checked as Kafka's validator checks them (adapter/oauth.py), and the
OAUTHBEARER client message read as RFC 7628 and Kafka write it (adapter/kafka/sasl.py): pure
logic, no pod."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from adapter.kafka.sasl import parse_oauthbearer
from adapter.oauth import BearerValidator, TokenError, looks_like_jwt
from mapping.core.errors import ConfigurationError
from tests.support.oauth import AUDIENCE, ISSUER, TokenIssuer, write_jwks


@pytest.fixture(scope="module")
def issuer() -> TokenIssuer:
    return TokenIssuer("k1")


def _validator(path: Path, **options: object) -> BearerValidator:
    made = BearerValidator.from_options(
        str(path),
        issuer=ISSUER,
        audience=AUDIENCE,
        **options,  # type: ignore[arg-type]
    )
    assert made is not None
    return made


def _validate(validator: BearerValidator, token: str) -> object:
    return asyncio.run(validator.validate(token))


def test_a_valid_token_names_its_subject_and_expiry(issuer: TokenIssuer, tmp_path: Path) -> None:
    validator = _validator(write_jwks(tmp_path / "jwks", issuer))
    token = issuer.token("svc-orders", lifetime_s=120)
    bearer = _validate(validator, token)
    expires = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert (bearer.principal, bearer.expires_at_ms) == ("svc-orders", expires * 1000)


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"lifetime_s": -120}, "token expired"),  # beyond the 30 s of clock skew
        ({"iss": "https://elsewhere"}, "Invalid issuer"),
        ({"aud": "not-kafka"}, "Audience doesn't match"),
        ({"iat": None}, 'missing the "iat" claim'),
        ({"exp": None}, 'missing the "exp" claim'),
        ({"sub": None}, "no 'sub' claim"),
        ({"sub": "  "}, "no 'sub' claim"),
        ({"nbf_in_s": 600}, "not yet valid"),
    ],
)
def test_tokens_kafka_refuses_are_refused(
    issuer: TokenIssuer, tmp_path: Path, claims: dict, message: str
) -> None:
    validator = _validator(write_jwks(tmp_path / "jwks", issuer))
    claims = dict(claims)
    lifetime = claims.pop("lifetime_s", 300)
    if "nbf_in_s" in claims:  # (from now, not from when the tests were collected)
        claims["nbf"] = int(time.time()) + claims.pop("nbf_in_s")
    with pytest.raises(TokenError, match=message):
        _validate(validator, issuer.token("svc", lifetime_s=lifetime, **claims))


def test_an_expired_token_within_the_clock_skew_is_accepted(
    issuer: TokenIssuer, tmp_path: Path
) -> None:
    validator = _validator(write_jwks(tmp_path / "jwks", issuer))
    assert _validate(validator, issuer.token("svc", lifetime_s=-5)).principal == "svc"
    strict = _validator(tmp_path / "jwks", clock_skew_s=0)
    with pytest.raises(TokenError, match="expired"):
        _validate(strict, issuer.token("svc", lifetime_s=-5))


def test_forged_tokens_are_refused(issuer: TokenIssuer, tmp_path: Path) -> None:
    validator = _validator(write_jwks(tmp_path / "jwks", issuer))
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "admin", "iat": int(time.time()),
              "exp": int(time.time()) + 300}  # fmt: skip
    # another key under the same key id
    with pytest.raises(TokenError, match="signature does not verify"):
        _validate(validator, TokenIssuer("k1").token("admin"))
    # unsigned
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})
    with pytest.raises(TokenError, match="'none' not allowed"):
        _validate(validator, unsigned)
    # HMAC with the public key as the secret (the classic confusion attack)
    # (written by hand: PyJWT refuses to sign with a public key as an HMAC secret)
    secret = json.dumps(issuer.jwk()).encode()
    signing_input = ".".join(
        jwt.utils.base64url_encode(json.dumps(part).encode()).decode()
        for part in ({"alg": "HS256", "typ": "JWT", "kid": "k1"}, claims)
    )
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    hmac_token = f"{signing_input}.{jwt.utils.base64url_encode(signature).decode()}"
    with pytest.raises(TokenError, match="'HS256' not allowed"):
        _validate(validator, hmac_token)
    # a key id the JWKS does not hold
    with pytest.raises(TokenError, match="no signing key 'k9'"):
        _validate(validator, TokenIssuer("k9").token("admin"))
    for garbage in ("", "abc", "a.b.c", "x" * 5000):
        with pytest.raises(TokenError):
            _validate(validator, garbage)


def test_another_subject_claim_and_an_ec_key(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": "ec"}
    path = tmp_path / "jwks"
    path.write_text(json.dumps({"keys": [jwk]}))
    validator = _validator(path, subject_claim="client_id")
    now = int(time.time())
    token = jwt.encode(
        {"iss": ISSUER, "aud": AUDIENCE, "sub": "ignored", "client_id": "etl-job", "iat": now,
         "exp": now + 60},
        key, algorithm="ES256", headers={"kid": "ec"},
    )  # fmt: skip
    assert _validate(validator, token).principal == "etl-job"


def test_a_rewritten_jwks_file_takes_effect(issuer: TokenIssuer, tmp_path: Path) -> None:
    """Keys are rotated by rewriting the file: the new key works, the removed one no longer."""
    path = write_jwks(tmp_path / "jwks", issuer)
    validator = _validator(path)
    rotated = TokenIssuer("k2")
    with pytest.raises(TokenError, match="no signing key 'k2'"):
        _validate(validator, rotated.token("svc"))
    write_jwks(path, rotated)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert _validate(validator, rotated.token("svc")).principal == "svc"
    with pytest.raises(TokenError, match="no signing key 'k1'"):
        _validate(validator, issuer.token("svc"))
    path.write_text("{ half written")  # a broken rewrite keeps the keys read last
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2_000_000_000))
    assert _validate(validator, rotated.token("svc")).principal == "svc"


def test_bad_jwks_options_stop_the_pod_at_start(tmp_path: Path) -> None:
    assert BearerValidator.from_options(None) is None
    with pytest.raises(ConfigurationError, match="https:// URL or a file"):
        BearerValidator.from_options("http://idp.test/jwks")
    with pytest.raises(ConfigurationError, match="--oauth-jwks"):
        BearerValidator.from_options(str(tmp_path / "missing"))
    (tmp_path / "bad").write_text('{"keys": 3}')
    with pytest.raises(ConfigurationError, match="--oauth-jwks"):
        BearerValidator.from_options(str(tmp_path / "bad"))


def test_looks_like_jwt(issuer: TokenIssuer) -> None:
    assert looks_like_jwt(issuer.token("svc"))
    for password in ("hunter2", "a.b.c", "", "x.y", "e30.e30.", "e30.e30.sig"):
        assert not looks_like_jwt(password), password


# --- the OAUTHBEARER message -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "token", "authorization_id"),
    [
        ("n,,\x01auth=Bearer abc.def.ghi\x01\x01", "abc.def.ghi", ""),  # librdkafka, Java
        ("n,a=svc,\x01auth=Bearer t\x01\x01", "t", "svc"),
        (
            "n,,\x01host=h\x01port=9092\x01auth=bearer  t-_~+/.9==\x01traceId=7\x01\x01",
            "t-_~+/.9==",
            "",
        ),  # other pairs and KIP-342 extensions  # fmt: skip
    ],
)
def test_oauthbearer_messages_read(message: str, token: str, authorization_id: str) -> None:
    assert parse_oauthbearer(message) == (token, authorization_id)


@pytest.mark.parametrize(
    "message",
    [
        "", "\x01", "n,,", "auth=Bearer t\x01\x01", "p=x,,\x01auth=Bearer t\x01\x01",
        "n,x,\x01auth=Bearer t\x01\x01", "n,,\x01auth=Bearer t\x01",
        "n,,\x01auth=Basic t\x01\x01", "n,,\x01auth=Bearer\x01\x01", "n,,\x01\x01",
        "n,,\x01novalue\x01auth=Bearer t\x01\x01", "n,,\x01auth=Bearer t t\x01\x01",
    ],
)  # fmt: skip
def test_malformed_oauthbearer_messages_are_refused(message: str) -> None:
    with pytest.raises(ValueError, match="malformed OAUTHBEARER"):
        parse_oauthbearer(message)
