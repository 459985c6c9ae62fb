"""The V1 line protocol, sans-I/O: pure functions over bytes, no sockets.

    request:  V1|<correlation_id>|<command>|<args>
    replies:  V1|<cid>|OK   V1|<cid>|OK|<payload>   V1|<cid>|ERR|<CODE>|<message>

Lines end with ``\\n`` (a trailing ``\\r`` is dropped). Bytes that are not UTF-8 are carried
through as surrogate escapes, so any byte string in an argument reaches the handler intact.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import NamedTuple

VERSION = "V1"
ENCODING = "utf-8"
ERRORS = "surrogateescape"
DEFAULT_MAX_LINE_BYTES = 1 << 20
EXPECTED_FORMAT = "expected format V1|<correlation_id>|<command>|<args>"


class ParseError(Exception):
    """The line is not a V1 request; answered with correlation id 0."""


class Request(NamedTuple):
    # a tuple: made for every line, and a frozen dataclass's __init__ costs several times more
    correlation_id: str
    command: str  # upper case
    args: list[str]


def parse_request(line: bytes) -> Request:
    text = line.decode(ENCODING, ERRORS).strip()
    if not text:
        raise ParseError("empty request")
    parts = text.split("|", 3)
    if len(parts) != 4:
        raise ParseError(EXPECTED_FORMAT)
    version, correlation_id, command, args = parts
    if version != VERSION:
        raise ParseError(f"unsupported protocol version: expected {VERSION}")
    correlation_id = correlation_id.strip()
    if not correlation_id:
        raise ParseError("missing correlation id")
    command = command.strip()
    if not command:
        raise ParseError("missing command")
    return Request(correlation_id, command.upper(), args.split())


def format_ok(correlation_id: str, payload: str | None = None) -> bytes:
    if payload is None:
        return f"{VERSION}|{correlation_id}|OK\n".encode(ENCODING, ERRORS)
    return f"{VERSION}|{correlation_id}|OK|{payload}\n".encode(ENCODING, ERRORS)


def format_error(correlation_id: str, code: str, message: str) -> bytes:
    # A message never spans lines: it may echo client input.
    message = message.replace("\n", " ").replace("\r", " ")
    return f"{VERSION}|{correlation_id}|ERR|{code}|{message}\n".encode(ENCODING, ERRORS)


def format_list(items: list[int] | list[str]) -> str:
    return "[" + " ".join(str(item) for item in items) + "]"


def format_bool(value: bool) -> str:
    return "true" if value else "false"


class LineFramer:
    """Splits a byte stream into lines.

    ``feed`` returns the complete lines so far. Once a line exceeds ``max_line_bytes`` the
    framer sets ``overflowed``: the caller answers ``line too long`` and closes.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.max_line_bytes = max_line_bytes
        self.overflowed = False
        self._buffer = bytearray()

    def _too_long(self, line: bytes | bytearray, terminated: bool) -> bool:
        """The limit counts the line without its ``\n`` / ``\r\n`` terminator."""
        size = len(line)
        if size <= self.max_line_bytes:
            return False
        if terminated:
            return not (size == self.max_line_bytes + 1 and line.endswith(b"\r"))
        # An unterminated buffer may still end in the ``\r`` of a ``\r\n``.
        return size > self.max_line_bytes + 1 or not line.endswith(b"\r")

    def feed(self, data: bytes) -> list[bytes]:
        if self.overflowed:
            return []
        complete: list[bytes] = []
        if b"\n" in data:
            # Only the new data is searched for line ends: a long line that arrives in many
            # small reads costs linear time.
            head, *middle, tail = data.split(b"\n")
            self._buffer += head
            lines = [bytes(self._buffer), *middle]
            self._buffer = bytearray(tail)
            for line in lines:
                if self._too_long(line, terminated=True):
                    self.overflowed = True
                    self._buffer = bytearray()
                    return complete
                complete.append(line[:-1] if line.endswith(b"\r") else line)
        else:
            self._buffer += data
        if self._too_long(self._buffer, terminated=False):
            self.overflowed = True
            self._buffer = bytearray()
        return complete


# --- a Kafka client on the V1 port ---------------------------------------------------
# A Kafka request is a frame: a 4-byte big-endian size, then the header: api_key (int16),
# api_version (int16), correlation id (int32), client id (nullable string, an int16 length).
# A V1 line starts with text ("V1|", or whitespace), which read as a size is hundreds of
# MiB: no request a Kafka client opens with is that long.
_KAFKA_START = struct.Struct(">iHh")
KAFKA_HEADER_BYTES = _KAFKA_START.size  # enough to tell
_MIN_KAFKA_FRAME = 10  # a header with a null client id
_MAX_KAFKA_FRAME = 100 << 20  # the Kafka listener's default --kafka-max-request-bytes
_MAX_FIRST_BYTE = _MAX_KAFKA_FRAME >> 24
_MAX_API_KEY = 127  # Kafka's API keys are below 100
_MAX_API_VERSION = 63  # and their versions below 20
# What Kafka clients send first: ApiVersions (librdkafka, kafka-python, the Java client),
# Metadata (older clients), SaslHandshake (SASL before anything else).
_OPENING_APIS = {18: "ApiVersions", 3: "Metadata", 17: "SaslHandshake"}


class FirstBytes(enum.Enum):
    """What a connection's first bytes are: V1 (or anything else, answered as V1 answers),
    a Kafka request frame, or too few bytes to tell yet."""

    V1 = "v1"
    KAFKA = "kafka"
    UNDECIDED = "undecided"


def classify_first_bytes(data: bytes) -> FirstBytes:
    """Whether ``data``, the first bytes a client sent on the V1 port, starts a Kafka
    request frame. UNDECIDED only while fewer than ``KAFKA_HEADER_BYTES`` arrived, with no
    line end among them, and they could still start a frame (a client writes a request in
    one go, so this lasts one read at most)."""
    if not data:
        return FirstBytes.UNDECIDED
    if data[0] > _MAX_FIRST_BYTE:
        return FirstBytes.V1
    if len(data) < KAFKA_HEADER_BYTES:
        return FirstBytes.V1 if b"\n" in data else FirstBytes.UNDECIDED
    size, api_key, api_version = _KAFKA_START.unpack_from(data)
    if (
        _MIN_KAFKA_FRAME <= size <= _MAX_KAFKA_FRAME
        and api_key <= _MAX_API_KEY
        and 0 <= api_version <= _MAX_API_VERSION
    ):
        return FirstBytes.KAFKA
    return FirstBytes.V1


def kafka_request_name(data: bytes) -> str:
    """``ApiVersions v3``: the request a Kafka frame starts with (``data`` classified KAFKA)."""
    _, api_key, api_version = _KAFKA_START.unpack_from(data)
    return f"{_OPENING_APIS.get(api_key, f'API key {api_key}')} v{api_version}"


# --- the client side -------------------------------------------------------------------


def format_request(correlation_id: str | int, command: str, args: str = "") -> bytes:
    return f"{VERSION}|{correlation_id}|{command}|{args}\n".encode(ENCODING, ERRORS)


@dataclass(frozen=True, slots=True)
class Response:
    correlation_id: str
    ok: bool
    payload: str = ""  # OK payload
    code: str = ""  # ERR code
    message: str = ""  # ERR message

    def fields(self) -> dict[str, str]:
        return parse_payload(self.payload)


def parse_response(line: bytes) -> Response:
    text = line.decode(ENCODING, ERRORS).rstrip("\r\n")
    parts = text.split("|", 3)
    if len(parts) < 3 or parts[0] != VERSION:
        raise ParseError(f"not a V1 response: {text!r}")
    _, correlation_id, status, *rest = parts
    if status == "OK":
        return Response(correlation_id, True, payload=rest[0] if rest else "")
    if status == "ERR" and rest:
        code, _, message = rest[0].partition("|")
        return Response(correlation_id, False, code=code, message=message)
    raise ParseError(f"not a V1 response: {text!r}")


def parse_payload(payload: str) -> dict[str, str]:
    """``a=1 b=[0 1] c=`` -> ``{"a": "1", "b": "[0 1]", "c": ""}`` (lists keep their brackets)."""
    fields: dict[str, str] = {}
    tokens = payload.split(" ")
    i = 0
    while i < len(tokens):
        name, _, value = tokens[i].partition("=")
        if value.startswith("[") and not value.endswith("]"):
            while i + 1 < len(tokens) and not value.endswith("]"):
                i += 1
                value += " " + tokens[i]
        if name:
            fields[name] = value
        i += 1
    return fields


def parse_list(text: str) -> list[int]:
    """``[0 1 2]`` -> ``[0, 1, 2]``."""
    return [int(item) for item in text.strip("[]").split()]
