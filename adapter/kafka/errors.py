"""Kafka error codes (``mapping.kafka_errors``, the one table shared with the groups) and the
mapping of the Redis side's failures onto them."""

from __future__ import annotations

from mapping import errors as v1
from mapping.kafka_errors import *  # noqa: F403 (the codes, as ``errors.NONE`` etc.)
from mapping.kafka_errors import (
    KAFKA_STORAGE_ERROR,
    NOT_LEADER_OR_FOLLOWER,
    POLICY_VIOLATION,
    REQUEST_TIMED_OUT,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_OR_PARTITION,
)


def error_of(exc: BaseException) -> int:
    """The Kafka error code for a failure of the Redis side (mapping's BrokerError)."""
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
