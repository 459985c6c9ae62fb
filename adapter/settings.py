"""One pod's settings, each declared once: a field gives its name, type and default, and its
``option(...)`` how ``adapter serve`` takes it (``--<name>``, ``ADAPTER_<NAME>``, help, range;
see ``adapter/declare.py``). The field order is ``adapter serve --help``'s."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from adapter.declare import Option, option, option_group
from adapter.logs import FORMATS
from mapping.core.codec import DEFAULT_SEQUENCE_BITS, MAX_SEQUENCE_BITS, MIN_SEQUENCE_BITS
from mapping.core.kafka_group_settings import KafkaGroupSettings
from mapping.core.keys import DEFAULT_PREFIX
from mapping.topic.topic_config import DEFAULT_TOPIC_CACHE_SIZE, TopicDefaults
from mapping.txn.txn_state import DEFAULT_EXPIRATION_MS, DEFAULT_MAX_TIMEOUT_MS, TxnSettings

_file = click.Path(exists=True, dir_okay=False, path_type=Path)
_port = click.IntRange(0, 65535)


@dataclass(frozen=True)
class Settings:
    redis_url: str | None = option(  # None: start an embedded redis-server in data_dir
        None,
        "redis://HOST:PORT/DB (rediss:// for TLS, redis+cluster://HOST:PORT for a cluster; "
        "or --redis-sentinel). Unset: start an embedded redis-server with AOF in --data-dir.",
    )
    host: str = option("127.0.0.1", "Address to listen on.")
    port: int = option(9092, "TCP port to listen on.", _port)
    data_dir: Path = option(
        Path(".adapter-data"),
        "Where the embedded redis-server keeps its AOF.",
        click.Path(path_type=Path),
    )
    embedded_redis_port: int = option(  # fixed, so redis-cli -p 6390 finds it
        6390, "Port of the embedded redis-server (on 127.0.0.1; 0: any free port).", _port
    )
    key_prefix: str = option(
        DEFAULT_PREFIX, "Prefix of every Redis key (one deployment per prefix)."
    )
    sequence_bits: int = option(
        DEFAULT_SEQUENCE_BITS,
        "B in offset = (ms << B) | seq; fixed for a deployment at first start.",
        click.IntRange(MIN_SEQUENCE_BITS, MAX_SEQUENCE_BITS),
    )
    topic_defaults: TopicDefaults = option_group(
        TopicDefaults(),
        "default",
        partitions=Option("Partitions of an auto-created topic.", click.IntRange(1, 10_000)),
        replication_factor=Option(
            "Replication factor of an auto-created topic (leader + followers).",
            click.IntRange(1, 16),
        ),
        min_insync_replicas=Option(
            "min ISR of an auto-created topic, for acks=all.", click.IntRange(1, 16)
        ),
    )
    auto_create_topics: bool = option(
        True,
        "A command naming an unknown topic (V1, or Kafka Metadata when the client allows "
        "it) creates it with the defaults above; off: V1 answers ERR|UNKNOWN_TOPIC, Kafka "
        "UNKNOWN_TOPIC_OR_PARTITION (create topics with `adapter topic create`).",
    )
    max_topics: int = option(
        10_000,
        "Auto-creation stops at this many topics: one more answers ERR|TOPIC_LIMIT "
        "(0: no limit); `adapter topic create` is not limited.",
        click.IntRange(0),
    )
    offsets_retention_minutes: float = option(
        10_080.0,  # Kafka's 7 days
        "A group with no member and no commit for this long expires: its committed "
        "offsets are deleted and it no longer holds topic retention (Kafka's "
        "offsets.retention.minutes; 0: never). Applied by the retention task.",
        click.FloatRange(0),
    )
    offsets_topic: bool = option(
        True,
        "Mirror every committed offset (and each deletion of one) into a read-only, "
        "compacted __consumer_offsets topic in Kafka's record format, for tools that read "
        "commits there (Burrow); off: no such topic (docs/kafka.md).",
    )
    max_line_bytes: int = option(
        1 << 20, "Longest request line; longer closes the connection.", click.IntRange(64)
    )
    consume_max_records: int = option(1000, "Most records one CONSUME returns.", click.IntRange(1))
    acks_timeout_ms: int = option(
        2000, "How long acks=all waits before REPLICATION_TIMEOUT.", click.IntRange(0)
    )
    replica_lag_max_ms: int = option(
        10_000, "A follower not caught up for this long leaves the ISR.", click.IntRange(0)
    )
    session_timeout_ms: int = option(  # V1 groups' (and whether Kafka groups see V1 members)
        10_000, "A group member without HEARTBEAT for this long is removed.", click.IntRange(1)
    )
    redis_timeout_ms: int = option(
        5000,
        "Redis taking no byte of a pipeline, or giving no reply, for this long answers "
        "UNAVAILABLE (Kafka: KAFKA_STORAGE_ERROR, or REQUEST_TIMED_OUT for an append that was "
        "sent); a long pipeline Redis works through is not cut off.",
        click.IntRange(1),
    )
    replicator: bool = option(
        True, "Run the built-in replicator (followers played by pods, one owner each)."
    )
    redis_wait_replicas: int = option(
        0,
        "acks=all and commits also wait until this many Redis replicas have the write "
        "(Redis WAIT on the node that took it, within the acks timeout), and readers see only "
        "records the replicas have (docs/durability.md); 0: off (a pod whose Redis can fail "
        "over, Sentinel or replicas, then warns at start that a failover can lose "
        "acknowledged writes).",
        click.IntRange(0),
    )
    append_module: bool = option(
        True,
        "Append records (Kafka batches, V1 PRODUCE) through the streamadapter module's one "
        "command where Redis runs it (docs/operations.md: every node that replays or "
        "replicates the AOF needs it then); --no-append-module: the scripts' own XADDs.",
    )
    redis_appendfsync: str = option(
        "everysec",
        "fsync policy of the embedded redis-server's AOF: always survives a power loss, "
        "everysec may lose the last second.",
        click.Choice(["always", "everysec", "no"]),
    )
    # The Kafka listener (adapter/kafka/)
    kafka: bool = option(True, "Serve the Kafka wire protocol beside V1.")
    kafka_host: str | None = option(  # None: --host
        None, "Address of the Kafka listener (default: --host)."
    )
    kafka_port: int = option(9093, "TCP port of the Kafka listener.", _port)
    kafka_advertised_listener: str | None = option(  # None: the listen address
        None,
        "The address Kafka clients are told to connect to (default: the listen address; "
        "behind a load balancer, its address: pods sharing it appear as one broker).",
        metavar="HOST:PORT",
    )
    kafka_max_request_bytes: int = option(
        100 << 20,
        "Largest Kafka request frame; larger closes the connection.",
        click.IntRange(64),
    )
    kafka_max_message_bytes: int = option(
        1048588,  # Kafka's
        "Default of topics' max.message.bytes (Kafka's message.max.bytes): a larger "
        "RecordBatch gets MESSAGE_TOO_LARGE, a larger V1 record BAD_REQUEST.",
        click.IntRange(64),
    )
    kafka_producer_id_expiration_ms: int = option(
        86_400_000,
        "An idempotent producer's sequence state in a partition is dropped after this long "
        "without an append there (Kafka's producer.id.expiration.ms).",
        click.IntRange(1),
    )
    kafka_fetch_session_slots: int = option(
        1000,  # Kafka's
        "Incremental fetch sessions (KIP-227) a pod keeps, in memory; 0: none, every Fetch "
        "is answered whole (Kafka's max.incremental.fetch.session.cache.slots).",
        click.IntRange(0),
    )
    kafka_fetch_read_ahead_bytes: int = option(
        64 << 20,
        "Bytes of records a pod reads ahead for its Kafka consumers, all together: once a "
        "Fetch is answered, each partition's next records are read while the client takes "
        "the response in (adapter/kafka/fetch_ahead.py); 0: no read-ahead.",
        click.IntRange(0),
    )
    # Kafka transactions (mapping/txn/transactions.py, mapping/txn/txn_completer.py)
    transaction_max_timeout_ms: int = option(
        DEFAULT_MAX_TIMEOUT_MS,
        "Longest transaction.timeout.ms a transactional producer may ask for; longer gets "
        "INVALID_TRANSACTION_TIMEOUT (Kafka's transaction.max.timeout.ms).",
        click.IntRange(1),
    )
    transactional_id_expiration_ms: int = option(
        DEFAULT_EXPIRATION_MS,
        "A transactional id with no open transaction, unused for this long, is forgotten "
        "(Kafka's transactional.id.expiration.ms).",
        click.IntRange(1),
    )
    transaction_check_interval_ms: int = option(
        1000,
        "How often the pod holding the transaction completer's lease aborts timed-out "
        "transactions, finishes those a dead pod left half-ended and forgets expired "
        "transactional ids (0: this pod never does; one pod at a time does it).",
        click.IntRange(0),
    )
    # Kafka consumer groups (mapping/kafka_group/; the defaults and why are there)
    kafka_groups: KafkaGroupSettings = option_group(
        KafkaGroupSettings(),
        "kafka_group",
        initial_rebalance_delay_ms=Option(
            "A Kafka group's first rebalance waits this long for more members (Kafka's "
            "group.initial.rebalance.delay.ms; 0: off).",
            click.IntRange(0),
        ),
        min_session_timeout_ms=Option(
            "Shortest session.timeout.ms a Kafka consumer may ask for (else "
            "INVALID_SESSION_TIMEOUT).",
            click.IntRange(1),
        ),
        max_session_timeout_ms=Option(
            "Longest session.timeout.ms a Kafka consumer may ask for.", click.IntRange(1)
        ),
        consumer_session_timeout_ms=Option(
            "KIP-848 (group.protocol=consumer) members' session (Kafka's "
            "group.consumer.session.timeout.ms).",
            click.IntRange(1),
        ),
        consumer_heartbeat_interval_ms=Option(
            "How often KIP-848 members are told to heartbeat (Kafka's "
            "group.consumer.heartbeat.interval.ms).",
            click.IntRange(1),
        ),
    )
    # Limits (adapter/limits.py); 0 turns a limit off.
    max_connections: int = option(
        1000,
        "Open client connections per pod; one more gets ERR|UNAVAILABLE and is closed "
        "(0: no limit).",
        click.IntRange(0),
    )
    idle_timeout_s: float = option(
        600.0,
        "Close a connection that sends nothing (with nothing outstanding), or takes no "
        "reply, for this long (0: never).",
        click.FloatRange(0),
    )
    tcp_keepalive_s: int = option(
        60,
        "TCP keepalive: probe an idle connection after this long and drop a vanished "
        "peer (0: OS defaults).",
        click.IntRange(0),
    )
    max_in_flight: int = option(
        1000,
        "Requests of one connection answered at once; the pod reads no more from a "
        "connection until their replies are sent (0: no limit).",
        click.IntRange(0),
    )
    # Backpressure (adapter/backpressure.py)
    max_append_bytes: int = option(
        16 << 20,
        "Backpressure: bytes of requests (Kafka Produce, V1 request lines) one pod "
        "answers at once; beyond it connections wait their turn with reading paused, so a "
        "saturated Redis slows clients down instead of timing out (0: no limit).",
        click.IntRange(0),
    )
    max_connection_append_bytes: int = option(
        4 << 20,
        "Backpressure: the same bound per connection (one request is always admitted; "
        "0: no limit).",
        click.IntRange(0),
    )
    consume_max_bytes: int = option(
        1 << 20,
        "Value bytes one CONSUME returns at most (the first record always; 0: no limit).",
        click.IntRange(0),
    )
    # TLS on the client listener (adapter/tls.py); checked together in check_tls_options
    tls_cert: Path | None = option(None, "PEM certificate (chain): serve V1 over TLS.", _file)
    tls_key: Path | None = option(None, "PEM private key of --tls-cert.", _file)
    tls_client_ca: Path | None = option(
        None, "Require client certificates signed by this PEM CA.", _file
    )
    # Client authentication (adapter/auth.py): on when either is set
    auth_file: Path | None = option(
        None,
        "Require V1 AUTH <user> <password> and Kafka SASL; users from this file of "
        "<user>:<hash>[:<SCRAM secrets>] lines (made by `adapter user hash`).",
        _file,
    )
    auth_redis: bool = option(
        False,
        "Require V1 AUTH <user> <password> and Kafka SASL; users stored in Redis "
        "(`adapter user add`).",
    )
    auth_timeout_s: float = option(
        30.0,
        "With authentication on: close a connection that has not authenticated this "
        "long after it opened (0: never).",
        click.FloatRange(0),
    )
    # OAuth 2 bearer tokens (adapter/oauth.py): Kafka SASL OAUTHBEARER, V1 AUTH <user> <token>
    oauth_jwks: str | None = option(
        None,
        "Accept OAuth bearer tokens (JWTs) signed by a key of this JWKS: a file, or an "
        "https:// URL (Kafka's sasl.oauthbearer.jwks.endpoint.url). Turns authentication on.",
        metavar="FILE|URL",
    )
    oauth_issuer: str | None = option(
        None, "With --oauth-jwks: the issuer (iss) tokens must name.", metavar="ISSUER"
    )
    oauth_audience: str | None = option(
        None, "With --oauth-jwks: the audience (aud) tokens must name.", metavar="AUDIENCE"
    )
    oauth_subject_claim: str = option(
        "sub", "With --oauth-jwks: the claim whose value is the principal (User:<value>)."
    )
    oauth_clock_skew_s: int = option(
        30,
        "With --oauth-jwks: seconds of clock difference allowed for exp, nbf and iat.",
        click.IntRange(0),
    )
    # Kerberos (adapter/kerberos.py): Kafka SASL GSSAPI
    kerberos_keytab: Path | None = option(
        None,
        "Offer Kafka SASL GSSAPI (Kerberos), accepting as the service principals in this "
        "keytab (kafka/<host>@REALM). Turns authentication on.",
        _file,
    )
    kerberos_principal: str | None = option(
        None,
        "With --kerberos-keytab: accept as this principal of the keytab only.",
        metavar="PRINCIPAL",
    )
    kerberos_principal_to_local_rules: str = option(
        "DEFAULT",
        "With --kerberos-keytab: Kafka's sasl.kerberos.principal.to.local.rules, "
        "comma-separated: how a client's principal becomes its user name (User:<name>).",
        metavar="RULES",
    )
    max_reauth_ms: int = option(
        0,
        "Kafka SASL sessions last at most this long (connections.max.reauth.ms, KIP-368): "
        "clients re-authenticate on the connection or it closes. An OAUTHBEARER session "
        "always ends when its token expires (0: no other limit).",
        click.IntRange(0),
    )
    # Authorization (adapter/authorizer.py): Kafka's ACLs, stored in Redis (`adapter acl`)
    authorizer: bool = option(
        False,
        "Check every request against the ACL bindings stored in Redis (Kafka's "
        "StandardAuthorizer; `adapter acl`, or Kafka's CreateAcls); off: everything is "
        "allowed and nothing is checked.",
    )
    super_users: str = option(
        "",
        "With --authorizer: principals allowed everything, comma-separated "
        "(User:admin,User:alice; Kafka's super.users).",
        metavar="PRINCIPAL,...",
    )
    allow_everyone_if_no_acl_found: bool = option(
        False,
        "With --authorizer: a resource no binding names is open to everyone (Kafka's "
        "allow.everyone.if.no.acl.found); off: denied to all but the super users.",
    )
    # Toward Redis: credentials and TLS beyond what --redis-url carries (every command that
    # reaches Redis takes these, see adapter/cli/options.py)
    redis_username: str | None = option(None, "Redis ACL user (or in the URL).", shared=True)
    redis_password: str | None = option(
        None, "Redis password (or in the URL); prefer the environment variable.", shared=True
    )
    redis_tls_ca: Path | None = option(
        None, "With rediss://: trust this PEM CA for Redis' certificate.", _file, shared=True
    )
    redis_tls_cert: Path | None = option(
        None, "With rediss://: client certificate presented to Redis.", _file, shared=True
    )
    redis_tls_key: Path | None = option(
        None, "With rediss://: private key of --redis-tls-cert.", _file, shared=True
    )
    # Redis Sentinel (mapping/connection/sentinel.py) instead of redis_url; redis_url becomes their
    # redis+sentinel:// URL. The sentinels' own login, when they have one (the redis_* login
    # is the data nodes')
    redis_sentinel: str | None = option(
        None,
        "Redis Sentinel instead of --redis-url: ask these sentinels for the primary and "
        "follow it across failovers (rediss:// for TLS to sentinels and Redis alike).",
        metavar="[rediss://]HOST:PORT,...",
        shared=True,
    )
    redis_sentinel_master: str | None = option(
        None,
        "With --redis-sentinel: the name the sentinels monitor the primary under.",
        metavar="NAME",
        shared=True,
    )
    redis_sentinel_username: str | None = option(
        None,
        "With --redis-sentinel: ACL user on the sentinels, when they have their own.",
        shared=True,
    )
    redis_sentinel_password: str | None = option(
        None,
        "With --redis-sentinel: the sentinels' own password (their requirepass); prefer "
        "the environment variable.",
        shared=True,
    )
    require_aof: bool = option(
        False,
        "Refuse to start unless Redis has AOF on (acknowledged records survive a Redis restart).",
    )
    redis_startup_timeout_s: float = option(
        30.0,
        "How long a starting pod waits for Redis to answer before giving up.",
        click.FloatRange(0),
    )
    allow_evicting_redis: bool = option(
        False,
        "Start even when Redis' maxmemory-policy evicts keys (anything but noeviction), "
        "which silently loses records, offsets and group state once memory is full.",
    )
    workers: int = option(  # processes sharing the port through SO_REUSEPORT
        1,
        "Adapter processes sharing --port (SO_REUSEPORT), so one host uses all its cores.",
        click.IntRange(1, 512),
    )
    shutdown_timeout_ms: int = option(
        10_000,
        "On SIGTERM the pod stops accepting and answers what it has read; connections "
        "still busy after this long are closed.",
        click.IntRange(0),
    )
    metrics_port: int = option(
        0, "Serve /metrics (Prometheus), /livez and /readyz on this port (0: off).", _port
    )
    metrics_host: str | None = option(None, "Address of the metrics endpoint (default: --host).")
    retention_interval_ms: int = option(
        30_000,
        "How often the pod enforces topic retention (0: never; one pod at a time does it).",
        click.IntRange(0),
    )
    uvloop: bool = option(
        True,
        "Run on uvloop (when installed): about 25% more one-at-a-time requests per second "
        "and a lower p99 than asyncio's own loop (see docs/performance.md).",
    )
    log_format: str = option(
        "json",
        "json: one JSON object per line (for log collectors); text: plain lines.",
        click.Choice(FORMATS),
    )
    log_level: str = option(
        "INFO",
        None,
        click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    )
    # Not on the command line
    topic_cache_size: int = DEFAULT_TOPIC_CACHE_SIZE  # topic settings kept in memory (LRU)

    def __post_init__(self) -> None:
        if self.redis_sentinel is None:
            return
        if not self.redis_sentinel_master:
            raise ValueError("redis_sentinel needs redis_sentinel_master")
        from mapping.connection.sentinel import (
            sentinel_url,  # (imports redis: not for serve --help)
        )

        url = sentinel_url(self.redis_sentinel, self.redis_sentinel_master)
        if self.redis_url not in (None, url):  # replace() passes the URL made here back in
            raise ValueError("redis_url and redis_sentinel name two deployments: give one")
        object.__setattr__(self, "redis_url", url)  # frozen: set once, here

    @property
    def transactions(self) -> TxnSettings:
        return TxnSettings(
            max_timeout_ms=self.transaction_max_timeout_ms,
            expiration_ms=self.transactional_id_expiration_ms,
        )

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
        from mapping.connection.cluster import credentials  # (imports redis: not for serve --help)

        return credentials(
            username=self.redis_username,
            password=self.redis_password,
            tls_ca=self.redis_tls_ca,
            tls_cert=self.redis_tls_cert,
            tls_key=self.redis_tls_key,
            sentinel_username=self.redis_sentinel_username,
            sentinel_password=self.redis_sentinel_password,
        )
