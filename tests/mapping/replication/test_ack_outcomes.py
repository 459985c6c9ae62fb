"""How each front door answers each way an acks=all wait ends
(mapping.replication.acks.AckOutcome)."""

from __future__ import annotations

import pytest

from adapter.kafka import errors
from adapter.kafka.produce import ACK_CODES
from adapter.v1.handlers.acks import check
from mapping.core.errors import REPLICATION_TIMEOUT, UNKNOWN_TOPIC, BrokerError
from mapping.replication.acks import Ack, AckOutcome

KAFKA = {
    AckOutcome.ACKED: errors.NONE,
    AckOutcome.HW_SHORT: errors.REQUEST_TIMED_OUT,
    AckOutcome.NOT_DURABLE: errors.REQUEST_TIMED_OUT,
    AckOutcome.ISR_TOO_SMALL: errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    AckOutcome.REPLICATION_UNKNOWN: errors.REQUEST_TIMED_OUT,
    AckOutcome.TOPIC_DELETED: errors.UNKNOWN_TOPIC_OR_PARTITION,
}


def test_kafka_answers_every_outcome_with_a_may_be_written_code() -> None:
    assert ACK_CODES == KAFKA


@pytest.mark.parametrize("outcome", [o for o in AckOutcome if o is not AckOutcome.ACKED])
def test_v1_answers_replication_timeout_or_unknown_topic(outcome: AckOutcome) -> None:
    with pytest.raises(BrokerError) as failed:
        check(Ack(outcome, detail="why"))
    expected = UNKNOWN_TOPIC if outcome is AckOutcome.TOPIC_DELETED else REPLICATION_TIMEOUT
    assert failed.value.code == expected and failed.value.message == "why"


def test_v1_acked_is_no_error() -> None:
    check(Ack(AckOutcome.ACKED, 5))
