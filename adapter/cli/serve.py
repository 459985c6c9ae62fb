"""``python -m adapter serve``: run one pod.

Its options are `Settings`' fields (declared in ``adapter/settings.py``). Every option can also
be set by an environment variable ``ADAPTER_<OPTION>`` (shown in ``--help``), which is how the
docker-compose stack configures pods.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import click

from adapter import logs
from adapter.cli.errors import describe, name_redis, show_tracebacks
from adapter.cli.options import check_tls_options
from adapter.declare import click_options, declared_options, from_options
from adapter.settings import Settings
from mapping.embedded import DataDirInUse, RedisProcess, port_is_free, redis_dir_on
from mapping.errors import ConfigurationError


@click.command(context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True})
@click_options(declared_options(Settings))
def serve(**options: object) -> None:
    """Run one stateless adapter pod."""
    check_tls_options(options)
    settings = from_options(Settings, options)
    logs.configure(settings.log_level, settings.log_format)
    run(settings)


def run(settings: Settings) -> None:
    """Serve until interrupted, with an embedded Redis when no URL is given."""
    from adapter.server import serve as serve_pod

    embedded: RedisProcess | None = None
    if settings.redis_url is None:
        embedded = _start_embedded(settings)
        settings = dataclasses.replace(settings, redis_url=embedded.url)
    name_redis(settings.redis_url)
    try:
        if settings.workers > 1:
            from adapter.workers import run_workers

            run_workers(settings, _worker_main)
        else:
            anyio.run(serve_pod, settings, backend_options=settings.backend_options())
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass
    finally:
        if embedded is not None:
            embedded.stop()


def _start_embedded(settings: Settings) -> RedisProcess:
    port = settings.embedded_redis_port
    embedded = RedisProcess(settings.data_dir, port or None, appendfsync=settings.redis_appendfsync)
    # the directory first: whatever the port, never a second server on the same AOF
    try:
        embedded.lock_data_dir()
    except DataDirInUse as exc:
        raise click.ClickException(
            f"data directory {settings.data_dir} is in use by another embedded redis-server "
            f"({exc.holder}): stop that process first, or start this pod on another data "
            "directory (--data-dir DIR, with --embedded-redis-port 0 when its port is taken), "
            "or serve that Redis with --redis-url"
        ) from None
    try:
        if port and not port_is_free(port):
            raise click.ClickException(_port_in_use(port, settings.data_dir))
        embedded.start()
    except BaseException:
        embedded.unlock_data_dir()
        raise
    click.echo(f"embedded redis-server with AOF on {embedded.url}, data in {settings.data_dir}")
    return embedded


def _port_in_use(port: int, data_dir: Path) -> str:
    """Why the fixed port cannot be used, and what to do: a Redis already serving this very
    directory (one started by hand, say) is served with --redis-url, never joined by a
    second server on another port."""
    served_dir = redis_dir_on(port)
    if served_dir is not None and Path(served_dir).resolve() == data_dir.resolve():
        return (
            f"port {port} is a redis-server on this data directory ({data_dir}): serve it with "
            f"--redis-url redis://127.0.0.1:{port}/0, or stop it first"
        )
    return (
        f"port {port} for the embedded redis-server is in use by another process (not on "
        f"this data directory, {data_dir}, which is free): pass --embedded-redis-port 0 for "
        f"any free port, or --redis-url redis://127.0.0.1:{port}/0 to serve that Redis"
    )


def _worker_main(settings: Settings) -> None:
    """One of ``--workers`` processes (spawned, so it sets itself up)."""
    from adapter.server import serve as serve_pod

    logs.configure(settings.log_level, settings.log_format)
    try:
        anyio.run(serve_pod, settings, backend_options=settings.backend_options())
    except KeyboardInterrupt:
        pass
    except Exception as exc:  # a process of its own: said here, as the command line says it
        if show_tracebacks():
            raise
        click.echo(f"Error: worker: {describe(exc)}", err=True)
        raise SystemExit(1) from None
