"""Kafka SASL on the pod's users: SaslHandshake then SaslAuthenticate (v0-2) with PLAIN
(checked against the scrypt hash, as V1 ``AUTH``) or SCRAM-SHA-256/512 (RFC 5802/7677 with
``scramp``, against the stored SCRAM secrets ``adapter user add`` writes), and with
OAUTHBEARER (RFC 7628: a JWT checked against the identity provider's keys, adapter/oauth.py;
the principal is the token's subject), and with GSSAPI (Kerberos, RFC 4752: a ticket for the
pod's service principal, adapter/kerberos.py; the principal is the client's, named by
Kafka's principal-to-local rules).

Sessions end (KIP-368): an OAUTHBEARER session when its token expires, any session after
``--max-reauth-ms`` when that is set (Kafka's ``connections.max.reauth.ms``). SaslAuthenticate
v1+ tells the client its session's lifetime, and a client that re-authenticates on the same
connection before then (SaslHandshake and SaslAuthenticate again, the same mechanism, the
same principal) goes on with a new session; once a session is over, any request but those
closes the connection, as Kafka's broker closes it. A re-authentication that fails, or names
another principal, closes it too.

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

import asyncio
import hashlib
import hmac
import logging
import math
import os
import re
import time
from collections.abc import Callable, Coroutine
from typing import Any

from scramp import ScramException, ScramMechanism

from adapter.auth import Authenticator
from adapter.kafka import errors
from adapter.kafka.framing import frame
from adapter.kafka.protocol import Request
from adapter.kafka.versions import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from adapter.kerberos import GSSAPI, GssapiExchange, KerberosError
from adapter.oauth import TokenError
from mapping.core.errors import BrokerError
from mapping.security.auth import SCRAM_ITERATIONS, SCRAM_MECHANISMS, ScramSecret

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
PASSWORD_MECHANISMS = [PLAIN, *SCRAM_MECHANISMS]
# what an unauthenticated connection may send
OPEN_APIS = frozenset({API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
# answered by the gate, not by the handler table
SASL_APIS = frozenset({SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
FAILED = "Authentication failed: invalid user name or password"
MIN_REAUTH_INTERVAL_S = 1.0  # between the starts of two exchanges on a connection (Kafka's)
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

    def __init__(
        self,
        authenticator: Authenticator | None,
        max_reauth_ms: int = 0,
        on_event: Callable[[str, str], None] | None = None,
    ) -> None:
        self.authenticator = authenticator
        self.max_reauth_ms = max_reauth_ms
        self.on_event = on_event  # (event, mechanism): the pod's metrics
        self._reauthenticating = False  # the exchange under way renews a session
        self._begun_at = -math.inf  # when the last exchange began (the event loop's clock)
        self.user: str | None = None
        self.mechanism: str | None = None  # chosen by the last SaslHandshake
        self.session_mechanism: str | None = None  # the one the session authenticated with
        # when the session ends, on the event loop's clock (None: never)
        self.expires_at: float | None = None
        self.session_lifetime_ms: int | None = None
        self.mechanisms = _mechanisms(authenticator)
        self.failed = False  # the connection closes once this answer is out
        # after a SaslHandshake v0: the next frames are raw SASL tokens (raw_token)
        self.raw_tokens = False
        self._scram: Any = None  # the SCRAM exchange under way
        self._gssapi: GssapiExchange | None = None  # the GSSAPI exchange under way

    @property
    def required(self) -> bool:
        return self.authenticator is not None

    def admits(self, api_key: int, now: float) -> bool:
        """Whether a request of ``api_key`` may run at ``now`` (the event loop's clock):
        before authentication and once the session is over, only the SASL exchange's."""
        if self.authenticator is None or api_key in OPEN_APIS:
            return True
        return self.user is not None and (self.expires_at is None or now < self.expires_at)

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
        if mechanism not in self.mechanisms:
            self.failed = True
            return response(
                error_code=errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=self.mechanisms
            )
        if self.session_mechanism not in (None, mechanism):  # Kafka's re-authentication rule
            log.info(
                "Kafka SASL re-authentication refused: %s after %s",
                mechanism,
                self.session_mechanism,
            )
            self.failed = True
            return response(
                error_code=errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=[self.session_mechanism]
            )
        now = asyncio.get_running_loop().time()
        if self.user is not None and now - self._begun_at < MIN_REAUTH_INTERVAL_S:
            # Kafka's rule (KafkaChannel): a client re-authenticating in a loop (a token about
            # to expire and no new one yet) is refused, not given ever shorter sessions
            return response(error_code=errors.ILLEGAL_SASL_STATE, mechanisms=self.mechanisms)
        self._begin(mechanism)
        self._begun_at = now
        self.raw_tokens = request.version == 0
        return response(error_code=errors.NONE, mechanisms=self.mechanisms)

    def raw_token(self, token: bytes) -> Coroutine[Any, Any, bytes]:
        """The answer to a raw SASL token (after SaslHandshake v0), to be awaited: the
        server's token as a frame, or b"" with ``failed`` set (the connection closes)."""
        return self._raw_token(token)

    async def _raw_token(self, token: bytes) -> bytes:
        mechanism = self.mechanism
        try:
            answer = await self._step(token)
        except Exception as exc:  # SaslFailure, BrokerError or any other: v0 cannot say which
            log.info("Kafka SASL (handshake v0) failed: %r", exc)
            self.failed, self.raw_tokens = True, False
            return b""
        if self.mechanism is None:  # done: requests again from the next frame
            self.raw_tokens = False
            if mechanism == GSSAPI:  # RFC 4752 ends on the client's message: no frame
                return b""
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
        done = self.mechanism is None  # (a SCRAM exchange's first round is not)
        return response(
            error_code=errors.NONE,
            error_message=None,
            auth_bytes=token,
            session_lifetime_ms=(self.session_lifetime_ms or 0) if done else 0,
        )

    def _begin(self, mechanism: str) -> None:
        self.mechanism, self._scram, self._gssapi = mechanism, None, None
        self._reauthenticating = self.user is not None

    def _report(self, succeeded: bool, mechanism: str | None) -> None:
        if self.on_event is not None and mechanism is not None:
            event = "reauthenticat" if self._reauthenticating else "authenticat"
            self.on_event(event + ("ed" if succeeded else "ion_failed"), mechanism)

    def session_expired(self) -> None:
        """The connection closes: a request came after the session ended."""
        if self.on_event is not None and self.session_mechanism is not None:
            self.on_event("session_expired", self.session_mechanism)

    async def _step(self, token: bytes) -> bytes:
        """One SaslAuthenticate token in, the server's token out; SaslFailure when the
        exchange fails. Sets ``user`` when it succeeded."""
        mechanism = self.mechanism
        try:
            answer = await self._exchange(token)
        except Exception:
            self._report(False, mechanism)
            raise
        if self.mechanism is None:  # the exchange is over
            self._report(True, mechanism)
        return answer

    async def _exchange(self, token: bytes) -> bytes:
        if self.authenticator is None or self.mechanism is None:
            raise SaslFailure(errors.ILLEGAL_SASL_STATE, "SaslHandshake first")
        if self.mechanism == GSSAPI:  # (binary tokens)
            return await self._gssapi_step(self.authenticator, token)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, "malformed SASL token") from None
        if self.mechanism == PLAIN:
            return await self._plain(self.authenticator, text)
        if self.mechanism == OAUTHBEARER:
            return await self._oauthbearer(self.authenticator, text)
        return await self._scram_step(self.authenticator, self.mechanism, text)

    async def _plain(self, authenticator: Authenticator, text: str) -> bytes:
        parts = text.split("\0")  # [authzid] NUL authcid NUL passwd (RFC 4616)
        if len(parts) != 3 or parts[0] not in ("", parts[1]):
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, "malformed PLAIN token")
        _, user, password = parts
        if not await authenticator.check(user, password.encode()):
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, FAILED)
        self._succeed(user, PLAIN)
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
        self._succeed(user, mechanism)
        return final.encode()

    async def _gssapi_step(self, authenticator: Authenticator, token: bytes) -> bytes:
        acceptor = authenticator.kerberos
        assert acceptor is not None  # offered only with --kerberos-keytab
        if self._gssapi is None:
            self._gssapi = acceptor.exchange()
        exchange = self._gssapi
        try:
            answer = await asyncio.to_thread(exchange.step, token)
        except KerberosError as exc:
            self._gssapi = None
            log.info("Kafka GSSAPI authentication failed: %s", exc)
            raise SaslFailure(
                errors.SASL_AUTHENTICATION_FAILED,
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism GSSAPI: {exc}",
            ) from None
        if exchange.user is not None:
            self._gssapi = None
            log.debug("Kafka GSSAPI: %s is User:%s", exchange.principal, exchange.user)
            self._succeed(exchange.user, GSSAPI)
        return answer

    async def _oauthbearer(self, authenticator: Authenticator, text: str) -> bytes:
        validator = authenticator.bearer
        assert validator is not None  # offered only with --oauth-jwks
        self.mechanism = None
        try:
            token, authorization_id = parse_oauthbearer(text)
        except ValueError as exc:
            raise SaslFailure(errors.SASL_AUTHENTICATION_FAILED, str(exc)) from None
        try:
            bearer = await validator.validate(token)
        except TokenError as exc:
            log.info("Kafka OAUTHBEARER authentication failed: %s", exc)
            raise SaslFailure(
                errors.SASL_AUTHENTICATION_FAILED, f"Authentication failed: {exc}"
            ) from None
        if authorization_id not in ("", bearer.principal):
            raise SaslFailure(
                errors.SASL_AUTHENTICATION_FAILED,
                "Authentication failed: the authorization id is not the token's principal",
            )
        self._succeed(bearer.principal, OAUTHBEARER, bearer.expires_at_ms)
        return b""

    def _succeed(self, user: str, mechanism: str, expires_at_ms: int | None = None) -> None:
        """A session for ``user`` begins (``expires_at_ms``: its credential's end, in ms since
        the epoch); SaslFailure when it re-authenticates another principal."""
        self.mechanism = None
        if self.user is not None and user != self.user:
            log.info("Kafka SASL re-authentication refused: User:%s after User:%s", user, self.user)
            raise SaslFailure(
                errors.SASL_AUTHENTICATION_FAILED,
                f"Cannot change principals during re-authentication from User.{self.user}: "
                f"User.{user}",
            )
        lifetimes = [self.max_reauth_ms] if self.max_reauth_ms > 0 else []
        if expires_at_ms is not None:
            lifetimes.append(max(1, expires_at_ms - int(time.time() * 1000)))
        self.session_lifetime_ms = min(lifetimes) if lifetimes else None
        loop_now = asyncio.get_running_loop().time()
        self.expires_at = (
            loop_now + self.session_lifetime_ms / 1000 if self.session_lifetime_ms else None
        )
        self.user, self.session_mechanism = user, mechanism


def _scram_user(client_first: str) -> str:
    """The user name of a client-first message (``n,,n=<saslname>,r=<nonce>``)."""
    parts = client_first.split(",")
    if len(parts) < 4 or not parts[2].startswith("n="):
        raise ScramException("malformed client-first message")
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")


def _dummy_secret(user: str) -> ScramSecret:
    digest = hmac.new(_DUMMY_KEY, user.encode(), hashlib.sha512).digest()
    return ScramSecret(digest[:16], digest[16:48], digest[48:], SCRAM_ITERATIONS)


def _mechanisms(authenticator: Authenticator | None) -> list[str]:
    """The mechanisms a pod offers: the password ones with users, OAUTHBEARER with a
    token validator, GSSAPI with a keytab."""
    if authenticator is None:
        return []
    offered = list(PASSWORD_MECHANISMS) if authenticator.users else []
    if authenticator.bearer is not None:
        offered.append(OAUTHBEARER)
    if authenticator.kerberos is not None:
        offered.append(GSSAPI)
    return offered


# RFC 7628's "auth" value, as Kafka's OAuthBearerClientInitialResponse reads it
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")


def parse_oauthbearer(message: str) -> tuple[str, str]:
    """An OAUTHBEARER client initial response (RFC 7628: ``n,[a=<authzid>],`` then
    ``\x01``-ended ``key=value`` pairs, ``auth=Bearer <token>`` among them, then ``\x01``):
    its token and authorization id (empty when none); ValueError when malformed. Other
    pairs (``host``, ``port``, KIP-342 extensions) are accepted and left unused."""
    header, separator, pairs = message.partition("\x01")
    gs2 = header.split(",")
    if not separator or len(gs2) != 3 or gs2[0] not in ("n", "y") or gs2[2]:
        raise ValueError("malformed OAUTHBEARER message: no GS2 header")
    if gs2[1] and not gs2[1].startswith("a="):
        raise ValueError("malformed OAUTHBEARER message: bad authorization id")
    authorization_id = gs2[1][2:]
    if not pairs.endswith("\x01\x01"):
        raise ValueError("malformed OAUTHBEARER message: not ended by two \\x01")
    values: dict[str, str] = {}
    for pair in pairs[:-2].split("\x01"):
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError("malformed OAUTHBEARER message: a key/value pair without '='")
        values[key] = value
    auth = _AUTH.fullmatch(values.get("auth", ""))
    if auth is None or auth["scheme"].lower() != "bearer":
        raise ValueError("malformed OAUTHBEARER message: no 'auth=Bearer <token>'")
    return auth["token"], authorization_id
