"""TLS for the client listener (``--tls-cert``/``--tls-key``, optionally ``--tls-client-ca``
to require client certificates signed by that CA) and for clients of the adapter."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import AnyByteStream, Listener
from anyio.streams.tls import TLSListener

from adapter.settings import Settings

log = logging.getLogger(__name__)
HANDSHAKE_TIMEOUT_S = 10.0


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """TLS 1.2+ with the certificate chain ``cert`` and its private ``key``; with
    ``client_ca``, a client must present a certificate that CA signed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=cert, keyfile=key)
    if client_ca is not None:
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(
    ca: Path | str | None = None, cert: Path | str | None = None, key: Path | str | None = None
) -> ssl.SSLContext:
    """For `adapter.client`: trust ``ca`` (else the system's CAs); present ``cert``/``key``
    when the pod verifies client certificates."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if cert is not None:
        context.load_cert_chain(certfile=cert, keyfile=key)
    return context


async def open_listener(settings: Settings) -> Listener[Any]:
    """The pod's client listener: plain TCP, or TLS when a certificate is configured."""
    listener: Listener[Any] = await anyio.create_tcp_listener(
        local_host=settings.host, local_port=settings.port, reuse_port=False
    )
    if settings.tls_cert is None:
        return listener
    context = server_context(
        settings.tls_cert, settings.tls_key or settings.tls_cert, settings.tls_client_ca
    )
    return QuietTLSListener(
        listener, context, standard_compatible=False, handshake_timeout=HANDSHAKE_TIMEOUT_S
    )


class QuietTLSListener(TLSListener):
    """A failed handshake (a plain-text client, a bad or missing client certificate, a
    scanner) is the client's problem: one log line, no traceback, the pod goes on."""

    @staticmethod
    async def handle_handshake_error(exc: BaseException, stream: AnyByteStream) -> None:
        from anyio import aclose_forcefully, get_cancelled_exc_class

        await aclose_forcefully(stream)
        if not isinstance(exc, Exception) or isinstance(exc, get_cancelled_exc_class()):
            raise exc
        log.info("TLS handshake failed: %s", exc)
