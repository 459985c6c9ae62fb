"""JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET: consumer groups keyed by (group, topic)."""

from __future__ import annotations

import asyncio

from adapter.v1.handlers import Context, Handler, Starter, args, on_topic
from adapter.v1.handlers.acks import durable_wait
from mapping.connection.batcher import Pending
from mapping.core.codec import MAX_OFFSET
from mapping.core.errors import GROUP_IN_USE, BadRequest, BrokerError
from mapping.group.assignors import ASSIGNORS
from mapping.group.groups import kafka_members_live
from mapping.topic.topic_config import TopicConfig

JOIN_USAGE = "JOIN requires: <group> <topic> <consumer_id> [assignor=round_robin|range]"
COMMIT_USAGE = "COMMIT requires: <group> <topic> <consumer_id> <generation> <partition> <offset>"
OFFSET_USAGE = "OFFSET requires: <group> <topic> <partition>"
# Offsets are signed 64-bit as in Kafka.


def _usage(command: str) -> str:
    return f"{command} requires: <group> <topic> <consumer_id> <generation>"


def _assignor(argv: list[str]) -> str | None:
    """None: keep the group's assignor. Key and value are case-insensitive, like acks=."""
    if len(argv) < 4:
        return None
    name, sep, value = argv[3].partition("=")
    value = value.lower()
    if not sep or name.lower() != "assignor" or value not in ASSIGNORS:
        raise BadRequest("invalid assignor: must be assignor=round_robin or assignor=range")
    return value


def _member_args(argv: list[str], usage: str, count: int) -> tuple[str, str, str, int]:
    """group, topic, consumer_id, generation: the first four args of a member's request."""
    args.expect_count(argv, usage, count)
    return (
        args.name(argv[0], "group"),
        args.name(argv[1], "topic"),
        args.name(argv[2], "consumer_id"),
        args.integer(argv[3], "generation"),
    )


def _assigned(generation: int, partitions: list[int]) -> str:
    return f"generation={generation} assigned=[{' '.join(map(str, partitions))}]"


JoinArgs = tuple[str, str, str, str | None]  # topic, group, consumer_id, assignor


def _join_args(argv: list[str]) -> JoinArgs:
    """(topic, group, consumer_id, assignor) of a valid JOIN."""
    args.expect_count(argv, JOIN_USAGE, 3, 4)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    member = args.name(argv[2], "consumer_id")
    return topic, group, member, _assignor(argv)


def _join(context: Context, config: TopicConfig, parsed: JoinArgs) -> Pending[str]:
    _, group, member, assignor = parsed
    pending = context.pod.groups.start_join(group, config.name, config.partitions, member, assignor)
    return pending.then(lambda membership: _assigned(membership.generation, membership.assigned))


_join_on_topic, _ = on_topic(_join_args, _join)


async def join(context: Context, argv: list[str]) -> str:
    """JOIN, refused (GROUP_IN_USE) while Kafka consumers of the group name are live: one
    read-only script on the Kafka group's keys before V1's own. Not a pipelined starter:
    the check comes first."""
    _, group, _, _ = _join_args(argv)
    if await kafka_members_live(context.pod.topics.batcher, context.pod.topics.keys, group):
        raise BrokerError(GROUP_IN_USE, f"group {group} has live Kafka consumers")
    answer = await _join_on_topic(context, argv)
    await durable_wait(context.pod.replication.acks)
    return answer


async def sync(context: Context, argv: list[str]) -> str:
    group, topic, member, generation = _member_args(argv, _usage("SYNC"), 4)
    config = await context.pod.topics.topic(topic)
    membership = await context.pod.groups.sync(group, topic, config.partitions, member, generation)
    await durable_wait(context.pod.replication.acks)
    return _assigned(membership.generation, membership.assigned)


HeartbeatArgs = tuple[str, str, str, int]  # topic, group, consumer_id, generation


def _heartbeat_args(argv: list[str]) -> HeartbeatArgs:
    group, topic, member, generation = _member_args(argv, _usage("HEARTBEAT"), 4)
    return topic, group, member, generation


def _heartbeat(context: Context, config: TopicConfig, parsed: HeartbeatArgs) -> Pending[str]:
    _, group, member, generation = parsed
    pending = context.pod.groups.start_heartbeat(
        group, config.name, config.partitions, member, generation
    )
    return pending.then(lambda _: "heartbeat=ok")


heartbeat, heartbeat_now = on_topic(_heartbeat_args, _heartbeat)


async def leave(context: Context, argv: list[str]) -> str:
    group, topic, member, generation = _member_args(argv, _usage("LEAVE"), 4)
    config = await context.pod.topics.topic(topic)
    await context.pod.groups.leave(group, topic, config.partitions, member, generation)
    return "left=true"


# topic, group, consumer_id, generation, partition, offset
CommitArgs = tuple[str, str, str, int, int, int]


def _commit_args(argv: list[str]) -> CommitArgs:
    """(topic, group, consumer_id, generation, partition, offset) of a valid COMMIT."""
    group, topic, member, generation = _member_args(argv, COMMIT_USAGE, 6)
    partition = args.integer(argv[4], "partition", minimum=0)
    offset = args.integer(argv[5], "offset", minimum=0)
    if offset > MAX_OFFSET:
        raise BadRequest("invalid offset")
    return topic, group, member, generation, partition, offset


def _commit(context: Context, config: TopicConfig, parsed: CommitArgs) -> Pending[str]:
    _, group, member, generation, partition, offset = parsed
    if not 0 <= partition < config.partitions:
        raise BadRequest("invalid partition")
    pending = context.pod.groups.start_commit(
        group, config.name, config.partitions, member, generation, partition, offset
    )
    if not context.pod.replication.acks.waits_for_redis_replicas:
        return pending.then(lambda _: "committed=true")
    # --redis-wait-replicas: answered once the Redis replicas have it, so a failover cannot
    # take a commit back (the consumer would read again what it had committed past).
    return Pending(asyncio.ensure_future(_durable_commit(context, pending)), lambda done: done)


async def _durable_commit(context: Context, pending: Pending[object]) -> str:
    await pending
    await durable_wait(context.pod.replication.acks)
    return "committed=true"


commit, commit_now = on_topic(_commit_args, _commit)


async def offset(context: Context, argv: list[str]) -> str:
    args.expect_count(argv, OFFSET_USAGE, 3)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    partition = args.integer(argv[2], "partition", minimum=0)
    await context.pod.topics.partition_of(topic, partition)
    committed = await context.pod.groups.committed(group, topic, partition)
    # --redis-wait-replicas: served once the Redis replicas have it, so that no failover
    # makes a committed offset go backwards (mapping/replication/durable_reads.py)
    await durable_wait(context.pod.replication.acks)
    return f"offset={committed}"


STARTERS: dict[str, Starter] = {
    "HEARTBEAT": heartbeat_now,
    "COMMIT": commit_now,
}

HANDLERS: dict[str, Handler] = {
    "JOIN": join,
    "SYNC": sync,
    "HEARTBEAT": heartbeat,
    "LEAVE": leave,
    "COMMIT": commit,
    "OFFSET": offset,
}
