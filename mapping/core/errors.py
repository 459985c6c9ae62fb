"""Errors that carry a V1 error code, raised by `mapping` and formatted by the adapter."""

from __future__ import annotations

BAD_REQUEST = "BAD_REQUEST"
UNKNOWN_COMMAND = "UNKNOWN_COMMAND"
REPLICATION_TIMEOUT = "REPLICATION_TIMEOUT"
NOT_LEADER = "NOT_LEADER"
GENERATION_MISMATCH = "GENERATION_MISMATCH"
# Additive: the backend (Redis) could not be reached or did not answer in time.
UNAVAILABLE = "UNAVAILABLE"
# Additive, only when client authentication is on (see adapter/v1/auth_gate.py): a command
# before a successful AUTH, and an AUTH with a wrong user or password.
AUTH_REQUIRED = "AUTH_REQUIRED"
AUTH_FAILED = "AUTH_FAILED"
# Additive: a command named a topic that does not exist and the pod may not create it
# (--no-auto-create-topics), or that was deleted under it.
UNKNOWN_TOPIC = "UNKNOWN_TOPIC"
# Additive, only with --authorizer: the connection's user lacks the ACL the command needs
# (Kafka's operation on the topic, group or cluster; docs/security.md).
NOT_AUTHORIZED = "NOT_AUTHORIZED"
# Additive: creating one more topic would exceed the pod's --max-topics.
TOPIC_LIMIT = "TOPIC_LIMIT"
# Additive (admin): deleting a group that still has live members, without --force.
NON_EMPTY_GROUP = "NON_EMPTY_GROUP"
# Additive: JOIN of a group name that live Kafka consumers (either Kafka protocol) use:
# memberships are per protocol (offsets are shared). Retry once they are gone.
GROUP_IN_USE = "GROUP_IN_USE"

# Codes a Lua script may raise as an error reply "<CODE> <message>".
SCRIPT_CODES = frozenset(
    {BAD_REQUEST, NOT_LEADER, GENERATION_MISMATCH, REPLICATION_TIMEOUT, UNKNOWN_TOPIC,
     NON_EMPTY_GROUP}
)  # fmt: skip


class BrokerError(Exception):
    """A request failed with a V1 error code; the connection stays usable."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class BadRequest(BrokerError):
    def __init__(self, message: str) -> None:
        super().__init__(BAD_REQUEST, message)


class Unavailable(BrokerError):
    """Redis could not be reached: the request was not sent to it, so nothing was done."""

    def __init__(self, message: str) -> None:
        super().__init__(UNAVAILABLE, message)


class OutcomeUnknown(Unavailable):
    """The request was sent to Redis, then the connection failed or went silent before its
    reply: it may or may not have run. V1 answers UNAVAILABLE (documented as "may have been
    written"); Kafka's Produce answers REQUEST_TIMED_OUT, never a "not written" code (see
    adapter/kafka/errors.py)."""


class ConfigurationError(Exception):
    """The pod's settings disagree with the deployment stored in Redis: refuse to start."""


def from_script_error(text: str) -> BrokerError | None:
    """The BrokerError a script's error reply ``"<CODE> <message>"`` stands for, if any."""
    code, _, message = text.partition(" ")
    if code in SCRIPT_CODES:
        return BrokerError(code, message)
    return None
