"""One pod's settings (filled from the CLI and ``ADAPTER_*`` environment variables)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mapping.cluster import credentials
from mapping.codec import DEFAULT_SEQUENCE_BITS
from mapping.keys import DEFAULT_PREFIX
from mapping.sentinel import sentinel_url
from mapping.topics import DEFAULT_TOPIC_CACHE_SIZE, TopicDefaults


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = None  # None: start an embedded redis-server in data_dir
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path(".adapter-data")
    embedded_redis_port: int = 6390  # fixed, so redis-cli -p 6390 finds it; 0: any free port
    key_prefix: str = DEFAULT_PREFIX
    sequence_bits: int = DEFAULT_SEQUENCE_BITS
    topic_defaults: TopicDefaults = TopicDefaults()
    auto_create_topics: bool = True  # a command naming an unknown topic creates it
    max_topics: int = 10_000  # no auto-creation beyond this many topics (0: no limit)
    topic_cache_size: int = DEFAULT_TOPIC_CACHE_SIZE  # topic settings kept in memory (LRU)
    offsets_retention_minutes: float = 10_080.0  # idle groups expire (Kafka's 7 days; 0: never)
    max_line_bytes: int = 1 << 20
    consume_max_records: int = 1000
    acks_timeout_ms: int = 2000
    replica_lag_max_ms: int = 10_000
    session_timeout_ms: int = 10_000
    redis_timeout_ms: int = 5000
    redis_startup_timeout_s: float = 30.0
    replicator: bool = True
    log_level: str = "INFO"
    redis_wait_replicas: int = 0  # acks=all, commits and reads wait for Redis WAIT <n> (0: off)
    shutdown_timeout_ms: int = 10_000  # SIGTERM: longest wait for open requests' answers
    log_format: str = "json"  # json (one object per line) or text
    metrics_port: int = 0  # Prometheus endpoint on this port (0: off)
    metrics_host: str = "0.0.0.0"
    retention_interval_ms: int = 30_000  # how often the pod's retention task runs
    redis_appendfsync: str = "everysec"  # the embedded redis-server's AOF fsync policy
    workers: int = 1  # processes sharing the port through SO_REUSEPORT
    uvloop: bool = True  # run on uvloop when it is installed (plain asyncio otherwise)
    # Limits (adapter/limits.py); 0 turns a limit off.
    max_connections: int = 1000
    idle_timeout_s: float = 600.0
    tcp_keepalive_s: int = 60
    max_in_flight: int = 1000  # requests of one connection answered at once
    # Backpressure (adapter/backpressure.py): request bytes (Kafka Produce, V1 lines) being
    # answered at once, per pod and per connection; beyond them reading pauses
    max_append_bytes: int = 16 << 20
    max_connection_append_bytes: int = 4 << 20
    consume_max_bytes: int = 1 << 20  # value bytes per CONSUME (at least one record)
    # TLS on the client listener (adapter/tls.py)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set: clients need a certificate this CA signed
    # Client authentication (adapter/auth.py): on when either is set
    auth_file: Path | None = None
    auth_redis: bool = False
    auth_timeout_s: float = 30.0  # a connection not authenticated by then is closed
    # Toward Redis: credentials and TLS beyond what --redis-url carries
    redis_username: str | None = None
    redis_password: str | None = None
    redis_tls_ca: Path | None = None
    redis_tls_cert: Path | None = None
    redis_tls_key: Path | None = None
    # Redis Sentinel (mapping/sentinel.py) instead of redis_url: "[rediss://]HOST:PORT,..." and
    # the monitored primary's name; redis_url becomes their redis+sentinel:// URL. The
    # sentinels' own login, when they have one (the redis_* login is the data nodes')
    redis_sentinel: str | None = None
    redis_sentinel_master: str | None = None
    redis_sentinel_username: str | None = None
    redis_sentinel_password: str | None = None
    require_aof: bool = False  # refuse to start when Redis has AOF off
    allow_evicting_redis: bool = False  # start even when Redis' maxmemory-policy evicts keys
    # The Kafka listener (adapter/kafka/)
    kafka: bool = True
    kafka_host: str | None = None  # None: --host
    kafka_port: int = 9093
    kafka_advertised_listener: str | None = None  # HOST:PORT told to clients; None: listen address
    kafka_max_request_bytes: int = 100 << 20  # a larger frame closes the connection
    kafka_max_message_bytes: int = 1048588  # a larger RecordBatch: MESSAGE_TOO_LARGE (Kafka's)
    # an idempotent producer's state (per partition) is dropped after this long without an
    # append (Kafka's producer.id.expiration.ms)
    kafka_producer_id_expiration_ms: int = 86_400_000
    # Kafka consumer groups (mapping/kafka_groups/): Kafka's group.initial.rebalance.delay.ms
    # and group.min/max.session.timeout.ms (Kafka: 3000, 6000, 1800000)
    kafka_group_initial_rebalance_delay_ms: int = 300
    kafka_group_min_session_timeout_ms: int = 1000
    kafka_group_max_session_timeout_ms: int = 1_800_000
    # KIP-848: group.consumer.session.timeout.ms / heartbeat.interval.ms (Kafka: 45000 / 5000)
    kafka_group_consumer_session_timeout_ms: int = 45_000
    kafka_group_consumer_heartbeat_interval_ms: int = 5000

    def __post_init__(self) -> None:
        if self.redis_sentinel is None:
            return
        if not self.redis_sentinel_master:
            raise ValueError("redis_sentinel needs redis_sentinel_master")
        url = sentinel_url(self.redis_sentinel, self.redis_sentinel_master)
        if self.redis_url not in (None, url):  # replace() passes the URL made here back in
            raise ValueError("redis_url and redis_sentinel name two deployments: give one")
        object.__setattr__(self, "redis_url", url)  # frozen: set once, here

    @property
    def offsets_retention_ms(self) -> int:
        return round(self.offsets_retention_minutes * 60_000)

    def backend_options(self) -> dict[str, object]:
        """``anyio.run``'s options: uvloop when asked for and installed."""
        if not self.uvloop:
            return {}
        try:
            import uvloop  # noqa: F401
        except ImportError:  # Windows, or an install without it
            return {}
        return {"use_uvloop": True}

    def redis_options(self) -> dict[str, object]:
        """Keyword arguments for the Redis client beyond the URL."""
        return credentials(
            username=self.redis_username,
            password=self.redis_password,
            tls_ca=self.redis_tls_ca,
            tls_cert=self.redis_tls_cert,
            tls_key=self.redis_tls_key,
            sentinel_username=self.redis_sentinel_username,
            sentinel_password=self.redis_sentinel_password,
        )
