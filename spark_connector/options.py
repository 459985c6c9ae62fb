"""The data source's options, parsed and validated once on the driver.

Spark hands options over case-insensitively (lower-cased keys), so every name is matched in
lower case. Anything malformed raises ``OptionError`` naming the option and what it accepts.
The names are those of Spark's Kafka source where it has the option (subscribe,
subscribePattern, startingOffsets, startingTimestamp, maxOffsetsPerTrigger, minPartitions,
includeHeaders, failOnDataLoss, ...); the topics are subscription.py's, the start and end
positions offset_specs.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from mapping.connection.sentinel import sentinel_url
from mapping.core.keys import DEFAULT_PREFIX
from spark_connector.errors import (
    ConnectorError,
    DataLoss,
    NoOffsetForTimestamp,
    OptionError,
    RedisUnreachable,
    TopicNotFound,
)
from spark_connector.offset_specs import (
    OffsetSpec,
    ending_spec,
    starting_spec,
    timestamp_strategy,
)
from spark_connector.subscription import Subscription, TopicNames, parse_subscription

DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000
DEFAULT_FETCH_SIZE = 5_000
DEFAULT_TIMEOUT_S = 5.0

KNOWN_OPTIONS = (
    "redis.url",
    "topic",
    "subscribe",
    "subscribepattern",
    "keyprefix",
    "startingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingoffsets",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "maxoffsetspertrigger",
    "maxrecordspertrigger",
    "maxrecordsperpartition",
    "minpartitions",
    "includeheaders",
    "valueformat",
    "fetchsize",
    "redis.timeout",
    "redis.username",
    "redis.password",
    "redis.sentinel",
    "redis.sentinelmaster",
    "redis.sentinelusername",
    "redis.sentinelpassword",
    "failondataloss",
    "durablereads",
)
# The options of a batch query only (Spark refuses them in streaming queries).
BATCH_ONLY_OPTIONS = {
    "endingoffsets": "endingOffsets",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
}
log = logging.getLogger(__name__)

__all__ = [  # the errors, importable from here as before errors.py
    "ConnectorError",
    "DataLoss",
    "NoOffsetForTimestamp",
    "OptionError",
    "RedisUnreachable",
    "SourceOptions",
    "TopicNotFound",
    "parse_options",
]


@dataclass(frozen=True, slots=True)
class SourceOptions:
    redis_url: str
    subscription: Subscription
    key_prefix: str = DEFAULT_PREFIX
    starting: OffsetSpec | None = None  # None: earliest for batch, latest for streaming
    ending: OffsetSpec | None = None  # batch only; None: latest
    # startingOffsetsByTimestampStrategy: "error" or "latest" (a timestamp with no record after)
    timestamp_strategy: str = "error"
    # maxOffsetsPerTrigger (or this connector's first name for it, maxRecordsPerTrigger)
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
    min_partitions: int | None = None
    include_headers: bool = False
    binary: bool = False
    fetch_size: int = DEFAULT_FETCH_SIZE
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Kafka's source option: fail when records to read were removed (retention) before they
    # were read; false: go on from the log start.
    fail_on_data_loss: bool = True
    # For deployments whose pods run --redis-wait-replicas: read only up to each partition's
    # durable_hw (what the Redis replicas have), as the pods' readers do.
    durable_reads: bool = False
    # Redis login beyond the URL; Spark redacts options named like "password" in plans and
    # the UI, which it does not do for a password inside redis.url.
    redis_username: str | None = None
    redis_password: str | None = None
    # The sentinels' own login (with redis.sentinel; redis_url is then redis+sentinel://)
    redis_sentinel_username: str | None = None
    redis_sentinel_password: str | None = None
    # The batch-only options given (as the user spells them): a streaming query refuses them.
    batch_only: tuple[str, ...] = ()

    @property
    def topic(self) -> str:
        """The one topic of a query that names exactly one (option topic, or subscribe)."""
        names = self.subscription.names if isinstance(self.subscription, TopicNames) else ()
        if len(names) != 1:
            raise OptionError(f"this query reads {self.subscription.describe()}, not one topic")
        return names[0]


def _redis_url(opts: dict[str, str]) -> str:
    """``redis.url``, or the ``redis+sentinel://`` URL of ``redis.sentinel`` and
    ``redis.sentinelMaster`` (mapping/connection/sentinel.py)."""
    url = opts.get("redis.url", "").strip()
    sentinels = opts.get("redis.sentinel", "").strip()
    master = opts.get("redis.sentinelmaster", "").strip()
    if not sentinels:
        if master or opts.get("redis.sentinelusername") or opts.get("redis.sentinelpassword"):
            raise OptionError(
                "options redis.sentinelMaster/redis.sentinelUsername/redis.sentinelPassword "
                "need option redis.sentinel"
            )
        return url
    if url:
        raise OptionError("give option redis.url or redis.sentinel, not both")
    if not master:
        raise OptionError("option redis.sentinel needs option redis.sentinelMaster (a name)")
    try:
        return sentinel_url(sentinels, master)
    except ValueError as exc:
        raise OptionError(f"option redis.sentinel: {exc}") from None


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, got {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, got {text!r}")
    return value


def _boolean(opts: Mapping[str, str], key: str, name: str, default: str) -> bool:
    value = opts.get(key, default).strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be 'true' or 'false', got {opts[key]!r}")
    return value == "true"


def _max_records_per_trigger(opts: Mapping[str, str]) -> int | None:
    """maxOffsetsPerTrigger, Spark's name; maxRecordsPerTrigger, this connector's first."""
    given = {
        name: _positive_int(name, opts[name.lower()])
        for name in ("maxOffsetsPerTrigger", "maxRecordsPerTrigger")
        if name.lower() in opts
    }
    if len(set(given.values())) > 1:
        raise OptionError(
            "options maxOffsetsPerTrigger and maxRecordsPerTrigger are one setting (the "
            f"second is its former name): give one, got {given}"
        )
    return next(iter(given.values()), None)


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    unknown = sorted(set(opts) - set(KNOWN_OPTIONS) - {"path"})
    if unknown:
        raise OptionError(
            f"unknown option(s) {', '.join(unknown)}; known options: {', '.join(KNOWN_OPTIONS)}"
        )
    url = _redis_url(opts)
    if not url:
        raise OptionError(
            "option redis.url is required, e.g. redis://localhost:6379/0 (or redis.sentinel)"
        )
    if not url.startswith(
        ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://",
         "redis+sentinel://", "rediss+sentinel://")
    ):  # fmt: skip
        raise OptionError(
            f"option redis.url must be a redis://, rediss://, unix://, redis+cluster:// or "
            f"redis+sentinel:// URL: {url!r}"
        )
    subscription = parse_subscription(opts)
    # the topic the one-topic JSON form {"<partition>": ...} means
    named = subscription.names if isinstance(subscription, TopicNames) else ()
    single = named[0] if len(named) == 1 else None
    prefix = opts.get("keyprefix", DEFAULT_PREFIX)
    if not prefix:
        raise OptionError("option keyPrefix must not be empty")
    value_format = opts.get("valueformat", "string").lower()
    if value_format not in ("string", "binary"):
        raise OptionError(f"option valueFormat must be 'string' or 'binary', got {value_format!r}")
    try:
        timeout_s = float(opts.get("redis.timeout", DEFAULT_TIMEOUT_S))
    except ValueError:
        timeout_s = -1.0
    if not timeout_s > 0:
        raise OptionError(
            f"option redis.timeout must be a positive number of seconds, "
            f"got {opts['redis.timeout']!r}"
        )
    return SourceOptions(
        redis_url=url,
        subscription=subscription,
        key_prefix=prefix,
        starting=starting_spec(opts, single),
        ending=ending_spec(opts, single),
        timestamp_strategy=timestamp_strategy(opts),
        max_records_per_trigger=_max_records_per_trigger(opts),
        max_records_per_partition=_positive_int(
            "maxRecordsPerPartition",
            opts.get("maxrecordsperpartition", str(DEFAULT_MAX_RECORDS_PER_PARTITION)),
        ),
        min_partitions=(
            _positive_int("minPartitions", opts["minpartitions"])
            if "minpartitions" in opts
            else None
        ),
        include_headers=_boolean(opts, "includeheaders", "includeHeaders", "false"),
        binary=value_format == "binary",
        fetch_size=_positive_int("fetchSize", opts.get("fetchsize", str(DEFAULT_FETCH_SIZE))),
        timeout_s=timeout_s,
        fail_on_data_loss=_boolean(opts, "failondataloss", "failOnDataLoss", "true"),
        durable_reads=_boolean(opts, "durablereads", "durableReads", "false"),
        redis_username=opts.get("redis.username") or None,
        redis_password=opts.get("redis.password") or None,
        redis_sentinel_username=opts.get("redis.sentinelusername") or None,
        redis_sentinel_password=opts.get("redis.sentinelpassword") or None,
        batch_only=tuple(name for key, name in BATCH_ONLY_OPTIONS.items() if key in opts),
    )
