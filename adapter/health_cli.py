"""``python -m adapter ping``: exit 0 when a pod (or the load balancer) answers PING; the
health check of the Docker image and the compose stack."""

from __future__ import annotations

import click

from adapter.client import Client


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9092, type=click.IntRange(1, 65535), show_default=True)
@click.option("--timeout", default=3.0, type=click.FloatRange(0.1), show_default=True)
def ping(host: str, port: int, timeout: float) -> None:
    """Send V1 PING; exit 1 unless the answer is pong."""
    try:
        with Client(host, port, timeout=timeout) as client:
            answer = client.ping()
    except Exception as exc:  # any failure is "unhealthy", with the reason
        raise click.ClickException(f"no answer from {host}:{port}: {exc}") from None
    if answer != "pong":
        raise click.ClickException(f"unexpected answer from {host}:{port}: {answer!r}")
    click.echo(answer)
