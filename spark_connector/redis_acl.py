"""The Redis ACL rule of a Spark job confined to one deployment's keys.

Spark jobs talk to Redis, not to the pods, so the pods' Kafka ACLs never see them: what keeps
one deployment's jobs off another's topics is a Redis ACL user whose key and channel patterns
are that deployment's prefix. The commands are exactly those the connector sends, the reader's
and (unless read only) the sink's and the group commit's, including the commands its Lua
scripts run (Redis checks those against the calling user too).

    python -m spark_connector.redis_acl --key-prefix rsa [--read-only] [--user spark]

prints the ``ACL SETUSER`` line (the password is left as ``>PASSWORD`` to fill in).
"""

from __future__ import annotations

import argparse

# The source: PING on connect (and redis-py's health checks), SELECT for a URL naming a
# database other than 0, the topic and partition hashes, the topics set, the logs (XRANGE,
# XREVRANGE), a partition's aborted transactions (ZRANGEBYSCORE) and a group's offsets.
READ_COMMANDS = (
    "ping", "select", "hget", "hmget", "hgetall", "smembers",
    "xrange", "xrevrange", "zrangebyscore",
)  # fmt: skip
# The sink and the example pipeline's group commit on top: the scripts by SHA (loaded once
# per task), what those scripts run (spark/sink_append, spark/commit, topic/ensure,
# partition/revive, partition/status, offsets_topic/append), a new topic's announcement
# (SADD, HSET, PUBLISH) and acks=all's wait on the hw channels (SUBSCRIBE). Never SCAN,
# KEYS, INFO, CLIENT, CONFIG or FLUSH*.
WRITE_COMMANDS = (
    "evalsha", "script|load",
    "hset", "hsetnx", "hdel", "hexists", "sadd", "exists", "del",
    "xadd", "xlen", "xtrim", "zadd", "time",
    "publish", "subscribe", "unsubscribe",
)  # fmt: skip


# The keys (after "<prefix>:") the reader touches: the deployment's sequence bits, the topics
# set, topic and partition keys, a group's committed offsets (startingOffsets=group:).
READ_KEYS = ("meta", "topics", "topic:*", "part:*", "group:*")
# The sink's and the group commit's on top: a new topic's id index, the broker configs (a
# new topic's defaults), the groups set, the probe WAIT counts (--redis-wait-replicas).
WRITE_KEYS = ("topics:ids", "broker:{configs}", "groups", "wait_probe")
# The channels it publishes (a new topic's name; hw and appended notifications from the
# scripts) and subscribes to (acks=all waits on the hw channels).
WRITE_CHANNELS = ("topics:created", "part:*")


def acl_rule(prefix: str, *, read_only: bool = False) -> list[str]:
    """The ``ACL SETUSER <user>`` arguments after the user name (without ``on`` and the
    password): ``prefix``'s keys and channels that the connector uses, not the rest of the
    deployment's (its users, SCRAM secrets, Kafka ACL bindings and quotas stay out of reach),
    and the connector's commands."""
    keys = READ_KEYS if read_only else READ_KEYS + WRITE_KEYS
    commands = READ_COMMANDS if read_only else READ_COMMANDS + WRITE_COMMANDS
    # reset* and -@all first: a rule applied to an existing user replaces what it had
    rule = ["resetkeys", "resetchannels", "-@all", *(f"~{prefix}:{key}" for key in keys)]
    if not read_only:
        rule += [f"&{prefix}:{channel}" for channel in WRITE_CHANNELS]
    return rule + [f"+{command}" for command in commands]


def setuser_line(prefix: str, user: str = "spark", *, read_only: bool = False) -> str:
    """The whole command, as redis-cli takes it."""
    rule = acl_rule(prefix, read_only=read_only)
    return " ".join(["ACL SETUSER", user, "on", ">PASSWORD", *rule])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m spark_connector.redis_acl",
        description="Print the Redis ACL rule of a Spark job confined to one deployment.",
    )
    parser.add_argument("--key-prefix", default="rsa", help="the deployment's key prefix")
    parser.add_argument("--user", default="spark", help="the Redis user name")
    parser.add_argument("--read-only", action="store_true", help="a job that only reads")
    args = parser.parse_args(argv)
    print(setuser_line(args.key_prefix, args.user, read_only=args.read_only))


if __name__ == "__main__":
    main()
