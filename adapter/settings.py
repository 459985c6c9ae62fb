"""One pod's settings (filled from the CLI and ``ADAPTER_*`` environment variables)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mapping.codec import DEFAULT_SEQUENCE_BITS
from mapping.keys import DEFAULT_PREFIX
from mapping.store import TopicDefaults


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None  # None: start an embedded redis-server in data_dir
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path(".adapter-data")
    key_prefix: str = DEFAULT_PREFIX
    sequence_bits: int = DEFAULT_SEQUENCE_BITS
    topic_defaults: TopicDefaults = TopicDefaults()
    max_line_bytes: int = 1 << 20
    consume_max_records: int = 1000
    acks_timeout_ms: int = 2000
    replica_lag_max_ms: int = 10_000
    session_timeout_ms: int = 10_000
    redis_timeout_ms: int = 5000
    redis_startup_timeout_s: float = 30.0
    replicator: bool = True
    log_level: str = "INFO"
    redis_wait_replicas: int = 0  # acks=all also waits for Redis WAIT <n> (0: off)
    shutdown_timeout_ms: int = 10_000  # SIGTERM: longest wait for open requests' answers
    log_format: str = "json"  # json (one object per line) or text
    metrics_port: int = 0  # Prometheus endpoint on this port (0: off)
    metrics_host: str = "0.0.0.0"
    retention_interval_ms: int = 30_000  # how often the pod's retention task runs
    redis_appendfsync: str = "everysec"  # the embedded redis-server's AOF fsync policy
    workers: int = 1  # processes sharing the port through SO_REUSEPORT
