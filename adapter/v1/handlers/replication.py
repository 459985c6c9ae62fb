"""REPLICA_FETCH: a follower reports "replica <id> has everything up to <offset>"."""

from __future__ import annotations

from adapter.v1.handlers import Context, Handler, args
from mapping.core.codec import MAX_OFFSET
from mapping.core.errors import BadRequest

USAGE = "REPLICA_FETCH requires: <topic> <partition> <replica_id> <offset>"
# Offsets are signed 64-bit as in Kafka; -1 is "nothing yet" (an empty follower).


def _bool(value: bool) -> str:
    return "true" if value else "false"


async def replica_fetch(context: Context, argv: list[str]) -> str:
    args.expect_count(argv, USAGE, 4)
    topic = args.name(argv[0], "topic")
    partition = args.integer(argv[1], "partition", minimum=0)
    replica_id = args.integer(argv[2], "replica id")
    offset = args.integer(argv[3], "offset", minimum=-1)
    if offset > MAX_OFFSET:
        raise BadRequest("invalid offset")
    config = await context.pod.topics.partition_of(topic, partition)
    if not 1 <= replica_id < config.replication_factor:
        raise BadRequest("invalid replica id")
    result = await context.pod.partitions.replica_fetch(config, partition, replica_id, offset)
    # Past the log end: clamped for the ISR, echoed as sent. Stopped short by the per-call copy
    # bound: the offset really held, so the follower knows to fetch again.
    acked = offset if result.complete else result.acked_offset
    isr = " ".join(map(str, result.isr))
    return (
        f"replica={replica_id} acked_offset={acked} hw={result.high_watermark} isr=[{isr}] "
        f"under_replicated={_bool(result.under_replicated(config))}"
    )


HANDLERS: dict[str, Handler] = {"REPLICA_FETCH": replica_fetch}
