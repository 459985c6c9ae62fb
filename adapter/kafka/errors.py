"""Kafka error codes (``mapping.core.kafka_errors``, the one table shared with the groups) and the
mapping of the Redis side's failures onto them."""

from __future__ import annotations

from mapping.core import errors as v1
from mapping.core.kafka_errors import *  # noqa: F403 (the codes, as ``errors.NONE`` etc.)
from mapping.core.kafka_errors import (
    KAFKA_STORAGE_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    POLICY_VIOLATION,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
)


def error_of(exc: BaseException, *, append: bool = False) -> int:
    """The Kafka error code for a failure of the Redis side (mapping's BrokerError).

    ``append``: the failure of an append (Produce). One whose outcome is unknown (sent to
    Redis, no reply) answers REQUEST_TIMED_OUT, which Kafka clients take as "possibly
    written" (librdkafka: MSG_POSSIBLY_PERSISTED), never KAFKA_STORAGE_ERROR, which they
    take as "not written" (librdkafka: MSG_NOT_PERSISTED) and retry without a second
    thought; see docs/kafka.md, "Overload and unknown outcomes"."""
    if append and isinstance(exc, v1.OutcomeUnknown):
        return REQUEST_TIMED_OUT
    if isinstance(exc, v1.BrokerError):
        if exc.code == v1.UNAVAILABLE:
            return KAFKA_STORAGE_ERROR  # retriable: clients try again
        if exc.code == v1.NOT_LEADER:
            return NOT_LEADER_OR_FOLLOWER
        if exc.code == v1.REPLICATION_TIMEOUT:
            return REQUEST_TIMED_OUT
        if exc.code == v1.UNKNOWN_TOPIC:  # deleted under the request, or auto-creation off
            return UNKNOWN_TOPIC_OR_PARTITION
        if exc.code == v1.TOPIC_LIMIT:
            return POLICY_VIOLATION
    return UNKNOWN_SERVER_ERROR
