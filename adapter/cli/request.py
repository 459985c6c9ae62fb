"""``python -m adapter request``: send V1 requests to a pod and print its answers, one at a
time (each waits for its reply, as a person at a prompt would), like ``redis-cli`` for Redis.

    python -m adapter request 'PRODUCE orders user1:created acks=all' 'CONSUME orders 2 0'
    printf 'PING\\n' | python -m adapter request          # requests from standard input

A request is ``COMMAND ARGS`` (the tool adds ``V1|<n>|`` and the ``|`` after the command);
the replies are printed exactly as the pod sent them. The exit status is 1 when any reply
is an error (``V1|<n>|ERR|...``), so scripts can tell.
"""

from __future__ import annotations

import sys

import click


def _wire_line(request: str, correlation_id: int) -> bytes:
    command, _, args = request.strip().partition(" ")
    return f"V1|{correlation_id}|{command}|{args.strip()}\n".encode()


@click.command()
@click.argument("requests", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=9092, type=click.IntRange(1, 65535), show_default=True)
@click.option("--timeout", default=10.0, type=click.FloatRange(0.1), show_default=True)
def request(requests: tuple[str, ...], host: str, port: int, timeout: float) -> None:
    """Send each REQUEST ('COMMAND ARGS'; standard input when none) and print the replies;
    exit status 1 when any reply is an error."""
    from adapter.client import Client

    lines = list(requests) or [line for line in sys.stdin.read().splitlines() if line.strip()]
    failed = False
    try:
        with Client(host, port, timeout=timeout) as client:
            for correlation_id, line in enumerate(lines, start=1):
                client.send_raw(_wire_line(line, correlation_id))
                reply = client.read_line().decode("utf-8", "replace").rstrip("\r\n")
                click.echo(reply)
                failed = failed or reply.split("|", 3)[2:3] == ["ERR"]
    except OSError as exc:
        raise click.ClickException(f"no answer from {host}:{port}: {exc}") from None
    if failed:
        sys.exit(1)
