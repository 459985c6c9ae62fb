"""The settings of Kafka consumer groups (``mapping.kafka_group``), in a module of their
own that imports nothing, so that ``adapter serve --help`` (whose options include them) does
not load the groups' code and Redis client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaGroupSettings:
    # Kafka's group.initial.rebalance.delay.ms (Kafka: 3000). Short, so tests and small
    # deployments form their first generation fast, yet members started together still land
    # in one generation instead of one rebalance each.
    initial_rebalance_delay_ms: int = 300
    # Kafka's group.min/max.session.timeout.ms (Kafka: 6000 / 1800000); a JoinGroup outside
    # gets INVALID_SESSION_TIMEOUT. The floor is lower than Kafka's so tests can use short
    # sessions.
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 1_800_000
    # Kafka's offset.metadata.max.bytes: longer commit metadata gets OFFSET_METADATA_TOO_LARGE.
    max_metadata_bytes: int = 4096
    # KIP-848 (group.consumer.session.timeout.ms / heartbeat.interval.ms; Kafka: 45000 / 5000)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5000
    # Kafka's transactional.id.expiration.ms (7 days): a producer's newest epoch seen by a
    # group (what fences its zombies' TxnOffsetCommits) is forgotten after this long idle.
    # Not an option of its own: the pod sets it from --transactional-id-expiration-ms.
    transactional_id_expiration_ms: int = 604_800_000
