"""TLS for the client listener (``--tls-cert``/``--tls-key``, optionally ``--tls-client-ca``
to require client certificates signed by that CA); clients use `adapter.client.tls`."""

from __future__ import annotations

import ssl
from pathlib import Path

from adapter.settings import Settings

# A client that has not finished its TLS handshake by then is dropped.
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


def listener_context(settings: Settings) -> ssl.SSLContext | None:
    """The client listener's TLS context; None for plain TCP (no certificate configured)."""
    if settings.tls_cert is None:
        return None
    return server_context(
        settings.tls_cert, settings.tls_key or settings.tls_cert, settings.tls_client_ca
    )
