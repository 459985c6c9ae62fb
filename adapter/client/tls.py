"""TLS for clients of the adapter (the pod's side is `adapter.tls`)."""

from __future__ import annotations

import ssl
from pathlib import Path


def client_context(
    ca: Path | str | None = None,
    cert: Path | str | None = None,
    key: Path | str | None = None,
    *,
    insecure: bool = False,
) -> ssl.SSLContext:
    """For `adapter.client`: trust ``ca`` (else the system's CAs); present ``cert``/``key``
    when the pod verifies client certificates. ``insecure`` checks neither the pod's
    certificate nor its name: anyone in the path can read and change the traffic, so it is
    for tests and throw-away set-ups only."""
    if insecure and ca is not None:
        raise ValueError("insecure trusts no CA: give ca or insecure, not both")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    if insecure:
        context.check_hostname = False  # before verify_mode: ssl requires this order
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(certfile=cert, keyfile=key)
    return context
