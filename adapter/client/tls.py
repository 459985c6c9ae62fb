"""TLS for clients of the adapter (the pod's side is `adapter.tls`)."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(
    ca: Path | str | None = None, cert: Path | str | None = None, key: Path | str | None = None
) -> ssl.SSLContext:
    """For `adapter.client`: trust ``ca`` (else the system's CAs); present ``cert``/``key``
    when the pod verifies client certificates."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if cert is not None:
        context.load_cert_chain(certfile=cert, keyfile=key)
    return context
