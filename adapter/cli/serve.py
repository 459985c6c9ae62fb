"""``python -m adapter serve``: run one pod.

Every option can also be set by an environment variable ``ADAPTER_<OPTION>`` (shown in
``--help``), which is how the docker-compose stack configures pods.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import anyio
import click

from adapter import logs
from adapter.cli.options import check_tls_options, security_options
from adapter.settings import Settings
from mapping.codec import DEFAULT_SEQUENCE_BITS, MAX_SEQUENCE_BITS, MIN_SEQUENCE_BITS
from mapping.embedded import RedisProcess, port_is_free
from mapping.errors import ConfigurationError
from mapping.keys import DEFAULT_PREFIX
from mapping.topics import TopicDefaults

defaults = Settings()


@click.command(context_settings={"auto_envvar_prefix": "ADAPTER", "show_default": True})
@click.option(
    "--redis-url",
    default=None,
    show_envvar=True,
    help="redis://HOST:PORT/DB (rediss:// for TLS, redis+cluster://HOST:PORT for a cluster; "
    "or --redis-sentinel). Unset: start an embedded redis-server with AOF in --data-dir.",
)
@click.option("--host", default=defaults.host, show_envvar=True, help="Address to listen on.")
@click.option(
    "--port",
    default=defaults.port,
    type=click.IntRange(0, 65535),
    show_envvar=True,
    help="TCP port to listen on.",
)
@click.option(
    "--data-dir",
    default=defaults.data_dir,
    type=click.Path(path_type=Path),
    show_envvar=True,
    help="Where the embedded redis-server keeps its AOF.",
)
@click.option(
    "--embedded-redis-port",
    default=defaults.embedded_redis_port,
    type=click.IntRange(0, 65535),
    show_envvar=True,
    help="Port of the embedded redis-server (on 127.0.0.1; 0: any free port).",
)
@click.option(
    "--key-prefix",
    default=DEFAULT_PREFIX,
    show_envvar=True,
    help="Prefix of every Redis key (one deployment per prefix).",
)
@click.option(
    "--sequence-bits",
    default=DEFAULT_SEQUENCE_BITS,
    type=click.IntRange(MIN_SEQUENCE_BITS, MAX_SEQUENCE_BITS),
    show_envvar=True,
    help="B in offset = (ms << B) | seq; fixed for a deployment at first start.",
)
@click.option(
    "--default-partitions",
    default=defaults.topic_defaults.partitions,
    type=click.IntRange(1, 10_000),
    show_envvar=True,
    help="Partitions of an auto-created topic.",
)
@click.option(
    "--default-replication-factor",
    default=defaults.topic_defaults.replication_factor,
    type=click.IntRange(1, 16),
    show_envvar=True,
    help="Replication factor of an auto-created topic (leader + followers).",
)
@click.option(
    "--default-min-insync-replicas",
    default=defaults.topic_defaults.min_insync_replicas,
    type=click.IntRange(1, 16),
    show_envvar=True,
    help="min ISR of an auto-created topic, for acks=all.",
)
@click.option(
    "--auto-create-topics/--no-auto-create-topics",
    default=defaults.auto_create_topics,
    show_envvar=True,
    help="A command naming an unknown topic (V1, or Kafka Metadata when the client allows "
    "it) creates it with the defaults above; off: V1 answers ERR|UNKNOWN_TOPIC, Kafka "
    "UNKNOWN_TOPIC_OR_PARTITION (create topics with `adapter topic create`).",
)
@click.option(
    "--max-topics",
    default=defaults.max_topics,
    type=click.IntRange(0),
    show_envvar=True,
    help="Auto-creation stops at this many topics: one more answers ERR|TOPIC_LIMIT "
    "(0: no limit); `adapter topic create` is not limited.",
)
@click.option(
    "--offsets-retention-minutes",
    default=defaults.offsets_retention_minutes,
    type=click.FloatRange(0),
    show_envvar=True,
    help="A group with no member and no commit for this long expires: its committed "
    "offsets are deleted and it no longer holds topic retention (Kafka's "
    "offsets.retention.minutes; 0: never). Applied by the retention task.",
)
@click.option(
    "--max-line-bytes",
    default=defaults.max_line_bytes,
    type=click.IntRange(64),
    show_envvar=True,
    help="Longest request line; longer closes the connection.",
)
@click.option(
    "--consume-max-records",
    default=defaults.consume_max_records,
    type=click.IntRange(1),
    show_envvar=True,
    help="Most records one CONSUME returns.",
)
@click.option(
    "--acks-timeout-ms",
    default=defaults.acks_timeout_ms,
    type=click.IntRange(0),
    show_envvar=True,
    help="How long acks=all waits before REPLICATION_TIMEOUT.",
)
@click.option(
    "--replica-lag-max-ms",
    default=defaults.replica_lag_max_ms,
    type=click.IntRange(0),
    show_envvar=True,
    help="A follower not caught up for this long leaves the ISR.",
)
@click.option(
    "--session-timeout-ms",
    default=defaults.session_timeout_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="A group member without HEARTBEAT for this long is removed.",
)
@click.option(
    "--redis-timeout-ms",
    default=defaults.redis_timeout_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="Redis taking no byte of a pipeline, or giving no reply, for this long answers "
    "UNAVAILABLE (Kafka: KAFKA_STORAGE_ERROR, or REQUEST_TIMED_OUT for an append that was "
    "sent); a long pipeline Redis works through is not cut off.",
)
@click.option(
    "--replicator/--no-replicator",
    default=True,
    show_envvar=True,
    help="Run the built-in replicator (followers played by pods, one owner each).",
)
@click.option(
    "--redis-wait-replicas",
    default=defaults.redis_wait_replicas,
    type=click.IntRange(0),
    show_envvar=True,
    help="acks=all and commits also wait until this many Redis replicas have the write "
    "(Redis WAIT on the node that took it, within the acks timeout), and readers see only "
    "records the replicas have (docs/durability.md); 0: off.",
)
@click.option(
    "--redis-appendfsync",
    default=defaults.redis_appendfsync,
    type=click.Choice(["always", "everysec", "no"]),
    show_envvar=True,
    help="fsync policy of the embedded redis-server's AOF: always survives a power loss, "
    "everysec may lose the last second.",
)
@click.option(
    "--kafka/--no-kafka",
    default=defaults.kafka,
    show_envvar=True,
    help="Serve the Kafka wire protocol beside V1.",
)
@click.option(
    "--kafka-host",
    default=None,
    show_envvar=True,
    help="Address of the Kafka listener (default: --host).",
)
@click.option(
    "--kafka-port",
    default=defaults.kafka_port,
    type=click.IntRange(0, 65535),
    show_envvar=True,
    help="TCP port of the Kafka listener.",
)
@click.option(
    "--kafka-advertised-listener",
    default=None,
    show_envvar=True,
    metavar="HOST:PORT",
    help="The address Kafka clients are told to connect to (default: the listen address; "
    "behind a load balancer, its address: pods sharing it appear as one broker).",
)
@click.option(
    "--kafka-max-request-bytes",
    default=defaults.kafka_max_request_bytes,
    type=click.IntRange(64),
    show_envvar=True,
    help="Largest Kafka request frame; larger closes the connection.",
)
@click.option(
    "--kafka-max-message-bytes",
    default=defaults.kafka_max_message_bytes,
    type=click.IntRange(64),
    show_envvar=True,
    help="Largest RecordBatch a Kafka producer may send (else MESSAGE_TOO_LARGE).",
)
@click.option(
    "--kafka-producer-id-expiration-ms",
    default=defaults.kafka_producer_id_expiration_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="An idempotent producer's sequence state in a partition is dropped after this long "
    "without an append there (Kafka's producer.id.expiration.ms).",
)
@click.option(
    "--kafka-group-initial-rebalance-delay-ms",
    default=defaults.kafka_group_initial_rebalance_delay_ms,
    type=click.IntRange(0),
    show_envvar=True,
    help="A Kafka group's first rebalance waits this long for more members (Kafka's "
    "group.initial.rebalance.delay.ms; 0: off).",
)
@click.option(
    "--kafka-group-min-session-timeout-ms",
    default=defaults.kafka_group_min_session_timeout_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="Shortest session.timeout.ms a Kafka consumer may ask for (else INVALID_SESSION_TIMEOUT).",
)
@click.option(
    "--kafka-group-max-session-timeout-ms",
    default=defaults.kafka_group_max_session_timeout_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="Longest session.timeout.ms a Kafka consumer may ask for.",
)
@click.option(
    "--kafka-group-consumer-session-timeout-ms",
    default=defaults.kafka_group_consumer_session_timeout_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="KIP-848 (group.protocol=consumer) members' session (Kafka's "
    "group.consumer.session.timeout.ms).",
)
@click.option(
    "--kafka-group-consumer-heartbeat-interval-ms",
    default=defaults.kafka_group_consumer_heartbeat_interval_ms,
    type=click.IntRange(1),
    show_envvar=True,
    help="How often KIP-848 members are told to heartbeat (Kafka's "
    "group.consumer.heartbeat.interval.ms).",
)
@security_options
@click.option(
    "--workers",
    default=defaults.workers,
    type=click.IntRange(1, 512),
    show_envvar=True,
    help="Adapter processes sharing --port (SO_REUSEPORT), so one host uses all its cores.",
)
@click.option(
    "--shutdown-timeout-ms",
    default=defaults.shutdown_timeout_ms,
    type=click.IntRange(0),
    show_envvar=True,
    help="On SIGTERM the pod stops accepting and answers what it has read; connections "
    "still busy after this long are closed.",
)
@click.option(
    "--metrics-port",
    default=defaults.metrics_port,
    type=click.IntRange(0, 65535),
    show_envvar=True,
    help="Serve Prometheus metrics on this port at /metrics (0: off).",
)
@click.option(
    "--metrics-host",
    default=defaults.metrics_host,
    show_envvar=True,
    help="Address of the metrics endpoint.",
)
@click.option(
    "--retention-interval-ms",
    default=defaults.retention_interval_ms,
    type=click.IntRange(0),
    show_envvar=True,
    help="How often the pod enforces topic retention (0: never; one pod at a time does it).",
)
@click.option(
    "--uvloop/--no-uvloop",
    default=defaults.uvloop,
    show_envvar=True,
    help="Run on uvloop (when installed): about 25% more one-at-a-time requests per second "
    "and a lower p99 than asyncio's own loop (see the README's Performance).",
)
@click.option(
    "--log-format",
    default="json",
    show_envvar=True,
    type=click.Choice(logs.FORMATS),
    help="json: one JSON object per line (for log collectors); text: plain lines.",
)
@click.option(
    "--log-level",
    default=defaults.log_level,
    show_envvar=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def serve(
    default_partitions: int,
    default_replication_factor: int,
    default_min_insync_replicas: int,
    log_level: str,
    **options: object,
) -> None:
    """Run one stateless adapter pod."""
    check_tls_options(options)
    settings = Settings(
        topic_defaults=TopicDefaults(
            default_partitions, default_replication_factor, default_min_insync_replicas
        ),
        log_level=log_level.upper(),
        **options,  # type: ignore[arg-type]
    )
    logs.configure(settings.log_level, settings.log_format)
    run(settings)


def run(settings: Settings) -> None:
    """Serve until interrupted, with an embedded Redis when no URL is given."""
    from adapter.server import serve as serve_pod

    embedded: RedisProcess | None = None
    if settings.redis_url is None:
        embedded = _start_embedded(settings)
        settings = dataclasses.replace(settings, redis_url=embedded.url)
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
    if port and not port_is_free(port):
        raise click.ClickException(
            f"port {port} for the embedded redis-server is in use (another `make run`?): "
            "pass --embedded-redis-port 0 for any free port, or --redis-url to use that Redis"
        )
    embedded = RedisProcess(
        settings.data_dir, port or None, appendfsync=settings.redis_appendfsync
    ).start()
    click.echo(f"embedded redis-server with AOF on {embedded.url}, data in {settings.data_dir}")
    return embedded


def _worker_main(settings: Settings) -> None:
    """One of ``--workers`` processes (spawned, so it sets itself up)."""
    from adapter.server import serve as serve_pod

    logs.configure(settings.log_level, settings.log_format)
    try:
        anyio.run(serve_pod, settings, backend_options=settings.backend_options())
    except KeyboardInterrupt:
        pass
