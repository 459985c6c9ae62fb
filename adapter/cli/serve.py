"""``python -m adapter serve``: run one pod.

Its options are `Settings`' fields (declared in ``adapter/settings.py``), shown by ``--help``
under the headings of `SECTIONS`. Every option can also be set by an environment variable
``ADAPTER_<OPTION>`` (shown in ``--help``), which is how the docker-compose stack configures
pods. What the pod runs on (anyio, redis, the embedded redis-server) is imported when it runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from adapter import logs
from adapter.cli.errors import describe, name_redis, show_tracebacks
from adapter.cli.options import check_tls_options
from adapter.declare import click_options, declared_options, from_options
from adapter.settings import Settings
from mapping.core.errors import ConfigurationError

if TYPE_CHECKING:
    from mapping.connection.embedded import RedisProcess

# ``serve --help``'s headings and the options under each (by parameter name), in this
# order; an option missing here is listed under "Other options" (tests/cli checks none is).
SECTIONS: list[tuple[str, list[str]]] = [
    (
        "Listeners",
        ["host", "port", "kafka", "kafka_host", "kafka_port", "kafka_advertised_listener",
         "workers", "uvloop", "shutdown_timeout_ms"],
    ),
    (
        "Redis",
        ["redis_url", "redis_sentinel", "redis_sentinel_master", "redis_sentinel_username",
         "redis_sentinel_password", "redis_username", "redis_password", "redis_tls_ca",
         "redis_tls_cert", "redis_tls_key", "key_prefix", "redis_timeout_ms",
         "redis_startup_timeout_s", "require_aof", "allow_evicting_redis", "append_module"],
    ),
    ("Embedded Redis (no --redis-url)", ["data_dir", "embedded_redis_port", "redis_appendfsync"]),
    (
        "Topics and offsets",
        ["default_partitions", "default_replication_factor", "default_min_insync_replicas",
         "auto_create_topics", "max_topics", "retention_interval_ms", "sequence_bits"],
    ),
    (
        "Replication and acks",
        ["acks_timeout_ms", "replica_lag_max_ms", "replicator", "redis_wait_replicas"],
    ),
    (
        "Groups",
        ["session_timeout_ms", "offsets_retention_minutes", "offsets_topic",
         "kafka_group_initial_rebalance_delay_ms", "kafka_group_min_session_timeout_ms",
         "kafka_group_max_session_timeout_ms", "kafka_group_consumer_session_timeout_ms",
         "kafka_group_consumer_heartbeat_interval_ms"],
    ),
    (
        "Kafka",
        ["kafka_max_request_bytes", "kafka_max_message_bytes", "kafka_producer_id_expiration_ms",
         "kafka_fetch_session_slots", "kafka_fetch_read_ahead_bytes",
         "transaction_max_timeout_ms",
         "transactional_id_expiration_ms", "transaction_check_interval_ms"],
    ),
    (
        "Limits and backpressure",
        ["max_line_bytes", "consume_max_records", "consume_max_bytes", "max_connections",
         "idle_timeout_s", "tcp_keepalive_s", "max_in_flight", "max_append_bytes",
         "max_connection_append_bytes"],
    ),
    (
        "TLS and authentication",
        ["tls_cert", "tls_key", "tls_client_ca", "auth_file", "auth_redis", "auth_timeout_s",
         "oauth_jwks", "oauth_issuer", "oauth_audience", "oauth_subject_claim",
         "oauth_clock_skew_s", "kerberos_keytab", "kerberos_principal",
         "kerberos_principal_to_local_rules", "max_reauth_ms"],
    ),
    ("Authorization", ["authorizer", "super_users", "allow_everyone_if_no_acl_found"]),
    ("Metrics and logs", ["metrics_port", "metrics_host", "log_format", "log_level"]),
]  # fmt: skip
OTHER = "Other options"


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options under the headings of `SECTIONS` (click
    has one flat list)."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records: dict[str, tuple[str, str]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.name is not None:
                records[param.name] = record
        for heading, names in [*SECTIONS, (OTHER, list(records))]:
            rows = [records.pop(name) for name in names if name in records]
            if rows:
                with formatter.section(heading):
                    formatter.write_dl(rows)


@click.command(
    cls=SectionedCommand,
    context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True},
)
@click_options(declared_options(Settings))
def serve(**options: Any) -> None:
    """Run one stateless adapter pod."""
    check_tls_options(options)
    settings = from_options(Settings, options)
    logs.configure(settings.log_level, settings.log_format)
    run(settings)


def run(settings: Settings) -> None:
    """Serve until interrupted, with an embedded Redis when no URL is given."""
    import anyio

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
    from mapping.connection.embedded import DataDirInUse, RedisProcess, port_is_free

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
    from mapping.connection.embedded import redis_dir_on

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
    import anyio

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
