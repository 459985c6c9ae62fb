"""TLS for the client listener (``--tls-cert``/``--tls-key``, optionally ``--tls-client-ca``
to require client certificates signed by that CA) and for clients of the adapter."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import AnyByteStream
from anyio.streams.tls import TLSStream

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


def serve_over_tls(
    settings: Settings, handler: Callable[[AnyByteStream], Awaitable[None]]
) -> Callable[[AnyByteStream], Awaitable[None]]:
    """``handler`` itself on plain TCP; with a certificate configured, ``handler`` on the
    TLS stream once the handshake succeeded. A failed handshake (a plain-text client, a bad
    or missing client certificate, a scanner) is the client's problem: one log line, no
    traceback, the pod goes on."""
    if settings.tls_cert is None:
        return handler
    context = server_context(
        settings.tls_cert, settings.tls_key or settings.tls_cert, settings.tls_client_ca
    )

    async def over_tls(stream: AnyByteStream) -> None:
        try:
            with anyio.fail_after(HANDSHAKE_TIMEOUT_S):
                wrapped = await TLSStream.wrap(
                    stream, server_side=True, ssl_context=context, standard_compatible=False
                )
        except Exception as exc:  # ssl errors, resets, the handshake timeout
            await anyio.aclose_forcefully(stream)
            log.info("TLS handshake failed: %s", exc)
            return
        await handler(wrapped)

    return over_tls
