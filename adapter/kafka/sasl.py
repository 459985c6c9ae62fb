"""Kafka SASL on the pod's users: SaslHandshake then SaslAuthenticate (v0-2) with PLAIN
(checked against the scrypt hash, as V1 ``AUTH``) or SCRAM-SHA-256/512 (RFC 5802/7677 with
``scramp``, against the stored SCRAM secrets ``adapter user add`` writes).

After a SaslHandshake v0 (librdkafka 2.0, kafka-python with an old ``api_version``) the
client sends the SASL tokens as raw size-prefixed frames, without a request header or the
SaslAuthenticate envelope, until the exchange is over (``raw_tokens``); the connection hands
those frames to ``raw_token``, whose answer is the server's token in a frame of its own (an
empty one after PLAIN). A failure there has no error to carry: the connection is closed, as
Kafka's SaslServerAuthenticator does.

``SaslGate`` is the Kafka connection's gate, as ``AuthGate`` (adapter/v1/auth_gate.py) is
V1's: it answers SaslHandshake and SaslAuthenticate itself (they are not in the handler
table, adapter/kafka/apis.py, whose handlers take the pod's context: these two work on the
connection's authentication state). With authentication on (``--auth-file``/``--auth-redis``)
a connection may send nothing but ApiVersions, SaslHandshake and SaslAuthenticate until it
authenticated; anything else closes it, as Kafka does. A failed authentication answers
SASL_AUTHENTICATION_FAILED with a message, then the connection is closed (Kafka's rule: the
client reports the error). The connection starts nothing after a SASL request until its
outcome is known, so pipelined requests see it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Coroutine
from typing import Any

from scramp import ScramException, ScramMechanism

from adapter.auth import Authenticator
from adapter.kafka import errors
from adapter.kafka.framing import frame
from adapter.kafka.protocol import Request
from adapter.kafka.versions import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from mapping.core.errors import BrokerError
from mapping.security.auth import SCRAM_ITERATIONS, SCRAM_MECHANISMS, ScramSecret

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
MECHANISMS = [PLAIN, *SCRAM_MECHANISMS]
# what an unauthenticated connection may send
OPEN_APIS = frozenset({API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
# answered by the gate, not by the handler table
SASL_APIS = frozenset({SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
FAILED = "Authentication failed: invalid user name or password"
# Unknown users get a made-up SCRAM secret (a salt stable per name), so that the exchange
# fails only at the proof, like a wrong password, and reveals no user names.
_DUMMY_KEY = os.urandom(32)


class SaslFailure(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SaslGate:
    """One Kafka connection's authentication state, and the answers to its SASL requests."""

    def __init__(self, authenticator: Authenticator | None) -> None:
        self.authenticator = authenticator
        self.user: str | None = None
        self.mechanism: str | None = None  # chosen by the last SaslHandshake
        self.failed = False  # the connection closes once this answer is out
        # after a SaslHandshake v0: the next frames are raw SASL tokens (raw_token)
        self.raw_tokens = False
        self._scram: Any = None  # the SCRAM exchange under way

    @property
    def required(self) -> bool:
        return self.authenticator is not None

    def admits(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may run now."""
        return self.authenticator is None or self.user is not None or api_key in OPEN_APIS

    def answer(self, request: Request) -> Coroutine[Any, Any, Any] | None:
        """The answer to ``request`` when it is the gate's own (SaslHandshake,
        SaslAuthenticate), to be awaited; None for any other request (the handler table's)."""
        if request.api.key == SASL_HANDSHAKE.key:
            return self._handshake(request)
        if request.api.key == SASL_AUTHENTICATE.key:
            return self._authenticate(request)
        return None

    async def _handshake(self, request: Request) -> Any:
        response = SASL_HANDSHAKE.response[request.version]
        mechanism = request.body.mechanism
        if not self.required:  # as a Kafka listener without SASL (the connection goes on)
            return response(error_code=errors.ILLEGAL_SASL_STATE, mechanisms=[])
        if mechanism not in MECHANISMS:
            self.failed = True
            return response(error_code=errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=MECHANISMS)
        self._begin(mechanism)
        self.raw_tokens = request.version == 0
        return response(error_code=errors.NONE, mechanisms=MECHANISMS)

    def raw_token(self, token: bytes) -> Coroutine[Any, Any, bytes]:
        """The answer to a raw SASL token (after SaslHandshake v0), to be awaited: the
        server's token as a frame, or b"" with ``failed`` set (the connection closes)."""
        return self._raw_token(token)

    async def _raw_token(self, token: bytes) -> bytes:
        try:
            answer = await self._step(token)
        except Exception as exc:  # SaslFailure, BrokerError or any other: v0 cannot say which
            log.info("Kafka SASL (handshake v0) failed: %r", exc)
            self.failed, self.raw_tokens = True, False
            return b""
        if self.user is not None:  # done: requests again from the next frame
            self.raw_tokens = False
        return frame(answer)

    async def _authenticate(self, request: Request) -> Any:
        response = SASL_AUTHENTICATE.response[request.version]
        try:
            token = await self._step(request.body.auth_bytes or b"")
        except SaslFailure as exc:
            self.failed = self.required  # without authentication there is nothing to close
            return response(
                error_code=exc.code,
                error_message=exc.message,
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        except BrokerError as exc:  # the users in Redis could not be read: try again later
            self.failed = True
            return response(
                error_code=errors.SASL_AUTHENTICATION_FAILED,
                error_message=f"users unavailable: {exc.message}",
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        return response(
            error_code=errors.NONE, error_message=None, auth_bytes=token, session_lifetime_ms=0
        )

    def _begin(self, mechanism: str) -> None:
        self.mechanism, self._scram = mechanism, None

    async def _step(self, token: bytes) -> bytes:
        """One SaslAuthenticate token in, the server's token out; SaslFailure when the
        exchange fails. Sets ``user`` when it succeeded."""
        if self.authenticator is None or self.mechanism is None:
            raise SaslFailure(errors.ILLEGAL_SASL_STATE, "SaslHandshake first")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, "malformed SASL token") from None
        if self.mechanism == PLAIN:
            return await self._plain(self.authenticator, text)
        return await self._scram_step(self.authenticator, self.mechanism, text)

    async def _plain(self, authenticator: Authenticator, text: str) -> bytes:
        parts = text.split("\0")  # [authzid] NUL authcid NUL passwd (RFC 4616)
        if len(parts) != 3 or parts[0] not in ("", parts[1]):
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, "malformed PLAIN token")
        _, user, password = parts
        if not await authenticator.check(user, password.encode()):
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, FAILED)
        self._succeed(user)
        return b""

    async def _scram_step(self, authenticator: Authenticator, mechanism: str, text: str) -> bytes:
        try:
            if self._scram is None:  # client-first
                user = _scram_user(text)
                secret = await authenticator.scram_secret(user, mechanism)
                if secret is None:
                    secret = _dummy_secret(user)
                server = ScramMechanism(mechanism).make_server(
                    lambda _name: (
                        secret.salt, secret.stored_key, secret.server_key, secret.iterations
                    )
                )  # fmt: skip
                server.set_client_first(text)
                self._scram = (server, user)
                return server.get_server_first().encode()
            server, user = self._scram
            self._scram = None
            server.set_client_final(text)  # checks the proof (constant-time)
            final = server.get_server_final()
        except ScramException as exc:
            self._scram = None
            log.info("Kafka SCRAM authentication failed: %s", exc)
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, FAILED) from None
        self._succeed(user)
        return final.encode()

    def _succeed(self, user: str) -> None:
        self.user, self.mechanism = user, None


def _scram_user(client_first: str) -> str:
    """The user name of a client-first message (``n,,n=<saslname>,r=<nonce>``)."""
    parts = client_first.split(",")
    if len(parts) < 4 or not parts[2].startswith("n="):
        raise ScramException("malformed client-first message")
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")


def _dummy_secret(user: str) -> ScramSecret:
    digest = hmac.new(_DUMMY_KEY, user.encode(), hashlib.sha512).digest()
    return ScramSecret(digest[:16], digest[16:48], digest[48:], SCRAM_ITERATIONS)
