"""``python -m adapter console``: the web console (adapter/console/, docs/console.md), its
own process on the deployment's Redis, with the same Redis options as every command.

    console [--host 127.0.0.1] [--port 9080] [--sample-interval-s 5]
            [--authorizer --super-users P,... --allow-everyone-if-no-acl-found]

It prints ``console: http://HOST:PORT/`` once it listens. Loopback by default; with users
in the deployment (``adapter user add``, Kafka's SCRAM users) every page needs a login, and
with ``--authorizer`` every page and action is checked against the ACLs as the pods check
them (give the pods' --super-users and --allow-everyone-if-no-acl-found too).
"""

from __future__ import annotations

import click

from adapter.cli import options
from adapter.cli.options import RedisTarget
from adapter.settings import Settings

_defaults = Settings()


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=9080, show_default=True,
              help="Port to listen on (0: any free one).")  # fmt: skip
@click.option(
    "--sample-interval-s", type=click.FloatRange(0.5), default=5.0, show_default=True,
    help="How often the rate and lag charts are sampled.",
)  # fmt: skip
@click.option(
    "--authorizer", is_flag=True,
    help="Check every page and action against the ACL bindings in Redis, as pods started "
    "with --authorizer do.",
)  # fmt: skip
@click.option(
    "--super-users", default="", metavar="PRINCIPAL,...",
    help="With --authorizer: principals allowed everything (the pods' value).",
)  # fmt: skip
@click.option(
    "--allow-everyone-if-no-acl-found", is_flag=True,
    help="With --authorizer: a resource no binding names is open to everyone (the pods').",
)  # fmt: skip
@click.option(
    "--session-timeout-ms", type=click.IntRange(1), default=_defaults.session_timeout_ms,
    show_default=True, help="A V1 member heard from within this long is live (the pods').",
)  # fmt: skip
@options.redis_target
def console(
    host: str,
    port: int,
    sample_interval_s: float,
    authorizer: bool,
    super_users: str,
    allow_everyone_if_no_acl_found: bool,
    session_timeout_ms: int,
    target: RedisTarget,
) -> None:
    """Serve the web console of the deployment: pods, topics, messages, groups and their
    lag, transactions, ACLs and quotas (docs/console.md)."""
    import asyncio
    import signal
    import socket
    import sys

    import uvicorn

    from adapter.console.app import ConsoleOptions, create_app

    client = target.connect()  # fail at once, in one line, when Redis cannot be reached
    try:
        client.ping()
    finally:
        client.close()
    app = create_app(
        ConsoleOptions(
            target.url, target.keys, target.login, sample_interval_s, authorizer, super_users,
            allow_everyone_if_no_acl_found, session_timeout_ms,
        )
    )  # fmt: skip
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets of that protocol only,
    # and the listener's own TCP_NODELAY is inherited by them (uvloop's too). Without it an
    # answer on a reused connection waits for the client's delayed ACK (about 40 ms).
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port} (--port): {exc}") from None
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))

    async def serve() -> None:
        running = asyncio.ensure_future(server.serve(sockets=[listener]))
        while not server.started and not running.done():
            await asyncio.sleep(0.05)
        if server.started:
            click.echo(f"console: http://{shown}:{bound}/")
            sys.stdout.flush()
        await running
        if not server.started:  # the start failed (the log says why)
            raise click.ClickException("the console could not start (see the log above)")

    def stopped(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    # uvicorn stops on SIGTERM, then raises it again for the handler in place before it: a
    # stop asked for is a clean exit, as the pods' (SIGINT: KeyboardInterrupt, below)
    signal.signal(signal.SIGTERM, stopped)
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
