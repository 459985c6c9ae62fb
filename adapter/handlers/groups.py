"""JOIN, SYNC, HEARTBEAT, LEAVE, COMMIT and OFFSET: consumer groups keyed by (group, topic)."""

from __future__ import annotations

from adapter.handlers import Context, Handler, Starter, args
from mapping.assignors import ASSIGNORS
from mapping.batcher import Pending
from mapping.errors import BadRequest

JOIN_USAGE = "JOIN requires: <group> <topic> <consumer_id> [assignor=round_robin|range]"
COMMIT_USAGE = "COMMIT requires: <group> <topic> <consumer_id> <generation> <partition> <offset>"
OFFSET_USAGE = "OFFSET requires: <group> <topic> <partition>"
# Offsets are signed 64-bit as in Kafka.
MAX_OFFSET = (1 << 63) - 1


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


def _join_args(argv: list[str]) -> tuple[str, str, str, str | None]:
    args.expect_count(argv, JOIN_USAGE, 3, 4)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    member = args.name(argv[2], "consumer_id")
    return group, topic, member, _assignor(argv)


async def join(context: Context, argv: list[str]) -> str:
    group, topic, member, assignor = _join_args(argv)
    config = await context.store.topic(topic)
    membership = await context.groups.join(group, topic, config.partitions, member, assignor)
    return _assigned(membership.generation, membership.assigned)


def join_now(context: Context, argv: list[str]) -> Pending[str] | None:
    """JOIN queued without a task of its own (known topic); None: run ``join``."""
    group, topic, member, assignor = _join_args(argv)
    config = context.store.known_topic(topic)
    if config is None:
        return None
    pending = context.groups.start_join(group, topic, config.partitions, member, assignor)
    return pending.then(lambda membership: _assigned(membership.generation, membership.assigned))


async def sync(context: Context, argv: list[str]) -> str:
    group, topic, member, generation = _member_args(argv, _usage("SYNC"), 4)
    config = await context.store.topic(topic)
    membership = await context.groups.sync(group, topic, config.partitions, member, generation)
    return _assigned(membership.generation, membership.assigned)


async def heartbeat(context: Context, argv: list[str]) -> str:
    group, topic, member, generation = _member_args(argv, _usage("HEARTBEAT"), 4)
    config = await context.store.topic(topic)
    await context.groups.heartbeat(group, topic, config.partitions, member, generation)
    return "heartbeat=ok"


def heartbeat_now(context: Context, argv: list[str]) -> Pending[str] | None:
    """HEARTBEAT queued without a task of its own (known topic); None: run ``heartbeat``."""
    group, topic, member, generation = _member_args(argv, _usage("HEARTBEAT"), 4)
    config = context.store.known_topic(topic)
    if config is None:
        return None
    pending = context.groups.start_heartbeat(group, topic, config.partitions, member, generation)
    return pending.then(lambda _: "heartbeat=ok")


async def leave(context: Context, argv: list[str]) -> str:
    group, topic, member, generation = _member_args(argv, _usage("LEAVE"), 4)
    config = await context.store.topic(topic)
    await context.groups.leave(group, topic, config.partitions, member, generation)
    return "left=true"


def _commit_args(argv: list[str]) -> tuple[str, str, str, int, int, int]:
    group, topic, member, generation = _member_args(argv, COMMIT_USAGE, 6)
    partition = args.integer(argv[4], "partition", minimum=0)
    offset = args.integer(argv[5], "offset", minimum=0)
    if offset > MAX_OFFSET:
        raise BadRequest("invalid offset")
    return group, topic, member, generation, partition, offset


async def commit(context: Context, argv: list[str]) -> str:
    group, topic, member, generation, partition, offset = _commit_args(argv)
    config = await context.store.partition_of(topic, partition)
    await context.groups.commit(
        group, topic, config.partitions, member, generation, partition, offset
    )
    return "committed=true"


def commit_now(context: Context, argv: list[str]) -> Pending[str] | None:
    """COMMIT queued without a task of its own (known topic); None: run ``commit``."""
    group, topic, member, generation, partition, offset = _commit_args(argv)
    config = context.store.known_topic(topic)
    if config is None:
        return None
    if not 0 <= partition < config.partitions:
        raise BadRequest("invalid partition")
    pending = context.groups.start_commit(
        group, topic, config.partitions, member, generation, partition, offset
    )
    return pending.then(lambda _: "committed=true")


async def offset(context: Context, argv: list[str]) -> str:
    args.expect_count(argv, OFFSET_USAGE, 3)
    group = args.name(argv[0], "group")
    topic = args.name(argv[1], "topic")
    partition = args.integer(argv[2], "partition", minimum=0)
    await context.store.partition_of(topic, partition)
    return f"offset={await context.groups.committed(group, topic, partition)}"


STARTERS: dict[str, Starter] = {
    "JOIN": join_now,
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
