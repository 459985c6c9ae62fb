"""Kafka SASL GSSAPI (Kerberos V5, RFC 4752) on the server side, as Kafka's broker does it.

The pod accepts as the service principals of its keytab (``--kerberos-keytab``; one of them
only with ``--kerberos-principal``): a client gets a ticket for ``<service>/<pod's host>``
from its KDC and sends it in the first token. The exchange (``GssapiExchange``):

1. the client's token (AP-REQ) in; the context's answer (AP-REP, mutual authentication)
   out;
2. an empty token in; the security layers offered out, wrapped: "no security layer" only
   (Kafka offers no other: TLS is the listener's business) and the largest buffer, 64 KiB;
3. the client's choice in, wrapped: "no security layer" and any authorization id (ignored
   as Kafka's broker ignores it); an empty token out, and the client is authenticated.

When the context needs no answer in step 1, step 2's message is its answer. The principal
(``alice@REALM``, ``svc/host@REALM``) is turned into the user the ACLs name by Kafka's
``sasl.kerberos.principal.to.local.rules`` (``PrincipalNamer``, ``--kerberos-principal-to-
local-rules``): ``DEFAULT`` gives the first component of a principal of the default realm,
``RULE:[n:format](match)s/from/to/g/L`` rewrites one of ``n`` components. A principal no
rule applies to fails the authentication, as in Kafka.

The ``gssapi`` package (MIT Kerberos' GSS-API) is needed only where a keytab is given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mapping.core.errors import ConfigurationError

GSSAPI = "GSSAPI"
NO_SECURITY_LAYER = 1  # RFC 4752's bit for "no security layer"
MAX_BUFFER = 65536  # the largest message the server says it takes (Java's default)


class KerberosError(Exception):
    """The exchange failed: a bad ticket, a wrong step, a principal no rule maps."""


# --- sasl.kerberos.principal.to.local.rules (Kafka's KerberosShortNamer) ------------------

_RULE = re.compile(
    r"(DEFAULT)|RULE:\[(\d+):([^\]]*)\](?:\(([^)]*)\))?(?:s/([^/]*)/([^/]*)/(g)?)?/?(L|U)?"
)
_PARAMETER = re.compile(r"\$(\d+)")
_NON_SIMPLE = re.compile(r"[/@]")
_NAME = re.compile(r"([^/@]*)(?:/([^/@]*))?@([^/@]*)")


@dataclass(frozen=True)
class Rule:
    """One rule: ``DEFAULT``, or ``RULE:`` with its parts."""

    default: bool = False
    components: int = 0
    format: str = ""
    match: re.Pattern[str] | None = None
    source: re.Pattern[str] | None = None
    target: str = ""
    repeat: bool = False
    case: str = ""  # "L": lower case, "U": upper case

    def apply(self, realm: str, parts: list[str], default_realm: str) -> str | None:
        """The short name, or None when the rule does not apply."""
        if self.default:
            result = parts[0] if realm == default_realm else None
        elif len(parts) != self.components:
            return None
        else:
            base = _replace_parameters(self.format, [realm, *parts])
            if self.match is not None and not self.match.fullmatch(base):
                return None
            result = base
            if self.source is not None:
                replace = _java_replacement(self.target)
                result = self.source.sub(replace, base, count=0 if self.repeat else 1)
        if result is not None and _NON_SIMPLE.search(result):
            raise KerberosError(f"Non-simple name {result} after auth_to_local rule")
        if result is not None and self.case == "L":
            return result.lower()
        if result is not None and self.case == "U":
            return result.upper()
        return result


def _replace_parameters(format_: str, params: list[str]) -> str:
    def parameter(found: re.Match[str]) -> str:
        index = int(found[1])
        if index >= len(params):
            raise KerberosError(
                f"index {index} from {format_} is outside of the valid range 0 to {len(params) - 1}"
            )
        return params[index]

    return _PARAMETER.sub(parameter, format_)


def _java_replacement(target: str) -> Any:
    """A replacement string of Java's ``Matcher.replaceAll`` (``$n`` a group, ``\\c`` the
    character c) as a function for ``re.sub``."""

    def replace(found: re.Match[str]) -> str:
        out, i = [], 0
        while i < len(target):
            char = target[i]
            if char == "\\" and i + 1 < len(target):
                out.append(target[i + 1])
                i += 2
            elif char == "$" and i + 1 < len(target) and target[i + 1].isdigit():
                digits = re.match(r"\d+", target[i + 1 :])
                assert digits is not None
                out.append(found.group(int(digits[0])) or "")
                i += 1 + len(digits[0])
            else:
                out.append(char)
                i += 1
        return "".join(out)

    return replace


@dataclass(frozen=True)
class PrincipalNamer:
    """Kafka's ``sasl.kerberos.principal.to.local.rules``: a Kerberos principal to the
    user name ACLs and quotas use (``User:<name>``)."""

    rules: tuple[Rule, ...]
    default_realm: str

    @classmethod
    def parse(cls, rules: list[str], default_realm: str) -> PrincipalNamer:
        """ValueError names a rule that does not parse."""
        parsed = []
        for text in rules:
            found = _RULE.fullmatch(text)
            if found is None:
                raise ValueError(f"Invalid rule: {text}")
            if found[1]:
                parsed.append(Rule(default=True))
                continue
            parsed.append(
                Rule(
                    components=int(found[2]),
                    format=found[3],
                    match=re.compile(found[4]) if found[4] is not None else None,
                    source=re.compile(found[5]) if found[5] is not None else None,
                    target=found[6] or "",
                    repeat=found[7] == "g",
                    case=found[8] or "",
                )
            )
        return cls(tuple(parsed), default_realm)

    def short_name(self, principal: str) -> str:
        found = _NAME.fullmatch(principal)
        if found is None:
            if "@" in principal:
                raise KerberosError(f"Malformed Kerberos name: {principal}")
            return principal  # already simple
        service, host, realm = found[1], found[2], found[3]
        parts = [service] if host is None else [service, host]
        for rule in self.rules:
            result = rule.apply(realm, parts, self.default_realm)
            if result is not None:
                return result
        raise KerberosError(f"No rules apply to {principal}")


# --- the acceptor ----------------------------------------------------------------------------


class KerberosAcceptor:
    """The pod's Kerberos credentials and naming rules; one ``GssapiExchange`` a client."""

    def __init__(self, credentials: Any, namer: PrincipalNamer) -> None:
        self.credentials = credentials
        self.namer = namer

    @classmethod
    def from_options(
        cls, keytab: Path | None, principal: str | None, rules: str
    ) -> KerberosAcceptor | None:
        """None without a keytab; ConfigurationError when the keytab, the principal or the
        rules cannot be used, or the gssapi package is missing."""
        if keytab is None:
            return None
        try:
            import gssapi
        except ImportError:  # (OSError: the GSS-API library itself is missing)
            raise ConfigurationError(
                "--kerberos-keytab needs the gssapi package: pip install 'redis-streams-adapter"
                "[kerberos]' (and MIT Kerberos' libgssapi-krb5)"
            ) from None
        try:
            name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
            credentials = gssapi.Credentials(
                name=name, usage="accept", store={b"keytab": str(keytab).encode()}
            )
            credentials.inquire()  # reads the keytab now, not at the first client
        except gssapi.exceptions.GSSError as exc:
            raise ConfigurationError(f"--kerberos-keytab {keytab}: {exc.gen_message()}") from None
        try:
            namer = PrincipalNamer.parse(_rule_list(rules), _default_realm(gssapi))
        except ValueError as exc:
            raise ConfigurationError(f"--kerberos-principal-to-local-rules: {exc}") from None
        return cls(credentials, namer)

    def exchange(self) -> GssapiExchange:
        return GssapiExchange(self)


def _rule_list(rules: str) -> list[str]:
    """Kafka's list syntax: comma-separated, blanks around each rule dropped."""
    return [rule.strip() for rule in rules.split(",") if rule.strip()]


def _default_realm(gssapi: Any) -> str:
    """krb5.conf's default_realm: a name without a realm, canonicalized, gets it."""
    try:
        probe = gssapi.Name("default", gssapi.NameType.kerberos_principal)
        return str(probe.canonicalize(gssapi.MechType.kerberos)).rpartition("@")[2]
    except gssapi.exceptions.GSSError:  # no default realm configured: DEFAULT never applies
        return ""


class GssapiExchange:
    """One client's GSSAPI exchange. ``step`` is blocking (the keytab, the replay cache):
    the caller runs it off the event loop."""

    def __init__(self, acceptor: KerberosAcceptor) -> None:
        import gssapi

        self._gssapi = gssapi
        self._acceptor = acceptor
        self._context = gssapi.SecurityContext(creds=acceptor.credentials, usage="accept")
        self._stage = "accept"  # then "confirm" (an empty token), "layer", "done"
        self.principal: str | None = None  # the Kerberos principal, once done
        self.user: str | None = None  # its short name, once done

    @property
    def done(self) -> bool:
        return self._stage == "done"

    def step(self, token: bytes) -> bytes:
        """The answer to the client's ``token``; KerberosError when the exchange fails."""
        try:
            return self._step(token)
        except self._gssapi.exceptions.GSSError as exc:
            raise KerberosError(exc.gen_message()) from None

    def _step(self, token: bytes) -> bytes:
        context = self._context
        if self._stage == "accept":
            answer = context.step(token) or b""
            if not context.complete:
                return answer
            if answer:
                self._stage = "confirm"
                return answer
            return self._offer_layers()
        if self._stage == "confirm":
            if token:
                raise KerberosError("Expecting zero length token")
            return self._offer_layers()
        if self._stage == "layer":
            chosen = context.unwrap(token).message
            if len(chosen) < 4 or not chosen[0] & NO_SECURITY_LAYER:
                raise KerberosError("the client chose a security layer that is not offered")
            self.principal = str(context.initiator_name)
            self.user = self._acceptor.namer.short_name(self.principal)
            self._stage = "done"
            return b""
        raise KerberosError("the GSSAPI exchange is over")

    def _offer_layers(self) -> bytes:
        self._stage = "layer"
        offer = bytes([NO_SECURITY_LAYER]) + MAX_BUFFER.to_bytes(3, "big")
        return self._context.wrap(offer, False).message
