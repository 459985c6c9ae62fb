"""The sink's options (``df.write[Stream].format("redis-topics")``), parsed once on the driver.

Connection options (``redis.url`` or ``redis.sentinel``, the logins, ``keyPrefix``,
``redis.timeout``) are the source's and are validated by the same code
(``options.parse_options``); the rest is the sink's own. Anything malformed raises
``OptionError`` naming the option and what it accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from mapping.core.keys import is_valid_name
from mapping.topic.topic_config import TopicDefaults
from spark_connector.options import OptionError, SourceOptions, _positive_int, parse_options

Acks = Literal["0", "1", "all"]

DEFAULT_BATCH_SIZE = 1000
# Longer than the pod's 2 s: a task that times out fails and is retried by Spark.
DEFAULT_ACKS_TIMEOUT_MS = 10_000
DEFAULT_REPLICA_LAG_MAX_MS = 10_000  # the pod's default (--replica-lag-max-ms)

CONNECTION_OPTIONS = (
    "redis.url",
    "keyprefix",
    "redis.timeout",
    "redis.username",
    "redis.password",
    "redis.sentinel",
    "redis.sentinelmaster",
    "redis.sentinelusername",
    "redis.sentinelpassword",
)
SINK_OPTIONS = (
    "topic",
    "acks",
    "batchsize",
    "acks.timeoutms",
    "replicalagmaxms",
    "topic.partitions",
    "topic.replicationfactor",
    "topic.mininsyncreplicas",
    "writerid",
    "batchid",
)

# parse_options needs a topic; the sink's is optional (a topic column may name it instead).
_ANY_TOPIC = "-"


class SinkWriteError(Exception):
    """A task cannot write (a partition outside the topic, a follower partition, an acks=all
    timeout, Redis errors)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    connection: SourceOptions  # Redis, logins, keyPrefix, redis.timeout (topic unused)
    topic: str | None  # None: every row names its topic in a `topic` column
    acks: Acks = "all"
    acks_timeout_ms: int = DEFAULT_ACKS_TIMEOUT_MS
    batch_size: int = DEFAULT_BATCH_SIZE
    replica_lag_max_ms: int = DEFAULT_REPLICA_LAG_MAX_MS
    new_topics: TopicDefaults = TopicDefaults()  # settings of a topic the sink creates
    # Batch writes made idempotent across runs: inside foreachBatch a writer id is enough (the
    # query id and micro-batch id come from Spark); elsewhere batchId gives the epoch.
    # None: a fresh id per save() (task retries only).
    writer_id: str | None = None
    batch_id: int | None = None

    @property
    def key_prefix(self) -> str:
        return self.connection.key_prefix


def _non_negative_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise OptionError(f"option {name} must be an integer >= 0, got {text!r}")
    return value


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    known = (*CONNECTION_OPTIONS, *SINK_OPTIONS)
    # Spark adds "path" for save(path) and "checkpointlocation" for streaming queries.
    unknown = sorted(set(opts) - set(known) - {"path", "checkpointlocation"})
    if unknown:
        raise OptionError(
            f"unknown sink option(s) {', '.join(unknown)}; known options: {', '.join(known)}"
        )
    topic = opts.get("topic") or None
    if topic is not None and not is_valid_name(topic):
        raise OptionError(f"option topic must be 1-249 characters of [A-Za-z0-9._-], got {topic!r}")
    connection = parse_options(
        {k: v for k, v in opts.items() if k in CONNECTION_OPTIONS} | {"topic": topic or _ANY_TOPIC}
    )
    acks = opts.get("acks", "all").lower()
    if acks not in ("0", "1", "all"):
        raise OptionError(f"option acks must be 0, 1 or all, got {opts['acks']!r}")
    partitions = _positive_int("topic.partitions", opts.get("topic.partitions", "3"))
    replication_factor = _positive_int(
        "topic.replicationFactor", opts.get("topic.replicationfactor", "3")
    )
    min_isr = _positive_int("topic.minInsyncReplicas", opts.get("topic.mininsyncreplicas", "2"))
    writer_id = opts.get("writerid") or None
    if writer_id is not None and not is_valid_name(writer_id):
        raise OptionError(
            f"option writerId must be 1-249 characters of [A-Za-z0-9._-], got {writer_id!r}"
        )
    if "batchid" in opts and writer_id is None:
        raise OptionError("option batchId needs option writerId (the same for every batch)")
    return SinkOptions(
        connection=connection,
        topic=topic,
        acks=acks,  # type: ignore[arg-type]
        acks_timeout_ms=_positive_int(
            "acks.timeoutMs", opts.get("acks.timeoutms", str(DEFAULT_ACKS_TIMEOUT_MS))
        ),
        batch_size=_positive_int("batchSize", opts.get("batchsize", str(DEFAULT_BATCH_SIZE))),
        replica_lag_max_ms=_non_negative_int(
            "replicaLagMaxMs", opts.get("replicalagmaxms", str(DEFAULT_REPLICA_LAG_MAX_MS))
        ),
        # min ISR above RF could never be met (as the pod does: capped).
        new_topics=TopicDefaults(partitions, replication_factor, min(min_isr, replication_factor)),
        writer_id=writer_id,
        batch_id=_non_negative_int("batchId", opts["batchid"]) if "batchid" in opts else None,
    )
