"""The data source's options, parsed and validated once on the driver.

Spark hands options over case-insensitively (lower-cased keys), so every name is matched in
lower case. Anything malformed raises ``OptionError`` naming the option and what it accepts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from mapping.keys import DEFAULT_PREFIX, is_valid_name
from mapping.sentinel import sentinel_url

# Kafka's special per-partition values in a JSON offsets spec.
KAFKA_LATEST = -1
KAFKA_EARLIEST = -2

DEFAULT_MAX_RECORDS_PER_PARTITION = 100_000
DEFAULT_FETCH_SIZE = 5_000
DEFAULT_TIMEOUT_S = 5.0

KNOWN_OPTIONS = (
    "redis.url",
    "topic",
    "keyprefix",
    "startingoffsets",
    "endingoffsets",
    "maxrecordspertrigger",
    "maxrecordsperpartition",
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


class ConnectorError(Exception):
    """A problem the user can fix: raised on the driver before any task runs."""


class OptionError(ConnectorError, ValueError):
    """An option is missing or malformed."""


class TopicNotFound(ConnectorError):
    """The topic's hash does not exist in Redis."""


class RedisUnreachable(ConnectorError):
    """Redis did not answer."""


class DataLoss(ConnectorError):
    """Records the query must read were removed by retention before it read them."""


@dataclass(frozen=True, slots=True)
class Earliest:
    """Every partition from its first record."""


@dataclass(frozen=True, slots=True)
class Latest:
    """Every partition after its last committed record (hw + 1)."""


@dataclass(frozen=True, slots=True)
class GroupOffsets:
    """A consumer group's committed offsets (absent = from the beginning)."""

    group: str


@dataclass(frozen=True, slots=True)
class PerPartition:
    """Explicit positions; -2 = earliest, -1 = latest, partitions not named use the default."""

    offsets: tuple[tuple[int, int], ...]

    def as_dict(self) -> dict[int, int]:
        return dict(self.offsets)


OffsetSpec = Earliest | Latest | GroupOffsets | PerPartition


@dataclass(frozen=True, slots=True)
class SourceOptions:
    redis_url: str
    topic: str
    key_prefix: str = DEFAULT_PREFIX
    starting: OffsetSpec | None = None  # None: earliest for batch, latest for streaming
    ending: OffsetSpec | None = None  # batch only; None: latest
    max_records_per_trigger: int | None = None
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION
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


def _redis_url(opts: dict[str, str]) -> str:
    """``redis.url``, or the ``redis+sentinel://`` URL of ``redis.sentinel`` and
    ``redis.sentinelMaster`` (mapping/sentinel.py)."""
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


def parse_offset_spec(name: str, text: str, *, ending: bool) -> OffsetSpec:
    """``earliest``, ``latest``, ``group:<name>`` or JSON ``{"<partition>": <offset>}``."""
    spec = text.strip()
    lowered = spec.lower()
    accepted = (
        '\'latest\' or JSON like {"0": 123, "1": -1}'
        if ending
        else "'earliest', 'latest', 'group:<name>' or JSON like {\"0\": 123, \"1\": -2}"
    )
    if lowered == "latest":
        return Latest()
    if lowered == "earliest" and not ending:
        return Earliest()
    if lowered.startswith("group:") and not ending:
        group = spec[len("group:") :]
        if not is_valid_name(group):
            raise OptionError(
                f"option {name}: group name must be 1-249 characters of [A-Za-z0-9._-], "
                f"got {group!r}"
            )
        return GroupOffsets(group)
    if spec.startswith("{"):
        return PerPartition(_parse_json_offsets(name, spec, ending=ending, accepted=accepted))
    raise OptionError(f"option {name} must be {accepted}, got {text!r}")


def _parse_json_offsets(
    name: str, spec: str, *, ending: bool, accepted: str
) -> tuple[tuple[int, int], ...]:
    try:
        raw = json.loads(spec)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}); expected {accepted}") from None
    if not isinstance(raw, dict):
        raise OptionError(f"option {name} must be a JSON object, expected {accepted}")
    lowest = KAFKA_LATEST if ending else KAFKA_EARLIEST
    pairs: list[tuple[int, int]] = []
    for key, value in raw.items():
        try:
            partition = int(key)
        except ValueError:
            raise OptionError(f"option {name}: {key!r} is not a partition number") from None
        if partition < 0:
            raise OptionError(f"option {name}: partition {key!r} is negative")
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            what = "-1 (latest)" if ending else "-2 (earliest), -1 (latest)"
            raise OptionError(
                f"option {name}: offset for partition {partition} must be an integer >= 0 "
                f"or {what}, got {value!r}"
            )
        pairs.append((partition, value))
    return tuple(sorted(pairs))


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
    topic = opts.get("topic", "")
    if not topic:
        raise OptionError("option topic is required")
    if not is_valid_name(topic):
        raise OptionError(f"option topic must be 1-249 characters of [A-Za-z0-9._-], got {topic!r}")
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
    fail_on_data_loss = opts.get("failondataloss", "true").strip().lower()
    if fail_on_data_loss not in ("true", "false"):
        raise OptionError(
            f"option failOnDataLoss must be 'true' or 'false', got {opts['failondataloss']!r}"
        )
    durable_reads = opts.get("durablereads", "false").strip().lower()
    if durable_reads not in ("true", "false"):
        raise OptionError(
            f"option durableReads must be 'true' or 'false', got {opts['durablereads']!r}"
        )
    return SourceOptions(
        redis_url=url,
        topic=topic,
        key_prefix=prefix,
        starting=(
            parse_offset_spec("startingOffsets", opts["startingoffsets"], ending=False)
            if "startingoffsets" in opts
            else None
        ),
        ending=(
            parse_offset_spec("endingOffsets", opts["endingoffsets"], ending=True)
            if "endingoffsets" in opts
            else None
        ),
        max_records_per_trigger=(
            _positive_int("maxRecordsPerTrigger", opts["maxrecordspertrigger"])
            if "maxrecordspertrigger" in opts
            else None
        ),
        max_records_per_partition=_positive_int(
            "maxRecordsPerPartition",
            opts.get("maxrecordsperpartition", str(DEFAULT_MAX_RECORDS_PER_PARTITION)),
        ),
        binary=value_format == "binary",
        fetch_size=_positive_int("fetchSize", opts.get("fetchsize", str(DEFAULT_FETCH_SIZE))),
        timeout_s=timeout_s,
        fail_on_data_loss=fail_on_data_loss == "true",
        durable_reads=durable_reads == "true",
        redis_username=opts.get("redis.username") or None,
        redis_password=opts.get("redis.password") or None,
        redis_sentinel_username=opts.get("redis.sentinelusername") or None,
        redis_sentinel_password=opts.get("redis.sentinelpassword") or None,
    )
