"""What the source and the sink raise for problems a user can fix, on the driver before any
task runs (or in a task, for what changed after planning)."""

from __future__ import annotations


class ConnectorError(Exception):
    """A problem the user can fix: raised on the driver before any task runs."""


class OptionError(ConnectorError, ValueError):
    """An option is missing or malformed, or names what the topics do not have."""


class TopicNotFound(ConnectorError):
    """The topic's hash does not exist in Redis."""


class RedisUnreachable(ConnectorError):
    """Redis did not answer."""


class RedisPermissionDenied(ConnectorError):
    """Redis refused a command or key to the connector's ACL user (NOPERM): the user is
    confined to another deployment's prefix, or lacks a command of the connector's rule."""


class DataLoss(ConnectorError):
    """Records the query must read were removed (retention, a deleted topic) before it read
    them."""


class NoOffsetForTimestamp(ConnectorError):
    """A starting timestamp has no committed record at or after it and
    startingOffsetsByTimestampStrategy is ``error`` (Spark's default)."""
