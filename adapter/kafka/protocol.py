"""The Kafka protocol core, sans-I/O: a request frame in, a ``Request`` out; a response
message in, a response frame out. No sockets, no Redis: adapter/kafka/connection.py moves
the bytes, the API modules answer.

Request header v1 (v2 in flexible versions: tagged fields after the client id, KIP-482);
response header v0 (v1 in flexible versions, except ApiVersions: always v0, so a client
can read the reply to a version the broker does not know).

What closes the connection, as Kafka does: a frame above the size limit (framing.py), a
frame too short for a header, an API key the pod does not implement, a version of it the
pod does not serve (ApiVersions excepted: v0's reply with UNSUPPORTED_VERSION, as the
protocol requires, so a client can learn the versions). An undecodable body, or one its
API module fails on, gets INVALID_REQUEST in that API's response where the response has a
top-level error code; where it has none (Produce, CreateTopics, ListOffsets...), an empty
response would read as success for work not done, so the connection is closed instead.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapter.kafka import errors, fetch_codec, produce_codec
from adapter.kafka.versions import API_VERSIONS, IMPLEMENTED, PRODUCE, Api, supported_versions
from mapping.security.acls import ANONYMOUS

if TYPE_CHECKING:
    from adapter.kafka.fetch_ahead import Reader

log = logging.getLogger(__name__)

_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
# the hot paths' answers, coded by hand: they frame themselves
_HAND_CODED = (produce_codec.ProduceAnswer, fetch_codec.FetchAnswer)


class CloseConnection(Exception):
    """The request cannot be answered at all: the connection is closed."""


@dataclass(slots=True)
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the decoded request message; None when ``error`` is set
    error: int = errors.NONE  # UNSUPPORTED_VERSION or INVALID_REQUEST: answer with it
    client_host: str = ""  # the peer's address as Kafka shows it ("/127.0.0.1"; the connection's)
    principal: str = ANONYMOUS  # "User:<name>" once the connection authenticated (ACLs)
    reads_ahead: Reader | None = None  # the connection's record of Fetch's reads ahead


def parse_request(data: bytes) -> Request:
    """Decode one request frame (without its size prefix)."""
    if len(data) < _HEADER.size:
        raise CloseConnection(f"request of {len(data)} bytes is shorter than a header")
    api_key, version, correlation_id = _HEADER.unpack_from(data)
    api = IMPLEMENTED.get(api_key)
    if api is None:
        raise CloseConnection(f"unknown api key {api_key}")
    if not api.supports(version):
        if api is API_VERSIONS:
            return Request(api, version, correlation_id, None, None, errors.UNSUPPORTED_VERSION)
        raise CloseConnection(
            f"{api.name} v{version} is not served (v{api.min_version}-v{api.max_version})"
        )
    try:
        if api is PRODUCE:  # the hot path: its own codec (produce_codec.py)
            client_id, body = produce_codec.decode_request(data, version)
            return Request(api, version, correlation_id, client_id, body)
        body = api.request.decode(data, version=version, header=True)
    except Exception as exc:  # any malformed body: struct, unicode, index errors...
        log.info("undecodable %s v%d request: %r", api.name, version, exc)
        return Request(api, version, correlation_id, None, None, errors.INVALID_REQUEST)
    return Request(api, version, correlation_id, body.header.client_id, body)


def encode_response(request: Request, response: Any) -> bytes:
    """The response frame for ``request``: header and ``response`` in the request's version
    (a hand-coded answer, Produce's or Fetch's, frames itself)."""
    if isinstance(response, _HAND_CODED):
        return response.frame(request.version, request.correlation_id)
    response.API_VERSION = request.version  # before the header: a response header has none
    response.with_header(correlation_id=request.correlation_id)
    return bytes(response.encode(header=True, framed=True))


def carries_error_code(api: Api, version: int) -> bool:
    """Whether ``api``'s response in ``version`` has a top-level error code (from Kafka's
    message definition: the field's version range, such as ``"13+"`` or ``"2-5"``)."""
    for field in api.response._json["fields"]:
        if field["name"] == "ErrorCode":
            low, plus, high = field["versions"].partition("+")
            if plus:
                return version >= int(low)
            low, _, high = field["versions"].partition("-")
            return int(low) <= version <= int(high or low)
    return False


def error_response(request: Request) -> bytes | None:
    """The answer to a request that failed before or in its API module (``request.error``):
    that API's response with the error code; None when there is none to give, or no
    top-level error code to carry it (the connection is then closed)."""
    api = request.api
    if api is API_VERSIONS:  # an error reply is always v0 (clients read it as v0)
        reply = api.response[0](error_code=request.error, api_keys=supported_versions())
        reply.with_header(correlation_id=request.correlation_id)
        return bytes(reply.encode(header=True, framed=True))
    if not api.supports(request.version) or not carries_error_code(api, request.version):
        return None
    try:
        reply = api.response[request.version]()
        reply.error_code = request.error
        return encode_response(request, reply)
    except Exception:
        return None


def encode_request(api: Api, version: int, body: Any, correlation_id: int, client_id: str) -> bytes:
    """A request frame (tests, and a client's view of the core)."""
    body.API_VERSION = version
    body.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(body.encode(header=True, framed=True))
