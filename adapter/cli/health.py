"""``python -m adapter ping``: exit 0 when a pod (or the load balancer) answers PING, checked
end to end as a client sees it: over TLS when the pod serves TLS, after AUTH when the pod
requires it. (Orchestrators' probes use the pod's /livez and /readyz on the metrics port,
which start no Python process: docs/operations.md.)"""

from __future__ import annotations

from pathlib import Path

import click

_file = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9092, type=click.IntRange(1, 65535), show_default=True)
@click.option("--timeout", default=3.0, type=click.FloatRange(0.1), show_default=True)
@click.option(
    "--tls/--no-tls",
    default=False,
    help="Connect with TLS (implied by --tls-ca/--tls-cert), trusting the system's CAs.",
)
@click.option("--tls-ca", default=None, type=_file, help="TLS: trust this PEM CA for the pod.")
@click.option(
    "--tls-cert",
    default=None,
    type=_file,
    help="TLS: client certificate, for a pod started with --tls-client-ca.",
)
@click.option("--tls-key", default=None, type=_file, help="TLS: private key of --tls-cert.")
@click.option("--user", default=None, help="AUTH as this user (pods with --auth-*).")
@click.option(
    "--password",
    default=None,
    envvar="ADAPTER_PING_PASSWORD",
    show_envvar=True,
    help="Password of --user; prefer the environment variable.",
)
def ping(
    host: str,
    port: int,
    timeout: float,
    tls: bool,
    tls_ca: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    user: str | None,
    password: str | None,
) -> None:
    """Send V1 PING (after AUTH with --user); exit 1 unless the answer is pong."""
    from adapter.client import Client
    from adapter.client.tls import client_context

    if tls_key is not None and tls_cert is None:
        raise click.UsageError("--tls-key needs --tls-cert")
    if (user is None) != (password is None):
        raise click.UsageError("--user and --password go together")
    use_tls = tls or tls_ca is not None or tls_cert is not None
    try:
        context = client_context(tls_ca, tls_cert, tls_key) if use_tls else None
        with Client(host, port, timeout=timeout, ssl_context=context) as client:
            if user is not None and password is not None:
                client.auth(user, password)
            answer = client.ping()
    except Exception as exc:  # any failure is "unhealthy", with the reason
        raise click.ClickException(f"no answer from {host}:{port}: {exc}") from None
    if answer != "pong":
        raise click.ClickException(f"unexpected answer from {host}:{port}: {answer!r}")
    click.echo(answer)
